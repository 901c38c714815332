"""BFF CPU per request, robust to a busy host: many short windows, min and median.

The CPU of Hypercorn's serving process of ONE BFF (``/proc/<pid>/task/*/schedstat``,
nanoseconds) is read around each window of ``--per`` sequential requests on one
keep-alive connection, ``--windows`` times: the minimum window is the least
disturbed by other processes, the median the typical one. Then 32 closed-loop
clients for ``--load-seconds`` (e2e req/s, p50/p99 POST -> SSE done, CPU per e2e),
and the bare Hypercorn + Quart-Trio hello world the same ways, so every figure has
its baseline from the same minutes. Stack as ``bench/e2e.py`` (own embedded
Postgres unless ``MAESTRO_QUEUES_URL``; one BFF; one ``dataplane worker``).

    python bench/bff_cpu.py [--windows 10] [--per 40] [--load-seconds 8]

Prints the figures and writes ``bench/results/bff_cpu.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import json
import os
import shutil
import statistics
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from bench import e2e
from bench.harness.client import (
    Session,
    auth_headers,
    closed_loop,
    e2e_once,
    open_sessions,
    post_echo,
)
from bench.harness.common import (
    now_iso,
    output_arg,
    run_and_save,
    scratch_server,
    server_facts,
    until_signalled,
)
from bench.harness.procs import children_scope, postmaster_pid, raise_own_nofile
from bench.harness.stack import migrate_schema, stack_env, start_hello

CLIENTS = 32


def cpu_seconds(pid: int) -> float:
    """On-CPU time of every thread of ``pid`` (schedstat: ns, not 10 ms ticks)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat") as f:
            total += int(f.read().split()[0])
    return total / 1e9


async def windows(
    pid: int, op: Callable[[int, int], Awaitable[Any]], n: int, per: int
) -> dict[str, float]:
    """CPU ms per op of ``pid`` over ``n`` windows of ``per`` sequential ops."""
    out = []
    for w in range(n):
        c0 = cpu_seconds(pid)
        for i in range(per):
            await op(w, i)
        out.append((cpu_seconds(pid) - c0) * 1000 / per)
    return {"min": round(min(out), 3), "median": round(statistics.median(out), 3)}


def _pct(lat: list[float], q: float) -> float:
    ordered = sorted(lat)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000, 1)


async def bench(stack: e2e.Stack, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    out: dict[str, Any] = {}
    await e2e.start_stack_bff(stack)
    await e2e.start_worker(stack, stack.plan.worker_concurrency)
    h = auth_headers()
    pid = stack.bff_pid
    async with open_sessions("raw", stack.bff_port, 4) as new_session:
        s = new_session()
        for i in range(60):
            await e2e_once(s, h, f"{run}-w{i}")
        out["post_cpu_ms"] = await windows(
            pid, lambda w, i: post_echo(s, h, f"{run}-p{w}-{i}"), args.windows, args.per
        )
        out["e2e_cpu_ms"] = await windows(
            pid, lambda w, i: e2e_once(s, h, f"{run}-e{w}-{i}"), args.windows, args.per
        )

    async def one(session: Session, k: int, i: int) -> str | None:
        return (await e2e_once(session, h, f"{run}-l{k}-{i}")).error

    async with open_sessions("raw", stack.bff_port, CLIENTS * 2) as new_session:
        await closed_loop(1.0, CLIENTS, new_session, one)
        c0 = cpu_seconds(pid)
        lat, errors, elapsed = await closed_loop(args.load_seconds, CLIENTS, new_session, one)
        c1 = cpu_seconds(pid)
    out["load"] = {
        "clients": CLIENTS,
        "rps": round(len(lat) / elapsed, 1),
        "errors": len(errors),
        "p50_ms": _pct(lat, 0.5),
        "p99_ms": _pct(lat, 0.99),
        "cpu_ms_per_e2e": round((c1 - c0) * 1000 / max(1, len(lat)), 3),
    }
    await e2e.stop_worker(stack)

    hello = await start_hello(stack.kids, tmp)
    try:

        async def hello_get(session: Session, *_: int) -> str | None:
            status, _body = await session.request("GET", "/")
            return None if status == 200 else f"answered {status}"

        async with open_sessions("raw", hello.port, 4) as new_session:
            s = new_session()
            for _ in range(100):
                await hello_get(s)
            out["hello_cpu_ms"] = await windows(
                hello.serving, lambda w, i: hello_get(s), args.windows, args.per * 2
            )
        async with open_sessions("raw", hello.port, CLIENTS * 2) as new_session:
            await closed_loop(1.0, CLIENTS, new_session, hello_get)
            lat, errors, elapsed = await closed_loop(
                args.load_seconds, CLIENTS, new_session, hello_get
            )
        out["hello_rps"] = round(len(lat) / elapsed, 1)
    finally:
        await trio.to_thread.run_sync(hello.child.stop, 10.0)
    out["e2e_rps_vs_half_hello"] = round(out["load"]["rps"] / (out["hello_rps"] / 2), 3)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    raise_own_nofile()
    plan = e2e.Plan()
    tmp = Path(tempfile.mkdtemp(prefix="dataplane-bffcpu-"))
    try:
        with scratch_server("dataplane_bffcpu") as server, children_scope() as kids:
            _settings, machine = server_facts(server)
            env = stack_env(server.dsn, sse_deadline_s=plan.sse_deadline_s)
            migrate_schema(env)
            stack = e2e.Stack(server, kids, plan, env, pg_pid=postmaster_pid(server))
            raw = trio.run(until_signalled, bench, stack, tmp, args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"date": now_iso(), "machine": machine, "windows": args.windows, "per": args.per, **raw}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--windows", type=int, default=10)
    parser.add_argument("--per", type=int, default=40)
    parser.add_argument("--load-seconds", type=float, default=8.0)
    output_arg(parser, "bff_cpu")
    args = parser.parse_args()
    result = run_and_save(
        lambda: run(args), args.output, lambda r: print(json.dumps(r, indent=1)), "interrupted"
    )
    return 130 if result is None else 0


if __name__ == "__main__":
    sys.exit(main())
