"""Where an idle ``Prefer: wait`` round trip's time goes: each process's time on a CPU.

Run from the repository root, as root (the kernel's scheduler tracepoints)::

    python bench/idle_path.py                # 300 sequential requests
    python bench/idle_path.py --gap-ms 20    # a pause between requests (colder caches)

One stack as ``bench/prefer_wait.py`` brings it up (its own embedded Postgres, ONE BFF,
ONE ``dataplane worker`` on ``surface-probe``). The load generator (this process) sends
``probe.echo`` POSTs with ``Prefer: wait=1`` one after the other on one keep-alive
connection, while ``perf record -e sched:sched_switch -a -k CLOCK_MONOTONIC`` (Debian's
``linux-perf``) records every context switch on every CPU. Each request's window (the
POST's start to its answer, ``time.monotonic()``, the clock perf stamps with) is then
cut out of that record: for each process group (the client, the BFF's serving process,
the worker, every Postgres process) the time it spent on a CPU inside the window, and
the time when none of them ran (wake-ups, the WAL flush, the host's own work).

The request is a chain (client -> BFF -> Postgres -> worker -> Postgres -> BFF ->
client): each hop waits for the one before, so the sum of the groups' CPU times is close
to the latency; this table is the floor a latency target has to go under. Medians over
the requests; perf's own cost is on the latency column (compare ``prefer_wait.py``).

Prints a table and writes ``bench/results/idle_path.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import trio

from bench.harness.client import auth_headers, open_sessions
from bench.harness.common import (
    format_table,
    now_iso,
    output_arg,
    run_and_save,
    scratch_server,
    server_facts,
    until_signalled,
)
from bench.harness.procs import WORKER_ARGV, Children, children_scope, postgres_pids, postmaster_pid
from bench.harness.stack import QUEUE_TYPE, migrate_schema, stack_env, start_bff, wait_serving
from bench.prefer_wait import prefer_once

GROUPS = ("client", "bff", "worker", "postgres")
WARMUP = 100
_SWITCH = re.compile(r"\[(\d+)\]\s+([\d.]+):.*prev_pid=(\d+) .*==> .*next_pid=(\d+)")


@dataclass(frozen=True)
class Plan:
    requests: int = 300
    gap_ms: float = 0.0


def perf_binary() -> str:
    found = shutil.which("perf")
    if found is None:
        raise SystemExit("perf is not installed: apt-get install linux-perf")
    return found


async def bench(
    plan: Plan, kids: Children, env: dict[str, str], pg_pid: int | None, record: Path
) -> dict[str, Any]:
    bff = await start_bff(kids, "bff", env)
    worker = kids.start("worker", WORKER_ARGV, {**env, "SURFACE_QUEUE_TYPE": QUEUE_TYPE})
    await wait_serving([worker])
    headers, run = auth_headers(), uuid.uuid4().hex[:8]
    windows: list[tuple[float, float]] = []
    errors: list[str] = []
    async with open_sessions("raw", bff.port, 2) as new_session:
        session = new_session()
        for i in range(WARMUP):
            await prefer_once(session, headers, f"{run}-w{i}")
        argv = [perf_binary(), "record", "-q", "-e", "sched:sched_switch", "-a"]
        argv += ["-k", "CLOCK_MONOTONIC", "-o", str(record)]
        perf = kids.start("perf", argv, dict(os.environ))
        try:
            await trio.sleep(1.0)  # perf is recording
            for i in range(plan.requests):
                start = time.monotonic()
                answer = await prefer_once(session, headers, f"{run}-{i}")
                windows.append((start, time.monotonic()))
                if answer.error or answer.via != "post":
                    errors.append(answer.error or "answered via the stream")
                if plan.gap_ms:
                    await trio.sleep(plan.gap_ms / 1000)
        finally:
            perf.proc.send_signal(signal.SIGINT)  # perf writes what it recorded
            await trio.to_thread.run_sync(perf.proc.wait, 30)
    pids = {
        "client": {os.getpid()},
        "bff": {bff.serving},
        "worker": {worker.pid},
        "postgres": set(postgres_pids(pg_pid)),
    }
    await trio.to_thread.run_sync(worker.stop, 20.0)
    return {"windows": windows, "errors": errors, "pids": pids}


def on_cpu(record: Path, pids: dict[str, set[int]]) -> list[tuple[float, float, str]]:
    """(start, end, group) of every stretch a process of a group ran on a CPU (a group's
    threads other than its main one, e.g. an exporter, count as "other")."""
    script = subprocess.run(
        [perf_binary(), "script", "-i", str(record), "-F", "cpu,time,trace"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    group_of = {pid: name for name, members in pids.items() for pid in members}
    running: dict[int, tuple[float, int]] = {}  # cpu -> (since, pid)
    stretches: list[tuple[float, float, str]] = []
    for line in script.splitlines():
        m = _SWITCH.search(line)
        if m is None:
            continue
        cpu, at, _prev, nxt = int(m[1]), float(m[2]), int(m[3]), int(m[4])
        if cpu in running:
            since, pid = running[cpu]
            stretches.append((since, at, group_of.get(pid, "idle" if pid == 0 else "other")))
        running[cpu] = (at, nxt)
    return stretches


def cut(
    windows: list[tuple[float, float]], stretches: list[tuple[float, float, str]]
) -> dict[str, list[float]]:
    """Per request: ms on a CPU by group, the latency, and the ms none of ours ran."""
    stretches.sort()
    out: dict[str, list[float]] = defaultdict(list)
    first = 0
    for start, end in windows:
        while first < len(stretches) and stretches[first][1] <= start:
            first += 1
        busy: dict[str, float] = defaultdict(float)
        ours: list[tuple[float, float]] = []
        for s, e, group in stretches[first:]:
            if s >= end:
                break
            lo, hi = max(s, start), min(e, end)
            if hi <= lo:
                continue
            busy[group] += hi - lo
            if group in GROUPS:
                ours.append((lo, hi))
        covered, last = 0.0, start
        for lo, hi in sorted(ours):
            if hi > last:
                covered += hi - max(lo, last)
                last = hi
        for group in GROUPS:
            out[group].append(busy[group] * 1000)
        out["latency"].append((end - start) * 1000)
        out["none_of_ours"].append(((end - start) - covered) * 1000)
        out["other"].append(busy["other"] * 1000)
    return out


def run(plan: Plan) -> dict[str, Any]:
    with (
        scratch_server("dataplane_idle_path") as server,
        children_scope() as kids,
        tempfile.TemporaryDirectory(prefix="dataplane-idle-path-") as tmp,
    ):
        print(f"server: {server.kind}; logs in {kids.log_dir}; recording...", flush=True)
        settings, machine = server_facts(server)
        env = stack_env(server.dsn)
        migrate_schema(env)
        record = Path(tmp) / "perf.data"
        raw = trio.run(until_signalled, bench, plan, kids, env, postmaster_pid(server), record)
        per_request = cut(raw["windows"], on_cpu(record, raw["pids"]))
    medians = {k: round(statistics.median(v), 3) for k, v in per_request.items()}
    cpu_sum = round(sum(medians[g] for g in GROUPS), 3)
    return {
        "date": now_iso(),
        "machine": machine,
        "config": {
            "server": server.kind,
            "server_settings": settings,
            "plan": dict(plan.__dict__),
            "prefer": "Prefer: wait=1, probe.echo, one keep-alive connection, sequential",
            "recorder": "perf record -e sched:sched_switch -a -k CLOCK_MONOTONIC",
        },
        "requests": len(raw["windows"]),
        "error_count": len(raw["errors"]),
        "errors": raw["errors"][:5],
        "median_ms": medians,
        "sum_of_group_medians_ms": cpu_sum,
        "p90_ms": {k: round(sorted(v)[int(0.9 * (len(v) - 1))], 3) for k, v in per_request.items()},
        # Means add up (a process's CPU per request); a bimodal group's median does not.
        "mean_ms": {k: round(statistics.fmean(v), 3) for k, v in per_request.items()},
    }


def print_tables(result: dict[str, Any]) -> None:
    med, p90, mean = result["median_ms"], result["p90_ms"], result.get("mean_ms", {})
    groups = (*GROUPS, "other", "none_of_ours", "latency")
    rows = [[g, med[g], p90[g], mean.get(g, "")] for g in groups]
    summed = round(sum(mean[g] for g in GROUPS), 3) if mean else ""
    rows.append(["CPU of the four, summed", result["sum_of_group_medians_ms"], "", summed])
    print()
    print(format_table(["per idle Prefer request", "median ms", "p90 ms", "mean ms"], rows))
    print(f"\n{result['requests']} requests, {result['error_count']} errors")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=Plan.requests)
    parser.add_argument("--gap-ms", type=float, default=0.0, help="pause between requests")
    output_arg(parser, "idle_path")
    args = parser.parse_args(argv)
    plan = Plan(requests=args.requests, gap_ms=args.gap_ms)
    result = run_and_save(
        lambda: run(plan), args.output, print_tables, "interrupted; every process was stopped"
    )
    return 130 if result is None else 0


if __name__ == "__main__":
    sys.exit(main())
