"""``cli.pstable.plain`` prints what rich prints for ``tether ps`` on a pipe, or declines;
the fast path's home and socket are the SDK's."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table

from tether.cli import fast, pstable
from tether.client.daemonctl import resolve_home
from tether.model.layout import HomeLayout


def _rich(cols: list[str], rows: list[list[str]]) -> str:
    """``output.exec_table``'s rendering, into a string."""
    t = Table(box=None, pad_edge=False, header_style="bold")
    for col in cols:
        t.add_column(col, overflow="fold" if col == "COMMAND" else "ellipsis", no_wrap=True)
    for cells in rows:
        t.add_row(*cells)
    f = io.StringIO()
    Console(file=f, highlight=False, width=pstable.PIPE_WIDTH).print(t)
    return f.getvalue()


CELLS = ["-", "", " ", "x", "a b", "sleep 3600", "0123456789abcdef", "RUNNING", "sig9",
         "sh -c 'echo a >&2'", "2026-11-25 01:54:09", "ends in space ", " starts",
         "http://h:80/p", "100%", "a:1:b", "1:2:3:4", "x ::y", "x" * 60, "y" * 150]


@pytest.mark.parametrize("seed", range(40))
def test_plain_is_what_rich_prints_or_nothing(seed: int) -> None:
    rnd = random.Random(seed)
    cols = [f"C{i}" * rnd.randint(1, 4) for i in range(rnd.randint(1, 8))] + ["COMMAND"]
    rows = [[rnd.choice(CELLS) for _ in cols] for _ in range(rnd.randint(0, 6))]
    text = pstable.plain(cols, rows)
    if text is None:  # declined: only when too wide for the pipe's width
        assert sum(max([len(c), *(len(r[i]) for r in rows)])
                   for i, c in enumerate(cols)) + 2 * len(cols) - 2 > pstable.PIPE_WIDTH
    else:
        assert text == _rich(cols, rows)


@pytest.mark.parametrize("cell", ["[bold]x[/]", "a :smile: b", "tab\there", "naïve", "\x1b[1m",
                                  "a:100:b", ":thumbs_up-text:", "x:-1:"])
def test_plain_declines_what_rich_would_rewrite(cell: str) -> None:
    assert pstable.plain(["ID", "COMMAND"], [["x", cell]]) is None


@pytest.mark.parametrize("env", [{}, {"TETHER_HOME": "~/th"}, {"TETHER_HOME": "rel/h"},
                                 {"XDG_STATE_HOME": "/x/state"}, {"XDG_STATE_HOME": "~/s"}])
@pytest.mark.parametrize("given", [None, "/abs/h", "rel/../h", "~/h"])
def test_fast_home_is_the_sdks(monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
                               given: str | None) -> None:
    for k in ("TETHER_HOME", "XDG_STATE_HOME"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert fast.resolve_home(given) == str(resolve_home(given))
    home = fast.resolve_home(given)
    assert str(HomeLayout(Path(home)).socket) == f"{home}/{fast.SOCKET_NAME}"


def test_an_ended_lineage_shows_no_lifecycle_but_dead() -> None:
    """Issue 23 item 11: a FAILED lineage showed lifecycle HEALTHY."""
    from tether.cli.pstable import lifecycle_cell

    assert lifecycle_cell("FAILED", "HEALTHY") == "-"
    assert lifecycle_cell("REAPED", "AGING") == "-"
    assert lifecycle_cell("FINISHED", "DEAD") == "DEAD"  # why it ended
    assert lifecycle_cell("ACTIVE", "DYING") == "DYING"
    assert lifecycle_cell("WAITING_LIMIT", "HEALTHY") == "HEALTHY"
