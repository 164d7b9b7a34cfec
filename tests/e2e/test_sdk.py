"""The SDK against the real daemon: both clients, and riding through SIGKILLs."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import tether
from tests.harness import DaemonProc
from tether.client.replies import ExecView
from tether.model.records import Event


def test_async_client_runs_and_follows(daemon: DaemonProc, tmp_path: Path) -> None:
    async def main() -> None:
        async with tether.AsyncClient(daemon.home, autostart=False) as c:
            assert (await c.health()).status == "SERVING"
            x = await c.exec_start(["sh", "-c", "for i in 1 2 3; do echo $i; sleep 0.05; done"])
            chunks = [d async for d in c.read_logs(x.id, follow=True)]
            assert b"".join(chunks) == b"1\n2\n3\n"
            # Concurrent calls on one client.
            waits = await asyncio.gather(*(c.exec_wait(x.id) for _ in range(5)))
            assert {w.state for w in waits} == {"FINISHED"}

    asyncio.run(main())


def test_async_subscription_resumes_across_sigkill(daemon: DaemonProc) -> None:
    got: list[Event] = []

    last: dict[str, str] = {}

    async def consume(c: tether.AsyncClient) -> None:
        async for ev in c.subscribe(since=0):
            got.append(ev)
            if ev.exec == last.get("exec") and ev.state == "FINISHED":
                return

    async def main() -> None:
        async with tether.AsyncClient(daemon.home, autostart=False) as c:
            consumer = asyncio.create_task(consume(c))
            x = await c.exec_start(["true"])
            await c.exec_wait(x.id)
            await asyncio.sleep(0.2)
            await asyncio.to_thread(daemon.kill9)
            await asyncio.to_thread(daemon.start)
            y = await c.exec_start(["true"])
            last["exec"] = y.id
            await c.exec_wait(y.id)
            await asyncio.wait_for(consumer, 20)

    asyncio.run(main())
    gseqs = [e.gseq for e in got]
    assert gseqs == list(range(1, len(got) + 1))  # each event once, in order, no gap
    assert [e.type for e in got].count("daemon.started") == 2


def test_sync_wait_rides_through_sigkill(daemon: DaemonProc, tmp_path: Path) -> None:
    c = daemon.client(reconnect=30)
    x = c.exec_start(["sh", "-c", f"while [ ! -e {tmp_path}/go ]; do sleep 0.02; done; exit 3"])
    result: dict[str, ExecView] = {}
    t = threading.Thread(target=lambda: result.update(x=c.exec_wait(x.id, timeout=60)))
    t.start()
    daemon.kill9()
    daemon.start()
    (tmp_path / "go").touch()
    t.join(30)
    assert result["x"].exit_code == 3


def test_lazy_public_names() -> None:
    assert tether.Client.__name__ == "Client"
    assert tether.AsyncClient.__name__ == "AsyncClient"
    assert issubclass(tether.TetherError, Exception)
    assert tether.__version__
