r"""User-defined providers: ``<home>/providers/NAME.toml``, no code.

A user's CLI is driven like the built-in CLIs without hooks (:mod:`.heuristic`): turns
inferred from its output, resume by an argv template. Every key is optional::

    commands = ["mycli"]                 # what selects it in `tether run CMD`: a name is
                                         # argv[0]'s basename (./mycli, /opt/x/mycli),
                                         # a path that file; default [NAME]
    model = "gpt-4.1"                    # its turns are priced as this model
    resume = ["{argv0}", "--resume", "{session}", "{args}"]
    resume_last = ["{argv0}", "--continue", "{args}"]   # when no session id is known
    resume_drop = { "-p" = 1, "--yes" = 0 }   # options left out of {args}, and their values
    drop_positionals = false             # leave positional words (a prompt) out of {args}
    value_options = ["-m"]               # options whose value is not a positional word

    [turns]
    idle_seconds = 5.0                   # quiet output for this long ends a turn
    end_regex = '^> ?$'                  # ... if the last line matches (its prompt)
    context_regex = '(\d+)% context'    # group 1: context used, percent
    session_regex = 'session: (\S+)'    # group 1: the CLI's session id
    usage_regex = '(\d+) in, (\d+) out'  # groups 1, 2: the turn's input, output tokens
    model_regex = 'model: (\S+)'        # group 1: the model (else `model` above)

    [exits]                              # regexes over the last output of an attempt
    usage_limit = ['rate limit reached.*']   # a reset time in the line is understood
    out_of_context = ['context is full']
    waiting_for_user = ['\(y/n\)']

Regexes are Python's, matched case-insensitively; ``end_regex`` against the last
non-blank line of output with its trailing whitespace removed (so ``'^> $'`` could never
match: that is warned about), the others over the last output, line by line (``^``/``$``
at each line). A file that does not parse, an unknown key, a bad regex or one without the
groups it must capture is refused with the file and key named.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from tether.agent.providers.heuristic import OutputProvider

NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_TOP = {"commands", "model", "resume", "resume_last", "resume_drop", "drop_positionals",
        "value_options", "turns", "exits", "notes"}
_TURNS = {"idle_seconds", "end_regex", "context_regex", "session_regex", "usage_regex",
          "model_regex"}
#: The groups each ``[turns]`` regex must capture (what tether reads from its match).
_GROUPS = {"context_regex": 1, "session_regex": 1, "usage_regex": 2, "model_regex": 1}
#: A whitespace a pattern requires right before its end (``' $'``, ``'\s+$'``): a line is
#: matched with its trailing whitespace removed, so that can never match.
_TRAILING_SPACE = re.compile(r"(?:[ \t]|\\s|\\t|\\x20|\[(?: |\\s|\\t)+\])"
                             r"(?:\+|\{[1-9][0-9]*,?[0-9]*\})?(?:\$|\\Z)$")
_EXITS = {"usage_limit", "out_of_context", "waiting_for_user"}


class ProviderFileError(ValueError):
    """A provider file tether cannot use; the message names the file and the key."""


def _words(where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(w, str) for w in value):
        raise ProviderFileError(f"{where} must be a list of strings")
    return tuple(value)


def _regex(where: str, value: Any, groups: int = 0) -> str:
    if not isinstance(value, str):
        raise ProviderFileError(f"{where} must be a string (a regex)")
    try:
        compiled = re.compile(value)
    except re.error as e:
        raise ProviderFileError(f"{where} is not a valid regex: {e}") from None
    if compiled.groups < groups:
        raise ProviderFileError(f"{where} {value!r} captures {compiled.groups} group(s); "
                                f"tether reads {'groups 1 and 2' if groups == 2 else 'group 1'}"
                                " of its match: add ( ) around "
                                + ("each number" if groups == 2 else "what it reads"))
    return value


def end_warnings(pattern: str) -> list[str]:
    """Why ``end_regex`` could never match a line as tether sees it, if it could not."""
    said = []
    if _TRAILING_SPACE.search(pattern):
        said.append(f"[turns] end_regex '{pattern}' can never match: each line is matched "
                    "with its trailing whitespace removed; end it without the space: "
                    f"'{_TRAILING_SPACE.sub('', pattern)}$' (' ?$' where one may follow)")
    if "\\n" in pattern or "\n" in pattern:
        said.append(f"[turns] end_regex '{pattern}' can never match: it is matched against "
                    "one line, which holds no newline")
    return said


def _table(where: str, value: Any, keys: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProviderFileError(f"{where} must be a table")
    unknown = sorted(set(value) - keys)
    if unknown:
        raise ProviderFileError(f"{where}: unknown key(s) {', '.join(unknown)} "
                                f"(known: {', '.join(sorted(keys))})")
    return value


def load(path: Path) -> OutputProvider:
    """The provider a file defines; :class:`ProviderFileError` says what is wrong."""
    name = path.stem
    if not NAME.match(name):
        raise ProviderFileError(f"{path}: the file name must be NAME.toml with NAME made of "
                                "lowercase letters, digits, - and _")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ProviderFileError(f"{path}: {e}") from None
    try:
        return _build(name, data)
    except ProviderFileError as e:
        raise ProviderFileError(f"{path}: {e}") from None


def _build(name: str, data: dict[str, Any]) -> OutputProvider:
    _table("the file", data, _TOP)
    p = OutputProvider()
    p.name = name
    p.commands = _words("commands", data.get("commands", [name]))
    if "resume" in data:
        p.resume_argv = _words("resume", data["resume"])
        p.resume_last_argv = p.resume_argv
    if "resume_last" in data:
        p.resume_last_argv = _words("resume_last", data["resume_last"])
    drop = data.get("resume_drop", {})
    if not isinstance(drop, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in drop.values()):
        raise ProviderFileError("resume_drop must map options to their number of values")
    p.resume_drop = dict(drop)
    positionals = data.get("drop_positionals", False)
    if not isinstance(positionals, bool):
        raise ProviderFileError("drop_positionals must be true or false")
    p.drop_positionals = positionals
    p.value_options = frozenset(_words("value_options", data.get("value_options", [])))
    turns = _table("[turns]", data.get("turns", {}), _TURNS)
    idle = turns.get("idle_seconds", 5.0)
    if isinstance(idle, bool) or not isinstance(idle, int | float) or idle <= 0:
        raise ProviderFileError("[turns] idle_seconds must be a number of seconds above 0")
    p.turn_idle_seconds = float(idle)
    for key, attr in (("end_regex", "turn_end_pattern"), ("context_regex", "context_pattern"),
                      ("session_regex", "session_pattern"), ("usage_regex", "usage_pattern"),
                      ("model_regex", "model_pattern")):
        if key in turns:
            setattr(p, attr, _regex(f"[turns] {key}", turns[key], _GROUPS.get(key, 0)))
    p.warnings = tuple(end_warnings(p.turn_end_pattern)) if p.turn_end_pattern else ()
    model = data.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise ProviderFileError("model must be a model's name (as in prices.toml)")
    p.model = model
    exits = _table("[exits]", data.get("exits", {}), _EXITS)
    for key, attr in (("usage_limit", "usage_limit_patterns"),
                      ("out_of_context", "out_of_context_patterns"),
                      ("waiting_for_user", "waiting_patterns")):
        if key in exits:
            words = _words(f"[exits] {key}", exits[key])
            setattr(p, attr, tuple(_regex(f"[exits] {key}", w) for w in words))
    notes = data.get("notes", f"user-defined ({name}.toml): output heuristics")
    p.notes = notes if isinstance(notes, str) else ""
    return p


def load_dir(directory: Path) -> tuple[dict[str, OutputProvider], list[str]]:
    """Every ``*.toml`` provider in ``directory``, and the errors of those refused."""
    found: dict[str, OutputProvider] = {}
    errors: list[str] = []
    try:
        paths = sorted(directory.glob("*.toml"))
    except OSError:
        return found, errors
    for path in paths:
        try:
            found[path.stem] = load(path)
        except ProviderFileError as e:
            errors.append(str(e))
    return found, errors
