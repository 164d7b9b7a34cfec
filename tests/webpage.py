"""`tether web` as tests (and ``make screenshots``) drive it: the real command as a
subprocess, Debian's chromium, headless, through Playwright."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.harness import TETHER, DaemonProc

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = os.environ.get("TETHER_SCREENSHOTS")  # a directory: save a picture of each view


def need_browser() -> None:
    if CHROMIUM is None:
        if os.environ.get("TETHER_REQUIRE_DOCKER") == "1":
            pytest.fail("CI needs Debian's chromium for the dashboard tests (.ci/provision.sh)")
        pytest.skip("chromium is not installed (apt-get install chromium)")


class Web:
    """``tether web --port 0`` on a daemon's home; ``url`` carries the token."""

    def __init__(self, d: DaemonProc, *extra: str, cwd: Path | None = None) -> None:
        self.proc = subprocess.Popen([*TETHER, "--home", str(d.home), "web", "--port", "0",
                                      *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=d.env, start_new_session=True, cwd=cwd)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        m = re.search(r"(http://\S+)", line)
        assert m, (line, self.proc.stderr.read().decode() if self.proc.stderr else "")
        self.url = m.group(1)
        self.base = self.url.split("/?")[0]
        self.token = self.url.split("token=")[1]
        self.port = int(self.base.rsplit(":", 1)[1])

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@contextmanager
def chromium(**context: Any) -> Iterator[Any]:
    """A browser context (``context``: Playwright's options, e.g. ``timezone_id``)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--disable-gpu"])
        try:
            yield browser.new_context(viewport={"width": 1400, "height": 900}, **context)
        finally:
            browser.close()


def open_page(ctx: Any, url: str, ready: str = "#daemon.ok") -> Any:
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.errors = errors
    page.goto(url)
    page.wait_for_selector(ready, timeout=15000)
    return page


def shot(pg: Any, name: str, *, full_page: bool = False) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=full_page)


def term_text(pg: Any) -> str:
    text: str = pg.evaluate("""() => { const t = window.tetherTerm; if (!t) return "";
        const b = t.buffer.active; const out = [];
        for (let i = 0; i < b.length; i++) out.push(b.getLine(i).translateToString(true));
        return out.join("\\n"); }""")
    return text
