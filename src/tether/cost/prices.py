"""The price table: US dollars per million tokens, per model, dated.

Shipped as ``prices.toml`` beside this module; ``<home>/prices.toml`` (same format)
overrides it model by model. A price is looked up by the longest model name that the
turn's model id starts with, then by date, so a dated model id
(``claude-sonnet-4-5-20250929``) and a price change are both handled by the table,
never by code.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

#: Usage keys (as agents report them) and the price each is billed at.
TOKEN_PRICES = {"input_tokens": "input", "output_tokens": "output",
                "cache_read_tokens": "cache_read", "cache_creation_tokens": "cache_write"}
SHIPPED = "prices.toml"
#: The limits of a model the table does not know (no model has more today).
DEFAULT_CONTEXT_WINDOW = 10_000_000
DEFAULT_MAX_OUTPUT = 1_000_000


class PriceError(ValueError):
    """A price file that cannot be used: names the file and the key to fix."""


@dataclass(frozen=True)
class Price:
    model: str
    since: dt.date
    input: float
    output: float
    cache_read: float
    cache_write: float
    source: str
    origin: str  # the file it came from
    context_window: int | None = None  # tokens one request may carry (input side)
    max_output: int | None = None  # tokens one response may have

    def cost(self, usage: dict[str, int]) -> float:
        """Dollars for these token counts (keys without a price, e.g. a provider's own
        extra counters, are not billed: they are already inside these four)."""
        return sum(int(n) * float(getattr(self, TOKEN_PRICES[k]))
                   for k, n in usage.items() if k in TOKEN_PRICES) / 1_000_000


class PriceTable:
    def __init__(self, prices: dict[str, list[Price]], files: list[str]) -> None:
        self._by_model = {m: sorted(ps, key=lambda p: p.since) for m, ps in prices.items()}
        # Longest first: "claude-opus-4-1" must win over "claude-opus-4".
        self._names = sorted(self._by_model, key=len, reverse=True)
        self.files = files

    def lookup(self, model: str | None, day: dt.date) -> Price | None:
        """The price of ``model`` on ``day``; None when no entry's model prefixes it."""
        if not model:
            return None
        name = model.lower()
        for known in self._names:
            if name == known or name.startswith(known + "-") or name.startswith(known + "@"):
                prices = self._by_model[known]
                i = bisect.bisect_right([p.since for p in prices], day) - 1
                return prices[max(i, 0)]  # older than every entry: the oldest price
        return None

    def models(self) -> list[str]:
        return sorted(self._by_model)

    def limits(self, model: str | None, day: dt.date) -> tuple[int, int]:
        """(context window, output limit) of ``model``: its entry's, else the generous
        :data:`DEFAULT_CONTEXT_WINDOW` and :data:`DEFAULT_MAX_OUTPUT` (an unknown model's
        tokens are unpriced, yet its counts must stay sane)."""
        p = self.lookup(model, day)
        return ((p.context_window if p and p.context_window else DEFAULT_CONTEXT_WINDOW),
                (p.max_output if p and p.max_output else DEFAULT_MAX_OUTPUT))


def _number(where: str, entry: dict[str, Any], key: str, default: float | None) -> float:
    v = entry.get(key, default)
    if v is None:
        raise PriceError(f"{where}: key {key!r} is missing (dollars per million tokens)")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v != v:
        raise PriceError(f"{where}: key {key!r} must be a non-negative number of dollars "
                         f"per million tokens, not {v!r}")
    return float(v)


def parse(text: str, origin: str) -> dict[str, list[Price]]:
    """The ``[[price]]`` entries of one file, each checked; a :class:`PriceError` names
    the file, the entry and the key that is wrong."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PriceError(f"{origin}: not valid TOML: {e}") from None
    unknown = set(doc) - {"price", "checked"}
    if unknown:
        raise PriceError(f"{origin}: unknown top-level key {sorted(unknown)[0]!r} "
                         f"(expected [[price]] entries)")
    entries = doc.get("price", [])
    if not isinstance(entries, list):
        raise PriceError(f"{origin}: key 'price' must be an array of tables ([[price]])")
    out: dict[str, list[Price]] = {}
    for i, entry in enumerate(entries):
        where = f"{origin}: price[{i}]"
        if not isinstance(entry, dict):
            raise PriceError(f"{where}: must be a table")
        model = entry.get("model")
        if not isinstance(model, str) or not model.strip():
            raise PriceError(f"{where}: key 'model' must be a model name, not {model!r}")
        where = f"{where} (model {model!r})"
        extra = set(entry) - {"model", "since", "input", "output", "cache_read", "cache_write",
                          "source", "context_window", "max_output"}
        if extra:
            raise PriceError(f"{where}: unknown key {sorted(extra)[0]!r}")
        since = entry.get("since", dt.date.min)
        if isinstance(since, dt.datetime):
            since = since.date()
        if not isinstance(since, dt.date):
            raise PriceError(f"{where}: key 'since' must be a date (2025-11-24), not {since!r}")
        source = entry.get("source", "")
        if not isinstance(source, str):
            raise PriceError(f"{where}: key 'source' must be a string")
        inp = _number(where, entry, "input", None)
        out.setdefault(model.lower(), []).append(Price(
            model=model.lower(), since=since, input=inp,
            output=_number(where, entry, "output", None),
            cache_read=_number(where, entry, "cache_read", inp),
            cache_write=_number(where, entry, "cache_write", inp),
            source=source, origin=origin,
            context_window=_tokens(where, entry, "context_window"),
            max_output=_tokens(where, entry, "max_output")))
    return out


def _tokens(where: str, entry: dict[str, Any], key: str) -> int | None:
    v = entry.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise PriceError(f"{where}: key {key!r} must be a whole number of tokens more than "
                         f"0, not {v!r}")
    return v


def load(override: Path | None) -> PriceTable:
    """The shipped table, with ``override``'s models replacing its entries when that file
    exists. Raises :class:`PriceError` for a file that cannot be used."""
    shipped = resources.files("tether.cost").joinpath(SHIPPED).read_text()
    prices = parse(shipped, f"tether/cost/{SHIPPED}")
    files = [f"tether/cost/{SHIPPED}"]
    if override is not None:
        try:
            text = override.read_text()
        except FileNotFoundError:
            text = None
        except (OSError, UnicodeDecodeError) as err:
            raise PriceError(f"{override}: cannot be read: {err}") from None
        if text is not None:
            mine = parse(text, str(override))
            for model, entries in mine.items():  # limits left out: the shipped ones
                known = prices.get(model, [])
                if known:
                    last = known[-1]
                    entries[:] = [dataclasses.replace(
                        e, context_window=e.context_window or last.context_window,
                        max_output=e.max_output or last.max_output) for e in entries]
            prices.update(mine)
            files.append(str(override))
    return PriceTable(prices, files)
