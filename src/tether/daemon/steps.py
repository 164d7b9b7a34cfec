"""A bounded step: one command run to its end in a session of its own, with a timeout.

Hand-offs (git, the user's command) and the fleet's git transport run short commands
whose output is reported, never streamed; a step that outlives its timeout, or whose
caller is cancelled, is killed with its whole process group so nothing lingers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os


async def run_step(argv: list[str], *, cwd: str | None, env: dict[str, str],
                   timeout: float) -> tuple[int | None, str]:
    """The exit code and the output (stdout and stderr together, decoded), or ``None``
    and ``""`` when it took longer than ``timeout`` (then killed)."""
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        start_new_session=True)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except (TimeoutError, asyncio.CancelledError) as e:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        await proc.wait()
        if isinstance(e, asyncio.CancelledError):
            raise
        return None, ""
    return proc.returncode, out.decode("utf-8", "replace")
