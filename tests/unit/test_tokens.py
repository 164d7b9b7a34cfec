"""Agent tokens on their own: what the store keeps of one, and which token speaks for
which lineage row (older rows, which held the token itself, included)."""

from __future__ import annotations

import msgspec

from tether.daemon.agents.core import token_digest
from tether.daemon.agents.protocol import _token_matches
from tether.model.records import AgentConfig, LineageRecord

TOKEN = "ab" * 16


def _row(**fields: str) -> LineageRecord:
    return LineageRecord(id="l1", config=AgentConfig(argv=["x"]), **fields)


def test_a_row_keeps_the_digest_and_accepts_only_its_token() -> None:
    rec = _row(token_sha256=token_digest(TOKEN))
    assert TOKEN not in msgspec.json.encode(rec).decode()
    assert _token_matches(rec, TOKEN)
    assert not _token_matches(rec, "cd" * 16)
    assert not _token_matches(rec, "")
    assert not _token_matches(rec, token_digest(TOKEN))  # the stored digest is no token


def test_an_older_row_with_the_token_itself_still_accepts_it_until_the_next_attempt() -> None:
    old = msgspec.json.decode(b'{"id": "l1", "config": {"argv": ["x"]}, "token": "%s"}'
                              % TOKEN.encode(), type=LineageRecord)
    assert old.token_sha256 == "" and _token_matches(old, TOKEN)
    assert not _token_matches(old, "cd" * 16)
    assert not _token_matches(_row(), "")  # a row with no token accepts none
    # the next attempt's commit sets the digest and clears the token
    new = msgspec.structs.replace(old, token_sha256=token_digest("ef" * 16), token="")
    assert not _token_matches(new, TOKEN) and _token_matches(new, "ef" * 16)
