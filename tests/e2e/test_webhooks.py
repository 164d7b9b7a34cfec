"""Webhooks through the real daemon: deliveries to a real ``http.server`` on 127.0.0.1,
signatures, filters, retries on a moved test clock, dead letters, command hooks."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DaemonProc, wait_for
from tests.rawrpc import raw_call
from tests.receiver import Receiver
from tether.client.blocking import Client


def run(c: Client, *argv: str, **kw: Any) -> str:
    x = c.exec_start(list(argv), **kw)
    c.exec_wait(x.id, timeout=30)
    return x.id


def state_of(c: Client, hook: str) -> dict[str, int]:
    return c.hook_show(hook).counts


@pytest.fixture
def clocked(stopped_daemon: DaemonProc, tmp_path: Path) -> tuple[DaemonProc, Path]:
    """A daemon whose wall clock the test moves (TETHER_TEST_CLOCK)."""
    clock = tmp_path / "clock"
    clock.write_text("0")
    stopped_daemon.start(env={"TETHER_TEST_CLOCK": str(clock)})
    return stopped_daemon, clock


def test_a_finished_exec_is_posted_signed_with_its_summary(daemon: DaemonProc,
                                                          tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"s3cret-key\n")
    c = daemon.client()
    with Receiver() as rx:
        h = c.hook_add("ci", ["exec.finished"], url=rx.url, secret_file=str(secret))
        assert h.has_secret and "s3cret" not in json.dumps(raw_call(
            daemon.socket, "hook.list"))
        xid = run(c, "sh", "-c", "exit 3", name="build-1")
        wait_for(lambda: rx.received, what="a delivery")
        got = rx.received[0]
        assert got.signed_with(b"s3cret-key")  # surrounding whitespace is not the key
        body = got.json()
        assert body["event"]["type"] == "exec.state" and body["event"]["state"] == "FINISHED"
        assert body["exec"]["id"] == xid and body["exec"]["exit_code"] == 3
        assert body["exec"]["argv"] == ["sh", "-c", "exit 3"] and body["hook"] == "ci"
        assert got.key == f"{body['event']['gseq']}-ci" == got.headers["tether-delivery"]
        assert got.headers["tether-event"] == "exec.state"
        wait_for(lambda: state_of(c, "ci") == {"COMPLETED": 1}, what="COMPLETED")
    path = daemon.home / "hooks" / "ci.secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    evs = c.events_list(limit=1000).events
    assert not any("s3cret" in json.dumps(e.data) for e in evs)
    c.hook_remove("ci")
    assert not path.exists()


def test_filters_by_type_sandbox_name_and_nonzero_exit(daemon: DaemonProc) -> None:
    c = daemon.client()
    c.sandbox_create("other")
    with Receiver() as rx:
        c.hook_add("fails", ["exec.finished", "exec.failed"], url=rx.url, nonzero=True)
        c.hook_add("nightly", ["exec.*"], url=rx.url, match_name="nightly-*")
        c.hook_add("other", ["exec.finished"], url=rx.url, sandbox="other")
        c.hook_add("running", ["exec.running"], url=rx.url)
        ok = run(c, "true", name="nightly-1")
        bad = run(c, "false", name="adhoc")
        elsewhere = run(c, "true", sandbox="other")
        want = {("fails", bad), ("other", elsewhere), ("running", ok), ("running", bad),
                ("running", elsewhere)}
        # nightly-1 passed through PENDING, RUNNING, FINISHED: three events.
        wait_for(lambda: len(rx.received) >= len(want) + 3, what="every delivery")
        import time

        time.sleep(0.5)  # nothing more arrives
        got = [(r.json()["hook"], r.json()["event"]["exec"]) for r in rx.received]
    nightly = [g for g in got if g[0] == "nightly"]
    assert nightly == [("nightly", ok)] * 3
    assert set(got) - set(nightly) == want and len(got) == len(want) + 3


def test_a_failing_receiver_is_retried_with_backoff_on_the_test_clock(
        clocked: tuple[DaemonProc, Path]) -> None:
    daemon, clock = clocked
    c = daemon.client()
    with Receiver(fail_first=2) as rx:
        c.hook_add("flaky", ["exec.finished"], url=rx.url)
        run(c, "true")
        wait_for(lambda: state_of(c, "flaky").get("FAILED") == 1, what="first failure")
        import time

        time.sleep(1.0)  # the backoff (~2 s of the daemon's clock) is not slept through...
        assert rx.attempts == 1
        d = c.hook_show("flaky").deliveries[0]
        assert d.tries == 1 and d.last_error and "HTTP 500" in d.last_error
        clock.write_text("10000")  # ...but passes when the clock moves
        wait_for(lambda: rx.attempts == 2, what="second try")
        clock.write_text("20000")
        wait_for(lambda: state_of(c, "flaky") == {"COMPLETED": 1}, what="delivered")
        assert rx.attempts == 3 and len(rx.received) == 1
        assert c.hook_show("flaky").deliveries[0].tries == 3


def test_dead_after_max_tries_then_retried_by_hand(clocked: tuple[DaemonProc, Path]) -> None:
    daemon, clock = clocked
    c = daemon.client()
    with Receiver() as rx:
        rx.failing = True
        c.hook_add("down", ["exec.finished"], url=rx.url, max_tries=3)
        run(c, "true")
        for n in range(1, 4):
            wait_for(lambda n=n: rx.attempts == n, what=f"try {n}")  # type: ignore[misc]
            clock.write_text(str(n * 100000))
        wait_for(lambda: state_of(c, "down") == {"DEAD": 1}, what="DEAD")
        show = c.hook_show("down")
        assert [d.state for d in show.dead] == ["DEAD"] and show.dead[0].tries == 3
        evs = [e for e in c.events_list(limit=1000).events if e.type == "hook.dead"]
        assert evs and "tether hook retry down" in (evs[0].reason or "")
        out = daemon.cli("hook", "show", "down")
        assert b"dead letters" in out.stdout, out.stderr
        rx.failing = False
        assert daemon.cli("hook", "retry", "down").returncode == 0
        wait_for(lambda: state_of(c, "down") == {"COMPLETED": 1}, what="retried")
        assert len(rx.received) == 1


def test_an_exec_hook_gets_the_event_on_stdin(daemon: DaemonProc, tmp_path: Path) -> None:
    out = tmp_path / "got"
    script = (f"import os, sys; open({str(out)!r}, 'a').write(os.environ['TETHER_DELIVERY'] "
              "+ ' ' + sys.stdin.read() + '\\n')")
    r = daemon.cli("hook", "add", "local", "--on", "exec.failed", "--on", "exec.finished",
                   "--nonzero", "--exec", "--", sys.executable, "-c", script)
    assert r.returncode == 0, r.stderr
    c = daemon.client()
    run(c, "true")
    xid = run(c, "sh", "-c", "exit 7")
    wait_for(lambda: out.exists() and out.read_text().count("\n") >= 1, what="the hook ran")
    wait_for(lambda: state_of(c, "local") == {"COMPLETED": 1}, what="COMPLETED")
    key, body = out.read_text().splitlines()[0].split(" ", 1)
    ev = json.loads(body)
    assert ev["exec"]["id"] == xid and key == f"{ev['event']['gseq']}-local"


def test_bad_hooks_are_refused_precisely_and_the_daemon_keeps_serving(
        daemon: DaemonProc, tmp_path: Path) -> None:
    def err(method: str, **params: Any) -> dict[str, Any]:
        reply = raw_call(daemon.socket, method, params)
        assert "error" in reply, reply
        return dict(reply["error"])

    assert "exactly one of url" in err("hook.add", name="x", on=["exec.*"])["message"]
    assert "exactly one of url" in err("hook.add", name="x", on=["exec.*"],
                                       url="http://127.0.0.1:9/", exec=["true"])["message"]
    assert err("hook.add", name="x", on=["exec.*"], url="ftp://h/")["code"] == -32602
    assert err("hook.add", name="x", on=[], url="http://127.0.0.1:9/")["code"] == -32602
    missing = err("hook.add", name="x", on=["exec.*"], url="http://127.0.0.1:9/",
                  secret_file=str(tmp_path / "nope"))
    assert "cannot read the secret file" in missing["message"]
    assert err("hook.show", name="nope")["data"]["code"] == "NO_SUCH_HOOK"
    raw_call(daemon.socket, "hook.add", {"name": "x", "on": ["exec.*"],
                                         "url": "http://127.0.0.1:9/"})
    assert err("hook.add", name="x", on=["exec.*"],
               url="http://127.0.0.1:9/")["data"]["code"] == "NAME_IN_USE"
    assert raw_call(daemon.socket, "daemon.health")["result"]["status"] == "SERVING"
    r = daemon.cli("hook", "add", "y", "--on", "exec.*")
    assert r.returncode != 0 and b"--url" in r.stderr
    assert os.path.isdir(daemon.home)


@pytest.mark.parametrize("script", ["exit 3", "exec 0<&-; sleep 0.2; exit 3"])
def test_an_exec_hook_that_does_not_read_its_stdin_reports_its_exit_status(
        daemon: DaemonProc, script: str) -> None:
    """A command may exit (or close stdin) before the body is written: the closed pipe
    is no internal error, the command's exit status is the answer."""
    r = daemon.cli("hook", "add", "deaf", "--on", "exec.finished", "--exec", "--",
                   "sh", "-c", script)
    assert r.returncode == 0, r.stderr
    c = daemon.client()
    run(c, "true")
    wait_for(lambda: state_of(c, "deaf").get("FAILED") == 1, what="the failed try")
    d = c.hook_show("deaf").deliveries[0]
    assert d.last_error == "the command exited 3", d.last_error


