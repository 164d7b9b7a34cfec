"""A stand-in for an agent CLI (no model, no network), installed in a test's PATH under
the CLI's name (``claude``, ``gemini``, ``aider`` …). It behaves like the CLI's
documented interface only as far as tether uses it:

* Claude Code: reads the ``--settings`` file tether passes and runs its hook commands
  with JSON on stdin, as Claude Code's hooks reference describes;
* Gemini CLI: reads the settings file named by ``GEMINI_CLI_SYSTEM_DEFAULTS_PATH`` and
  runs its hook commands the same way;
* others: just prints, like a terminal CLI without hooks.

What it does comes from ``STANDIN_PLAN``: a JSON object mapping the attempt
(``TETHER_ATTEMPT``, as a string) or ``"*"`` to a list of steps, each one of
``{"hook": EVENT, ...payload}``, ``{"print": TEXT}``, ``{"sleep": SECONDS}``,
``{"exit": CODE}``. Every start is logged (argv, attempt) as a JSON line to
``STANDIN_LOG``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any


def settings_file(argv: list[str]) -> str | None:
    if "--settings" in argv:
        return argv[argv.index("--settings") + 1]
    return os.environ.get("GEMINI_CLI_SYSTEM_DEFAULTS_PATH")


def fire(settings: dict[str, Any], event: str, payload: dict[str, Any], log: Any) -> None:
    for group in settings.get("hooks", {}).get(event, []):
        for hook in group["hooks"]:
            r = subprocess.run(hook["command"], shell=True, capture_output=True,
                               input=json.dumps({"hook_event_name": event, **payload}).encode())
            log.write(json.dumps({"hook": event, "code": r.returncode,
                                  "stdout": r.stdout.decode()}) + "\n")
            log.flush()


def main() -> int:
    argv = sys.argv
    attempt = os.environ.get("TETHER_ATTEMPT", "1")
    plan = json.loads(os.environ.get("STANDIN_PLAN", "{}"))
    steps = plan.get(attempt, plan.get("*", []))
    path = settings_file(argv[1:])
    settings: dict[str, Any] = {}
    if path and os.path.exists(path):
        with open(path) as f:
            settings = json.load(f)
    with open(os.environ["STANDIN_LOG"], "a") as log:
        log.write(json.dumps({"start": os.path.basename(argv[0]), "argv": argv[1:],
                              "attempt": attempt}) + "\n")
        log.flush()
        for step in steps:
            if "hook" in step:
                payload = {k: v for k, v in step.items() if k != "hook"}
                fire(settings, step["hook"], payload, log)
            elif "print" in step:
                print(step["print"], flush=True)
            elif "sleep" in step:
                time.sleep(step["sleep"])
            elif "exit" in step:
                return int(step["exit"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
