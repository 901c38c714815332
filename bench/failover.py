"""Failover figures (issue #33): the queue losing its Postgres primary under load.

    python -m bench.failover --rate 20 --duration 30 --markdown docs/perf/failover.md

The drill of bench/harness/drill.py on the HA cluster, for a switchover and a node
loss; what it reports: docs/perf/benchmarks.md. A broken promise fails the run. Needs
scripts/ha-venv (Patroni) and Debian's etcd-server and haproxy.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import json
import os
import platform
import tempfile
import time
from typing import Any

import trio

from bench.harness.drill import HAStack, broken_promises, prepare, run_drill, summary
from dataplane.db import open_bridge
from dataplane.dev.ha import HACluster

HEADER = (
    "| fault | write outage (s) | all BFFs ready (s) | refused (503) | slowest POST (s) "
    "| p99 in flight (s) | answered |\n|---|---|---|---|---|---|---|"
)
NODE_LOSS_WAIT = 60.0  # seconds for a new primary after node loss (TTL 20)


async def _new_primary(cluster: HACluster, old: Any, within: float) -> None:
    with trio.fail_after(within):
        while True:
            prim = await trio.to_thread.run_sync(cluster.primary)
            if prim is not None and prim is not old:
                return
            await trio.sleep(0.2)


async def run(args: argparse.Namespace, cluster: HACluster, logs: Path) -> list[dict[str, Any]]:
    stack = HAStack(cluster, logs)
    figures = []
    try:
        await stack.start()
        for fault in args.faults:
            await trio.to_thread.run_sync(cluster.wait_synchronous, 90)  # the promise's premise
            old = cluster.primary()
            assert old is not None, "no primary"

            async def apply(fault: str = fault, old: Any = old) -> None:
                if fault == "switchover":
                    other = next(n for n in cluster.nodes if n is not old)
                    done = await trio.to_thread.run_sync(
                        lambda: cluster.patronictl(
                            "switchover", "--leader", old.name, "--candidate", other.name, "--force"
                        )
                    )
                    assert done.returncode == 0, done.stdout + done.stderr
                else:
                    cluster.kill_node(old)
                await _new_primary(cluster, old, NODE_LOSS_WAIT)

            duration = args.duration + (25 if fault == "node-loss" else 0)
            drill = await run_drill(
                stack, fault, apply, rate=args.rate, duration=duration, fault_at=args.fault_at
            )
            print(f"{fault}: {summary(drill)}", flush=True)
            broken = broken_promises(drill)
            if broken:
                raise SystemExit(f"{fault}: {len(broken)} broken promise(s): {broken[:10]}")
            figures.append({**drill.figures(), "duration_s": duration})
    finally:
        stack.stop()
    return figures


def markdown(args: argparse.Namespace, figures: list[dict[str, Any]], up_s: float) -> str:
    rows = "\n".join(
        f"| {f['fault']} | {f['write_outage_s']} | {f['every_bff_ready_after_s']} "
        f"| {f['refused_503']} ({f['requests_refused']} requests) | {f['slowest_post_s']} "
        f"| {f['in_flight_p99_s']} "
        f"| {f['accepted']}/{f['requests']} |"
        for f in figures
    )
    command = (
        f"python -m bench.failover --rate {args.rate:g} --duration {args.duration:g} "
        f"--fault-at {args.fault_at:g} --markdown docs/perf/failover.md"
    )
    return f"""# Failover: the queue losing its Postgres primary under load

Measured {time.strftime("%Y-%m-%d", time.gmtime())} on {platform.machine()}, \
{os.cpu_count()} cores (shared with other jobs), by:

    {command}

Topology: etcd, two Patroni nodes (`synchronous_mode: true`, TTL 20 s, loop_wait 2 s),
HAProxy checking Patroni's `/primary`; 2 BFFs and 2 workers, one of each through the
libpq multi-host DSN (`target_session_attrs=read-write connect_timeout=2`), the other
through HAProxy. Load: {args.rate:g} `probe.sleep` requests/s (20-120 ms each), open loop,
each POST retried on 503 after its `Retry-After` and its stream read to the answer; the
fault {args.fault_at:g} s in. Cluster up in {up_s:.1f} s.

{HEADER}
{rows}

- *write outage*: the longest gap between successful inserts of a probe connecting through
  the multi-host DSN every 0.1 s.
- *every BFF ready after*: from the fault's start (the `patronictl switchover` call, or the
  SIGKILL) until both BFFs' `/readyz` answer 200 again.
- *refused*: 503 answers (all with `Retry-After`) while no primary was reachable; no 500.
- *slowest POST*: the longest single POST round trip seen by the load's client (a 202 or
  a 503); the BFFs' access log (`--logs DIR`) gives the time inside the BFF.
- *p99 in flight*: first POST to the answer on the stream, requests started from 5 s before
  to 30 s after the fault (a refused POST waits out the outage, so this is about the outage).
- *answered*: requests answered exactly once on their stream / requests made; every job
  row written `done` once (an audit trigger logs each write), none lost, none replaced.

Raw figures: `{json.dumps(figures)}`
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=20.0, help="requests/s")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of load")
    parser.add_argument("--fault-at", type=float, default=8.0, help="seconds into the load")
    parser.add_argument("--markdown", type=Path, help="write the report here")
    parser.add_argument("--output-json", type=Path, help="write the figures here")
    parser.add_argument(
        "--faults", nargs="+", default=["switchover", "node-loss"], help="in this order"
    )
    parser.add_argument("--logs", type=Path, help="keep the processes' logs here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="failover-") as tmp:
        cluster = HACluster(Path(tmp) / "state")
        try:
            started = time.monotonic()
            cluster.up()
            up_s = time.monotonic() - started
            prepare(cluster)

            async def go() -> list[dict[str, Any]]:
                async with open_bridge():
                    return await run(args, cluster, logs)

            logs = args.logs or Path(tmp)
            logs.mkdir(parents=True, exist_ok=True)

            figures = trio.run(go)
        finally:
            cluster.down()
    if args.output_json:
        args.output_json.write_text(json.dumps(figures, indent=1))
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown(args, figures, up_s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