def _readme_recipe(secret_file: Path, clock: float | None = None) -> Any:
    """The README's receiver (the code block after ``<!-- webhook-recipe -->``), with the
    secret read from ``secret_file`` and, with ``clock``, ``time.time()`` returning it."""
    import types

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    code = readme.split("<!-- webhook-recipe -->\n```python\n", 1)[1].split("```", 1)[0]
    code = code.replace('"/etc/ci/tether.secret"', repr(str(secret_file)))
    ns: dict[str, Any] = {}
    exec(compile(code, "README.md", "exec"), ns)  # the README's own code
    if clock is not None:
        ns["time"] = types.SimpleNamespace(time=lambda: clock)
    return ns["verify"]


def test_signatures_cover_time_and_key_and_the_readme_recipe_checks_them(
        daemon: DaemonProc, tmp_path: Path) -> None:
    """Issue 21 finding 5: a signature over the body alone let a captured delivery be
    replayed forever under a new Idempotency-Key. Now ``t=…,v1=…`` covers the time and the
    key (as Stripe's do); the README's few lines of Python verify it, stripping the
    secret file's whitespace as tether does, and refuse an old or re-keyed replay."""
    import email.message
    import time

    secret = tmp_path / "secret"
    secret.write_bytes(b"  k3y-of-the-hook\n\n")
    c = daemon.client()
    with Receiver() as rx:
        c.hook_add("signed", ["exec.finished"], url=rx.url, secret_file=str(secret))
        run(c, "true")
        wait_for(lambda: rx.received, what="a delivery")
    got = rx.received[0]
    headers = email.message.Message()  # case-insensitive, as a web framework's
    for k, v in got.headers.items():
        headers[k] = v
    sig = got.headers["x-tether-signature-256"]
    assert sig.startswith("t=") and ",v1=" in sig and abs(int(sig[2:12]) - time.time()) < 60
    assert _readme_recipe(secret)(headers, got.body) is True
    assert got.signed_with(b"k3y-of-the-hook")
    assert _readme_recipe(secret, clock=time.time() + 600)(headers, got.body) is False
    del headers["Idempotency-Key"]
    headers["Idempotency-Key"] = "999-signed"  # the same body, replayed as a new delivery
    assert _readme_recipe(secret)(headers, got.body) is False
    assert not _readme_recipe(secret)(got.headers | {"X-Tether-Signature-256": sig,
                                                     "Idempotency-Key": got.key},
                                      got.body + b" ")


