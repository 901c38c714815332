"""Scaling: end-to-end throughput with 1, 2, 4 BFF processes and 1, 2, 4 workers.

Run from the repository root::

    python bench/scaling.py            # own embedded Postgres (temp dir), durable defaults
    MAESTRO_QUEUES_URL=... python bench/scaling.py   # scratch db dataplane_scaling_<pid> there
    python bench/scaling.py --quick    # smoke run (~30 s)

Each point starts, on an emptied queue table, N BFF processes (each ``python -m
hypercorn -k trio -b 127.0.0.1:<own port> dataplane.app:app``, one spawned serving
process each, its own reply pump) and M ``dataplane worker`` processes
(``surface-probe``, ``DATAPLANE_PROBE=1``, default concurrency), then runs 32
closed-loop clients in this process (raw Trio sockets, one keep-alive connection
each, spread round-robin over the BFFs), each looping ``probe.echo`` POST -> GET
``streamUrl`` on the same BFF -> ``event: done``, for ~10 s after a 1 s warm-up, and
records requests per second, latency and the CPU of every process; then stops them.

Points: (BFFs, workers) = (1, 1), (2, 1), (4, 1) and (1, 2), (1, 4), and (1, 1)
once more at the end as a drift/noise check; plus the bare Hypercorn + Quart-Trio
hello world (``bench/e2e.py``'s) under the same 32 clients, for the e2e/hello ratio.

**Read with care**: this host has two cores (``nproc`` in the result). The clients,
Postgres and every BFF and worker share them, so beyond two busy processes a point
measures contention for those cores, not how the design scales on a bigger box; the
per-process CPU columns show where the cores went.

Prints a table and writes ``bench/results/scaling.json``. Every process started here
is stopped on exit, also on error, Ctrl-C and SIGTERM; the whole run is bounded
(under five minutes).
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as ``python bench/scaling.py``: the repository root first on sys.path (``bench``,
# and this checkout's ``dataplane``).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import itertools
import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import trio

from bench.harness.client import auth_headers, closed_loop, e2e_once, hello_load, raw_sessions
from bench.harness.common import (
    Server,
    format_table,
    now_iso,
    output_arg,
    run_and_save,
    scratch_server,
    server_facts,
    summary_ms,
    until_signalled,
)
from bench.harness.procs import (
    WORKER_ARGV,
    Child,
    Children,
    CpuMeter,
    children_scope,
    postgres_pids,
    postmaster_pid,
    raise_own_nofile,
)
from bench.harness.stack import (
    QUEUE_TYPE,
    Hypercorn,
    empty_queue,
    log_problems,
    migrate_schema,
    stack_env,
    start_bff,
    start_hello,
    stop_children,
    wait_serving,
)
from dataplane.dev.embedded import free_port

TOTAL_BUDGET_S = 250.0  # the whole trio part; server start/stop comes on top
CLIENT = "raw"
NOISY_OTHERS_PCT = 20.0  # CPU of processes not of this run above which a point is skewed


@dataclass(frozen=True)
class Plan:
    clients: int = 32
    warmup_s: float = 1.0
    seconds: float = 10.0  # per point
    hello_seconds: float = 10.0
    points: tuple[tuple[int, int], ...] = ((1, 1), (2, 1), (4, 1), (1, 2), (1, 4))
    repeat_first: bool = True  # (1, 1) again at the end: drift / noise check

    @classmethod
    def quick(cls) -> Plan:
        return cls(warmup_s=0.3, seconds=1.5, hello_seconds=1.5, repeat_first=False)


# -- processes ------------------------------------------------------------------


async def start_bffs(
    kids: Children, env: Mapping[str, str], names: Sequence[str]
) -> list[Hypercorn]:
    """Start them all at once; return when every one answers /readyz."""
    ports: set[int] = set()
    while len(ports) < len(names):
        ports.add(free_port())
    bffs: dict[str, Hypercorn] = {}

    async def start(name: str, port: int) -> None:
        bffs[name] = await start_bff(kids, name, env, port=port, within=60)

    async with trio.open_nursery() as nursery:
        for name, port in zip(names, sorted(ports), strict=True):
            nursery.start_soon(start, name, port)
    return [bffs[name] for name in names]


async def start_workers(
    kids: Children, env: Mapping[str, str], names: Sequence[str]
) -> list[Child]:
    wenv = {**env, "SURFACE_QUEUE_TYPE": QUEUE_TYPE}
    workers = [kids.start(name, WORKER_ARGV, wenv) for name in names]
    await wait_serving(workers, within=60)
    return workers


# -- one point --------------------------------------------------------------------


@dataclass
class Ctx:
    server: Server
    kids: Children
    plan: Plan
    env: dict[str, str]
    tmp: Path
    pg_pid: int | None
    seq: itertools.count[int] = field(default_factory=itertools.count)

    def postgres_pids(self) -> list[int]:
        return postgres_pids(self.pg_pid)


def _pids(*pids: int) -> Callable[[], list[int]]:
    return lambda: list(pids)


async def run_point(ctx: Ctx, n_bff: int, n_worker: int, run: str) -> dict[str, Any]:
    plan = ctx.plan
    k = next(ctx.seq)
    await empty_queue(ctx.server.dsn)
    t0 = time.perf_counter()
    started: dict[str, Any] = {}

    async def bffs_up() -> None:
        names = [f"p{k}-bff{i}" for i in range(n_bff)]
        started["bffs"] = await start_bffs(ctx.kids, ctx.env, names)

    async def workers_up() -> None:
        names = [f"p{k}-worker{i}" for i in range(n_worker)]
        started["workers"] = await start_workers(ctx.kids, ctx.env, names)

    async with trio.open_nursery() as nursery:  # all of them boot at once
        nursery.start_soon(bffs_up)
        nursery.start_soon(workers_up)
    bffs: list[Hypercorn] = started["bffs"]
    workers: list[Child] = started["workers"]
    start_s = time.perf_counter() - t0
    groups: dict[str, Callable[[], list[int]]] = {}
    for i, bff in enumerate(bffs):
        groups[f"bff{i}"] = _pids(bff.serving)
    for i, worker in enumerate(workers):
        groups[f"worker{i}"] = _pids(worker.pid)
    groups["postgres"] = ctx.postgres_pids
    meter = CpuMeter(groups)
    headers = auth_headers()
    cur = {"tag": f"{run}-p{k}w"}

    async def one(session: Any, c: int, i: int) -> str | None:
        return (await e2e_once(session, headers, f"{cur['tag']}-{c}-{i}")).error

    async with raw_sessions([b.port for b in bffs]) as new_session:
        await closed_loop(plan.warmup_s, plan.clients, new_session, one)
        cur["tag"] = f"{run}-p{k}"
        cpu0 = meter.snapshot()
        lat, errors, elapsed = await closed_loop(plan.seconds, plan.clients, new_session, one)
        cpu = meter.since(cpu0)
    exit_codes = await stop_children([*workers, *(b.child for b in bffs)])
    procs = {k[:-4]: v for k, v in cpu.items() if k.endswith("_pct")}
    stack_pct = sum(v for name, v in procs.items() if name.startswith(("bff", "worker")))
    problems = {c.name: p for c in [*workers, *(b.child for b in bffs)] if (p := log_problems(c))}
    return {
        "bffs": n_bff,
        "workers": n_worker,
        "rps": round(len(lat) / elapsed, 1),
        "p50_ms": summary_ms(lat).get("p50"),
        "p99_ms": summary_ms(lat).get("p99"),
        "e2e_ms": summary_ms(lat),
        "completed": len(lat),
        "error_count": len(errors),
        "errors": errors[:5],
        "seconds": round(elapsed, 3),
        "cpu_pct": procs,  # percent of one core, per process (bench = the load generator)
        "cpu_pct_bffs_and_workers": round(stack_pct, 1),
        "cpu_pct_total_of_run": round(sum(v for name, v in procs.items() if name != "others"), 1),
        "cpu_ms_per_e2e": {
            name: round(v / 100 * elapsed / len(lat) * 1000, 3) if lat else None
            for name, v in procs.items()
            if name != "others"
        },
        "start_s": round(start_s, 3),
        "exit_codes": exit_codes,
        "log_problems": problems,
    }


async def run_hello(ctx: Ctx) -> dict[str, Any]:
    plan = ctx.plan
    hello = await start_hello(ctx.kids, ctx.tmp)
    try:
        out: dict[str, Any] = await hello_load(
            hello.port, hello.serving, CLIENT, plan.hello_seconds, plan.clients
        )
    finally:
        await trio.to_thread.run_sync(hello.child.stop, 10.0)
    out["app"] = "bench/e2e.py's HELLO_APP: QuartTrio, GET / -> 'hello', hypercorn -k trio"
    return out


async def bench(ctx: Ctx) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    run = uuid.uuid4().hex[:8]
    plan = ctx.plan
    points = list(plan.points)
    if plan.repeat_first and points:
        points.append(points[0])
    out: list[dict[str, Any]] = []
    with trio.fail_after(TOTAL_BUDGET_S):
        for n_bff, n_worker in points:
            p = await run_point(ctx, n_bff, n_worker, run)
            out.append(p)
            print(
                f"  {n_bff} BFF x {n_worker} worker: {p['rps']:,.0f} e2e/s, p50 {p['p50_ms']} ms, "
                f"errors {p['error_count']}, others' CPU {p['cpu_pct'].get('others', 0):.0f} %",
                flush=True,
            )
        hello = await run_hello(ctx)
        print(f"  hello world: {hello['hello_rps']:,.0f} req/s", flush=True)
    return out, hello


def report(
    ctx: Ctx,
    settings: dict[str, str],
    machine: dict[str, Any],
    points: list[dict[str, Any]],
    hello: dict[str, Any],
) -> dict[str, Any]:
    plan = ctx.plan
    hello_rps = hello["hello_rps"]
    for p in points:
        p["rps_over_hello"] = round(p["rps"] / hello_rps, 3) if hello_rps else None
    base = points[0]["rps"] if points else 0.0
    for p in points:
        p["rps_vs_1x1"] = round(p["rps"] / base, 2) if base else None
    nproc = machine["nproc"]
    return {
        "scaling": points,
        "hello_rps": hello_rps,
        "hello": hello,
        "noisy_points": sum(1 for p in points if p["cpu_pct"].get("others", 0) > NOISY_OTHERS_PCT),
        "noisy_note": f"points with others > {NOISY_OTHERS_PCT:.0f} (percent of one core used "
        "by processes not of this run) ran on a busy host and are skewed",
        "cores_note": f"this host has {nproc} cores shared by the load generator, Postgres and "
        "every BFF and worker: with more than two busy processes a point measures contention "
        "for those cores, not the design's scaling on a bigger machine",
        "date": now_iso(),
        "machine": machine,
        "config": {
            "server": ctx.server.kind,
            "server_settings": settings,
            "embedded_settings_passed": ctx.server.extra_settings,
            "plan": asdict(plan),
            "bff": "python -m hypercorn -k trio -b 127.0.0.1:<own port> dataplane.app:app per "
            "BFF (1 spawned serving process each; CPU is that process's)",
            "worker": f"python -m dataplane worker, SURFACE_QUEUE_TYPE={QUEUE_TYPE}, "
            "DATAPLANE_PROBE=1, default concurrency",
            "client": f"{plan.clients} closed-loop tasks in the bench process (trio "
            f"{trio.__version__}), one raw-socket keep-alive connection each, assigned "
            "round-robin to the BFFs; each loop: probe.echo POST (distinct value) -> GET "
            "streamUrl on the same BFF -> 'event: done'",
            "point": "TRUNCATE the queue tables, start the BFFs and workers, "
            f"{plan.warmup_s}s warm-up (its own connections), {plan.seconds}s measured, stop",
            "cpu_pct": "percent of one core over the measured window from /proc/<pid>/stat; "
            "bench = this process (the clients), postgres = postmaster and its children, "
            "others = host busy time of processes not of this run (noise flag)",
            "no_telemetry": "no OTEL_* variable passed to the stack",
        },
    }


def print_tables(result: dict[str, Any]) -> None:
    rows = []
    for p in result["scaling"]:
        cpu = p["cpu_pct"]
        per = " ".join(
            f"{name} {v:.0f}" for name, v in cpu.items() if name.startswith(("bff", "worker"))
        )
        rows.append(
            [
                f"{p['bffs']} x {p['workers']}",
                p["rps"],
                p["p50_ms"],
                p["p99_ms"],
                p["error_count"],
                per,
                f"{cpu.get('postgres', 0):.0f}",
                f"{cpu.get('bench', 0):.0f}",
                f"{cpu.get('others', 0):.0f}",
                p["rps_over_hello"],
            ]
        )
    print()
    print(
        format_table(
            [
                "BFFs x workers",
                "e2e/s",
                "p50 ms",
                "p99 ms",
                "err",
                "CPU % per BFF / worker process",
                "pg %",
                "clients %",
                "others %",
                "/hello",
            ],
            rows,
        )
    )
    print(f"\nhello world (1 Hypercorn + Quart-Trio process): {result['hello_rps']:,.0f} req/s")
    print(f"note: {result['cores_note']}")
    noisy = [p for p in result["scaling"] if p["cpu_pct"].get("others", 0) > NOISY_OTHERS_PCT]
    if noisy:
        print(
            f"WARNING: {len(noisy)} of {len(result['scaling'])} points ran with more than "
            f"{NOISY_OTHERS_PCT:.0f} % of a core used by other processes on the host "
            "(others %): those figures are skewed, rerun on a quiet host"
        )
    problems = {f"{p['bffs']}x{p['workers']}": p["log_problems"] for p in result["scaling"]}
    problems = {k: v for k, v in problems.items() if v}
    if problems:
        print(f"log lines that look like trouble: {json.dumps(problems)[:1500]}")


def run(plan: Plan) -> dict[str, Any]:
    raise_own_nofile()
    tmp = Path(tempfile.mkdtemp(prefix="dataplane-scaling-"))
    try:
        with scratch_server("dataplane_scaling") as server, children_scope() as kids:
            print(f"server: {server.kind}; logs in {kids.log_dir}", flush=True)
            settings, machine = server_facts(server)
            env = stack_env(server.dsn, drop=("OTEL_",))
            migrate_schema(env)
            ctx = Ctx(server, kids, plan, env, tmp, postmaster_pid(server))
            points, hello = trio.run(until_signalled, bench, ctx)
            return report(ctx, settings, machine, points, hello)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="short smoke run (~30 s)")
    output_arg(parser, "scaling")
    args = parser.parse_args(argv)
    plan = Plan.quick() if args.quick else Plan()
    result = run_and_save(
        lambda: run(plan),
        args.output,
        print_tables,
        "interrupted; every process started was stopped",
    )
    return 130 if result is None else 0


if __name__ == "__main__":
    sys.exit(main())
