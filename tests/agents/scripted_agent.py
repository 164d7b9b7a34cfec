"""A scripted agent for tests: no model, just turns with a planned context %.

Each turn it asks to use a tool, reports the turn (with two messages), and logs
what tether answered as one JSON line to --log. Behaviours for crash tests:
--hang-at N stops talking (and printing) at turn N; --exit-at N:CODE exits.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from tether.agent.session import Session


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pcts", default="10,20,30")
    ap.add_argument("--log", required=True)
    ap.add_argument("--tools-per-turn", type=int, default=1)
    ap.add_argument("--hang-at", type=int, default=0)
    ap.add_argument("--exit-at", default="")
    ap.add_argument("--wait-file", default="", help="before each turn, wait for FILE.<n>")
    ap.add_argument("--linger", type=float, default=0.0, help="sleep after the last turn")
    ap.add_argument("--show-env", action="append", default=[],
                    help="log this variable's value at start (repeatable)")
    args = ap.parse_args()
    s = Session.from_env()
    restored = s.restored_messages()
    start_turn = sum(1 for m in restored if m.get("role") == "assistant")

    def log(**kv: object) -> None:
        with open(args.log, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "attempt": os.environ["TETHER_ATTEMPT"],
                                **kv}) + "\n")

    log(event="start", restored=len(restored), handoff=s.predecessor_handoff(),
        env={k: os.environ.get(k) for k in args.show_env})
    pcts = [float(p) for p in args.pcts.split(",") if p]
    exit_turn, _, exit_code = args.exit_at.partition(":")
    for n in range(start_turn + 1, len(pcts) + 1):
        if args.wait_file:
            while not os.path.exists(f"{args.wait_file}.{n}"):
                time.sleep(0.02)
        if args.hang_at and n == args.hang_at:
            log(event="hang", turn=n)
            time.sleep(3600)
        if exit_turn and n == int(exit_turn):
            log(event="exit", turn=n)
            return int(exit_code or 1)
        decisions = [s.authorize_tool("Bash") for _ in range(args.tools_per_turn)]
        reply = s.turn(context_pct=pcts[n - 1], model="scripted-1",
                       usage={"input_tokens": 100 * n, "output_tokens": 10},
                       messages=[{"role": "user", "content": f"task {n}"},
                                 {"role": "assistant", "content": f"did {n}"}])
        if reply.lifecycle in ("AGING", "DYING", "DRAINING"):
            s.handoff(f"handoff after turn {n}")
        log(event="turn", turn=n, allowed=[d.allowed for d in decisions],
            lifecycle=reply.lifecycle, instructions=reply.instructions)
        print(f"turn {n} {reply.lifecycle}", flush=True)
    log(event="done")
    time.sleep(args.linger)
    return 0


if __name__ == "__main__":
    sys.exit(main())