def test_a_hook_urls_credentials_are_shown_as_stars(daemon: DaemonProc) -> None:
    """Issue 21 finding 5: ``hook ls`` showed ``https://user:pass@…`` as it was. Now every
    reply (so the CLI, its --json and the dashboard), and a failed try's error, hide it."""
    c = daemon.client()
    with Receiver() as rx:
        port = rx.url.split(":")[2].split("/")[0]
        c.hook_add("creds", ["exec.finished"], url=f"http://ci:hunter2@127.0.0.1:{port}/hook")
        c.hook_add("down", ["exec.finished"], url="http://ci:hunter2@127.0.0.1:9/hook",
                   max_tries=5)
        run(c, "true")
        wait_for(lambda: rx.received, what="a delivery")
        wait_for(lambda: state_of(c, "down").get("FAILED"), what="a failed try")
    assert rx.received[0].headers["authorization"].startswith("Basic ")  # the URL's, used
    shown = [json.dumps(raw_call(daemon.socket, "hook.list")),
             json.dumps(raw_call(daemon.socket, "hook.show", {"name": "down"}))]
    for args in (("hook", "ls"), ("hook", "ls", "--json"), ("hook", "show", "down"),
                 ("hook", "show", "creds", "--json")):
        r = daemon.cli(*args)
        assert r.returncode == 0, r.stderr
        shown.append(r.stdout.decode())
    for text in shown:
        assert "hunter2" not in text and "ci:" not in text, text
    assert "http://***@127.0.0.1:9/hook" in shown[-3]
    assert c.hook_show("down").deliveries[0].last_error
