"""Secrets shown without them, and read only from a file of one's own (issue 21 findings
3 and 5): URL redaction and the fleet URL's sources."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.fleet import url as fleet
from tether.model.secrets import has_password, redact_url


@pytest.mark.parametrize("url, shown, secret", [
    ("postgresql://u:pw@h/db", "postgresql://u:***@h/db", True),
    ("postgresql://u@h/db?host=/s&password=pw", "postgresql://u@h/db?host=/s&password=***",
     True),
    ("host=h password=pw user=u", "host=h password=*** user=u", True),
    ("password='p w' host=h", "password=*** host=h", True),
    ("postgresql://u@/db?host=/s", "postgresql://u@/db?host=/s", False),
    ("https://user:pw@example.com/hook?x=1", "https://***@example.com/hook?x=1", True),
    ("https://ghp_token@example.com/hook", "https://***@example.com/hook", True),
    ("https://example.com/hook", "https://example.com/hook", False),
])
def test_a_password_in_a_url_is_shown_as_stars(url: str, shown: str, secret: bool) -> None:
    assert redact_url(url) == shown and has_password(url) is secret
    assert "pw" not in redact_url(url).replace("password", "")


def test_the_fleet_url_comes_from_a_flag_a_variable_or_a_private_file(tmp_path: Path) -> None:
    f = tmp_path / "url"
    f.write_text("  postgresql://u:pw@h/db  \nignored\n")
    f.chmod(0o600)
    assert fleet.resolve(None, str(f), {}) == "postgresql://u:pw@h/db"
    assert fleet.resolve(None, None, {fleet.ENV: "postgresql://h/a"}) == "postgresql://h/a"
    assert fleet.resolve(None, None, {fleet.FILE_ENV: str(f)}) == "postgresql://u:pw@h/db"
    assert fleet.resolve("postgresql://h/b", None, {fleet.ENV: "x"}) == "postgresql://h/b"
    assert fleet.resolve(None, None, {}) is None
    with pytest.raises(ValueError, match="once"):
        fleet.resolve("postgresql://h/b", str(f), {})
    f.chmod(0o640)
    with pytest.raises(fleet.SecretFileError, match=f"chmod 600 {f}"):
        fleet.resolve(None, str(f), {})
    f.chmod(0o600)
    link = tmp_path / "link"
    link.symlink_to(f)
    with pytest.raises(fleet.SecretFileError, match="symlink"):
        fleet.resolve(None, str(link), {})
    empty = tmp_path / "empty"
    empty.write_text("\n")
    empty.chmod(0o600)
    with pytest.raises(fleet.SecretFileError, match="empty"):
        fleet.resolve(None, str(empty), {})
    assert fleet.warn_argv("postgresql://u:pw@h/db") == fleet.ARGV_WARNING
    assert fleet.warn_argv("postgresql://u@h/db") is None
    assert os.environ.get(fleet.ENV) is None
