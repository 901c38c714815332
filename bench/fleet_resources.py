"""Resource figures for the manifests' requests and limits (deploy/kubernetes).

Run from the repository root::

    python bench/fleet_resources.py                 # 10 s idle, 20 s at 32 clients
    python bench/fleet_resources.py --idle 5 --load 10 --clients 16

Each process's CPU and RSS idle and under load (docs/perf/benchmarks.md); prints the
figures and writes ``bench/results/fleet-resources.json`` (not committed).
docs/deploy-kubernetes.md quotes them and derives the requests from them.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import os
import subprocess
import time
from typing import Any

import trio

from bench.harness.client import auth_headers, closed_loop, e2e_once, raw_sessions
from bench.harness.common import (
    close_to_public,
    format_table,
    scratch_server,
    server_facts,
    summary_ms,
)
from bench.harness.procs import Children, CpuMeter, children_scope, rss_mb
from bench.harness.result import Result, print_figures
from bench.harness.stack import (
    HOST,
    QUEUE_TYPE,
    stack_env,
    wait_http,
    wait_serving,
)
from dataplane.dev.embedded import free_port

DATAPLANE = [sys.executable, "-m", "dataplane"]
DATAPLANE_CAPCOM_TOKEN = "bench-capcom-token"  # the worker posts every finished job to capcom


def _rss(pid: int) -> dict[str, float]:
    mb = rss_mb(pid)
    return {"rss_mb": mb.get("VmRSS", 0.0), "peak_mb": mb.get("VmHWM", 0.0)}


async def _measure(kids: Children, env: dict[str, str], args: argparse.Namespace) -> Result:
    port, capcom_port = free_port(), free_port()
    capcom_url = f"http://{HOST}:{capcom_port}"
    env = {**env, "DATAPLANE_CAPCOM_TOKEN": DATAPLANE_CAPCOM_TOKEN}
    capcom = kids.start("capcom", [*DATAPLANE, "capcom", "--bind", f"{HOST}:{capcom_port}"], env)
    bff = kids.start("bff", [*DATAPLANE, "bff", "--bind", f"{HOST}:{port}"], env)
    worker_env = {**env, "SURFACE_QUEUE_TYPE": QUEUE_TYPE, "DATAPLANE_CAPCOM_URL": capcom_url}
    worker = kids.start("worker", [*DATAPLANE, "worker"], worker_env)
    started = time.perf_counter()
    await wait_http(bff, f"http://{HOST}:{port}/readyz", within=60)
    await wait_http(capcom, f"{capcom_url}/readyz", within=60)
    await wait_serving([worker], within=60)
    ready_s = time.perf_counter() - started
    procs = {"bff": bff, "worker": worker, "capcom": capcom}
    meter = CpuMeter({name: (lambda c=child: [c.pid]) for name, child in procs.items()})
    await trio.sleep(1.0)  # settle: first claims, first sweeps

    start = meter.snapshot()
    await trio.sleep(args.idle)
    idle = meter.since(start)
    idle_rss = {name: _rss(child.pid) for name, child in procs.items()}

    headers = auth_headers()

    async def one(session: Any, k: int, i: int) -> str | None:
        return (await e2e_once(session, headers, f"r{k}-{i}-{time.monotonic_ns()}")).error

    async with raw_sessions([port]) as new_session:
        await closed_loop(1.0, args.clients, new_session, one)  # warm-up
        start = meter.snapshot()
        latencies, errors, elapsed = await closed_loop(args.load, args.clients, new_session, one)
        load = meter.since(start)
    load_rss = {name: _rss(child.pid) for name, child in procs.items()}
    rate = len(latencies) / elapsed
    figures: dict[str, float | int | None] = {
        "load_answers_per_s": round(rate, 1),
        "load_errors": len(errors),
        "others_load_cpu_pct": load["others_pct"],
    }
    for name in procs:
        figures |= {
            f"{name}_idle_cpu_pct": idle[f"{name}_pct"],
            f"{name}_idle_rss_mb": idle_rss[name]["rss_mb"],
            f"{name}_load_cpu_pct": load[f"{name}_pct"],
            f"{name}_load_cpu_ms_per_answer": round(load[f"{name}_s"] / len(latencies) * 1000, 3)
            if latencies
            else None,
            f"{name}_load_peak_rss_mb": load_rss[name]["peak_mb"],
        }
    return Result(
        tool="fleet",
        scenarios=["resources"],
        figures=figures,
        detail={
            "start_to_ready_s": round(ready_s, 2),
            "idle": idle,
            "load": load,
            "idle_rss": idle_rss,
            "load_rss": load_rss,
            "latency_ms": summary_ms(latencies),
            "errors": errors[:5],
        },
        config={"idle_s": args.idle, "load_s": args.load, "clients": args.clients},
    )


def _migrate(env: dict[str, str]) -> float:
    """``dataplane migrate`` (as :func:`migrate_schema` runs it); its peak RSS in MB."""
    proc = subprocess.Popen([*DATAPLANE, "migrate"], env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"dataplane migrate exited {proc.returncode}")
    close_to_public(env["MAESTRO_QUEUES_URL"])
    return usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=float, default=10.0, help="seconds measured at idle")
    parser.add_argument("--load", type=float, default=20.0, help="seconds measured under load")
    parser.add_argument("--clients", type=int, default=32, help="closed-loop clients")
    args = parser.parse_args()
    t0 = time.perf_counter()
    with scratch_server("dataplane_fleet") as server, children_scope(keep_logs=False) as kids:
        env = stack_env(server.dsn)
        migrate_peak_mb = _migrate(env)
        result = trio.run(_measure, kids, env, args)
        result.figures["migrate_peak_rss_mb"] = round(migrate_peak_mb, 1)
        _, result.machine = server_facts(server)
    result.total_seconds = round(time.perf_counter() - t0, 1)
    rows = [
        [
            role,
            result.figures[f"{role}_idle_cpu_pct"],
            result.figures[f"{role}_idle_rss_mb"],
            result.figures[f"{role}_load_cpu_pct"],
            result.figures[f"{role}_load_peak_rss_mb"],
        ]
        for role in ("bff", "worker", "capcom")
    ]
    print(
        format_table(["process", "idle CPU %", "idle RSS MB", "load CPU %", "load peak MB"], rows)
    )
    print_figures(result)
    print(f"written: {result.save()}")


if __name__ == "__main__":
    main()
