"""The price table and cost sums (pure): prefix and date lookup, the override file,
errors that name the file and key, and unknown models never summed as free."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from tether.cost import prices as px
from tether.cost import report as rp

DAY = dt.date(2026, 11, 25)


def test_shipped_table_prices_dated_model_ids_by_the_longest_prefix() -> None:
    t = px.load(None)
    for model in ("claude-sonnet-4-5-20250929", "claude-opus-4-1-20250805", "gpt-5-mini",
                  "gemini-2.5-flash-lite", "o4-mini-2025-04-16"):
        p = t.lookup(model, DAY)
        assert p is not None and model.startswith(p.model), model
    opus = t.lookup("claude-opus-4-1-20250805", DAY)
    assert opus is not None and opus.model == "claude-opus-4-1"
    assert t.lookup("claude-opus-4-5", DAY).input == 5.0  # type: ignore[union-attr]
    assert t.lookup("gpt-50", DAY) is None  # a prefix only up to a '-'
    assert t.lookup("llama-3", DAY) is None and t.lookup(None, DAY) is None
    p = t.lookup("claude-sonnet-4-5", DAY)
    assert p is not None and p.cost({"input_tokens": 1_000_000, "output_tokens": 1_000_000,
                                     "cache_read_tokens": 1_000_000,
                                     "cache_creation_tokens": 1_000_000,
                                     "reasoning_tokens": 5}) == pytest.approx(3 + 15 + 0.3 + 3.75)


def test_dated_entries_and_the_override_replacing_a_model(tmp_path: Path) -> None:
    f = tmp_path / "prices.toml"
    f.write_text('[[price]]\nmodel = "m"\nsince = 2026-01-01\ninput = 1\noutput = 2\n'
                 '[[price]]\nmodel = "m"\nsince = 2026-06-01\ninput = 3\noutput = 4\n'
                 '[[price]]\nmodel = "claude-sonnet-4-5"\ninput = 9\noutput = 9\n')
    t = px.load(f)
    assert t.lookup("m", dt.date(2025, 1, 1)).input == 1  # type: ignore[union-attr]
    assert t.lookup("m", dt.date(2026, 5, 31)).input == 1  # type: ignore[union-attr]
    assert t.lookup("m", dt.date(2026, 6, 1)).input == 3  # type: ignore[union-attr]
    sonnet = t.lookup("claude-sonnet-4-5", DAY)
    assert sonnet is not None and sonnet.input == 9 and sonnet.cache_read == 9  # defaults
    assert t.files == ["tether/cost/prices.toml", str(f)]
    assert px.load(tmp_path / "absent.toml").files == ["tether/cost/prices.toml"]


@pytest.mark.parametrize(("text", "names"), [
    ("[[price]\n", ["not valid TOML"]),
    ('[[price]]\nmodel = "m"\ninput = "cheap"\noutput = 1\n', ["price[0]", "'m'", "'input'"]),
    ('[[price]]\nmodel = "m"\ninput = 1\n', ["'output'", "missing"]),
    ('[[price]]\nmodel = "m"\ninput = -1\noutput = 1\n', ["'input'", "non-negative"]),
    ('[[price]]\nmodel = "m"\ninput = 1\noutput = 1\nsince = "soon"\n', ["'since'"]),
    ('[[price]]\nmodel = "m"\ninput = 1\noutput = 1\nprice = 3\n', ["unknown key 'price'"]),
    ('[[price]]\ninput = 1\noutput = 1\n', ["'model'"]),
    ('prices = 1\n', ["unknown top-level key 'prices'"]),
])
def test_bad_files_name_the_file_and_key(tmp_path: Path, text: str, names: list[str]) -> None:
    f = tmp_path / "prices.toml"
    f.write_text(text)
    with pytest.raises(px.PriceError) as e:
        px.load(f)
    assert str(f) in str(e.value)
    for n in names:
        assert n in str(e.value)


def test_a_report_never_counts_an_unknown_model_as_free() -> None:
    t = px.load(None)

    def turn(model: str | None, lineage: str, **usage: int) -> rp.Turn:
        return rp.Turn(key=lineage, day=DAY, model=model, usage=usage)

    turns = [turn("claude-haiku-4-5", "a", input_tokens=2_000_000),
             turn("mystery", "b", output_tokens=10), turn(None, "b", input_tokens=1)]
    r = rp.report(t, turns, "lineage", price_file="/h/prices.toml")
    rows = {x["key"]: x for x in r["rows"]}
    assert rows["a"]["cost_usd"] == pytest.approx(2.0)
    assert rows["b"]["cost_usd"] is None and rows["b"]["unpriced_turns"] == 2
    assert r["total"]["cost_usd"] is None and r["total"]["priced_usd"] == pytest.approx(2.0)
    assert len(r["notes"]) == 2 and all("/h/prices.toml" in n for n in r["notes"])
    with pytest.raises(ValueError, match="one of"):
        rp.report(t, turns, "colour", price_file="x")


def test_every_shipped_model_has_its_limits_and_an_override_inherits_them(
        tmp_path: Path) -> None:
    t = px.load(None)
    for model in t.models():
        window, out = t.limits(model, DAY)
        assert window < px.DEFAULT_CONTEXT_WINDOW and out < px.DEFAULT_MAX_OUTPUT, model
    assert t.limits("claude-opus-4-1-20250805", DAY) == (1_000_000, 32_000)
    assert t.limits("llama-9", DAY) == (px.DEFAULT_CONTEXT_WINDOW, px.DEFAULT_MAX_OUTPUT)
    f = tmp_path / "prices.toml"
    f.write_text('[[price]]\nmodel = "gpt-4o"\ninput = 1\noutput = 2\n'
                 '[[price]]\nmodel = "mine"\ninput = 1\noutput = 2\ncontext_window = 8000\n')
    t = px.load(f)
    assert t.limits("gpt-4o", DAY) == (128_000, 16_384)  # the shipped entry's
    assert t.limits("mine", DAY) == (8000, px.DEFAULT_MAX_OUTPUT)
    f.write_text('[[price]]\nmodel = "m"\ninput = 1\noutput = 2\ncontext_window = 0\n')
    with pytest.raises(px.PriceError, match="'context_window'"):
        px.load(f)


def test_usage_is_bounded_by_what_the_model_can_have_produced() -> None:
    """Issue 21 finding 4: the window per request on the input side (the input keys
    scaled together), the output limit per request, one request per second elapsed."""
    from tether.cost import limits

    big = 2**63 - 1
    b = limits.bound({"input_tokens": big, "cache_read_tokens": big, "output_tokens": big,
                      "reasoning_tokens": big}, window=1000, max_output=100, elapsed=2.5)
    assert b.capped and b.calls == 3
    assert b.usage == {"input_tokens": 1500, "cache_read_tokens": 1500, "output_tokens": 300,
                       "reasoning_tokens": 3000}
    honest = {"input_tokens": 30 * 50_000, "output_tokens": 30 * 800}  # 30 calls, 2 min
    b = limits.bound(honest, window=200_000, max_output=32_000, elapsed=120)
    assert not b.capped and b.usage == honest
    b = limits.bound({"input_tokens": 300, "cache_read_tokens": 100}, window=200,
                     max_output=1, elapsed=0)
    assert b.usage == {"input_tokens": 150, "cache_read_tokens": 50}  # shares kept
