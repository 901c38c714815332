"""The load driver: every HTTP figure of the design, by scenario, and two codes side by side.

Run from the repository root::

    python bench/load.py                      # idle load coalesce streams
    python bench/load.py idle load --quick    # smoke run, small counts
    python bench/load.py tracing scaling      # the slower scenarios
    python bench/load.py --ab ../base [--worker-per-side] [--rounds 6]

Its own stack on a scratch Postgres (one BFF, one worker on ``surface-probe``), the
clients in this process. What each scenario and ``--ab`` measure:
docs/perf/benchmarks.md. Prints the figures and writes
``bench/results/load-<scenarios>.json`` (``--output``; not committed).
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
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import httpx
import trio

from bench.harness.client import (
    Headers,
    Session,
    auth_headers,
    closed_loop,
    e2e_once,
    hello_load,
    post_echo,
    raw_sessions,
)
from bench.harness.common import (
    Server,
    admin_sql,
    scratch_server,
    server_facts,
    summary_ms,
    until_signalled,
)
from bench.harness.procs import (
    REPO,
    WORKER_ARGV,
    Child,
    Children,
    CpuMeter,
    children_scope,
    cpu_ms_per_op,
    cpu_seconds,
    postgres_pids,
    postmaster_pid,
    raise_own_nofile,
    rss_mb,
)
from bench.harness.result import Result, commit_of, interruptible, print_figures
from bench.harness.stack import (
    BFF_OPTIONS,
    HOST,
    QUEUE_TYPE,
    Hypercorn,
    migrate_schema,
    stack_env,
    start_bff,
    start_hello,
    start_hypercorn,
    start_sink,
    stop_children,
    wait_serving,
)

SCENARIOS = ("idle", "load", "coalesce", "streams", "tracing", "scaling")
DEFAULT = ("idle", "load", "coalesce", "streams")
PREFER_WAIT_S = 1  # what dataClient.js sends
DEV_TIER = "-dev"  # a side with a worker of its own: its BFF and worker on this tier


@dataclass(frozen=True)
class Plan:
    warmup: int = 30
    requests: int = 400  # per way, idle
    clients: int = 32
    load_seconds: float = 10.0
    hello_seconds: float = 6.0
    coalesce: int = 500
    coalesce_job_ms: int = 10_000  # longer than accepting the whole burst takes
    streams: int = 5000
    stream_open_concurrency: int = 200
    drain_concurrency: int = 256  # the worker that answers the waiting streams
    rounds: int = 6  # --ab and tracing: alternating rounds
    slice_seconds: float = 2.5
    slice_warm_s: float = 0.5
    scaling_points: tuple[tuple[int, int], ...] = ((1, 1), (2, 1), (4, 1), (1, 2), (1, 4))
    scaling_seconds: float = 8.0

    @classmethod
    def quick(cls) -> Plan:
        return cls(
            warmup=5,
            requests=60,
            load_seconds=2.0,
            hello_seconds=1.5,
            coalesce=50,
            coalesce_job_ms=3000,
            streams=300,
            rounds=2,
            slice_seconds=1.0,
            slice_warm_s=0.2,
            scaling_points=((1, 1), (2, 1)),
            scaling_seconds=2.0,
        )


Figures = dict[str, Any]


# -- ways of asking: one answer each ------------------------------------------------


async def way_sse(session: Session, headers: Headers, value: str) -> str | None:
    """POST -> 202, then the stream to ``event: done`` (two requests)."""
    return (await e2e_once(session, headers, value)).error


async def way_prefer(session: Session, headers: Headers, value: str) -> str | None:
    """POST with ``Prefer: wait`` -> the 200 answer (one request)."""
    body = json.dumps({"operation": "echo", "params": {"value": value}}).encode()
    hdrs = {**(headers or {}), "Prefer": f"wait={PREFER_WAIT_S}"}
    status, raw = await session.request("POST", "/api/probe/q", body, hdrs)
    if status != 200:
        return f"POST answered {status}: {raw[:200]!r}"
    if json.loads(raw).get("result", {}).get("echo") != value:
        return f"unexpected answer {raw[:200]!r}"
    return None


async def way_post(session: Session, headers: Headers, value: str) -> str | None:
    """POST -> 202 only (the job runs on)."""
    await post_echo(session, headers, value)
    return None


Way = Callable[[Session, Headers, str], Awaitable[str | None]]
WAYS: dict[str, Way] = {"post": way_post, "sse": way_sse, "prefer": way_prefer}


# -- the stack ----------------------------------------------------------------------


@dataclass
class Stack:
    server: Server
    kids: Children
    plan: Plan
    env: dict[str, str]
    tmp: Path
    pg_pid: int | None = None
    bff: Hypercorn | None = None
    worker: Child | None = None
    started: int = 0

    @property
    def port(self) -> int:
        assert self.bff is not None
        return self.bff.port

    def meter(self) -> CpuMeter:
        return CpuMeter(
            {
                "bff": lambda: [self.bff.serving] if self.bff else [],
                "worker": lambda: [self.worker.pid] if self.worker and self.worker.alive() else [],
                "postgres": lambda: postgres_pids(self.pg_pid),
            }
        )

    async def start_worker(self, concurrency: int | None = None) -> None:
        env = {**self.env, "SURFACE_QUEUE_TYPE": QUEUE_TYPE}
        if concurrency is not None:
            env["DATAPLANE_CONCURRENCY"] = str(concurrency)
        self.started += 1
        self.worker = self.kids.start(f"worker-{self.started}", WORKER_ARGV, env)
        await wait_serving([self.worker], within=60)

    async def stop_worker(self) -> None:
        if self.worker is not None:
            await stop_children([self.worker])
            self.worker = None


async def sequential(
    port: int, way: Way, tag: str, warmup: int, n: int, meter: CpuMeter
) -> dict[str, Any]:
    """``n`` requests one after the other on one keep-alive connection, after ``warmup``."""
    headers = auth_headers()
    lat: list[float] = []
    errors: list[str] = []
    async with raw_sessions([port]) as new_session:
        session = new_session()
        for i in range(warmup):
            await way(session, headers, f"{tag}-w{i}")
        cpu0 = meter.snapshot()
        for i in range(n):
            t0 = time.perf_counter()
            err = await way(session, headers, f"{tag}-{i}")
            if err:
                errors.append(err)
            else:
                lat.append(time.perf_counter() - t0)
        cpu = meter.since(cpu0)
    return {
        "ms": summary_ms(lat),
        "errors": len(errors),
        "error_samples": errors[:3],
        "cpu": cpu,
        "cpu_ms_per_request": cpu_ms_per_op(cpu, len(lat)),
    }


async def closed(
    ports: Sequence[int], way: Way, tag: str, clients: int, seconds: float, meter: CpuMeter
) -> dict[str, Any]:
    """``clients`` closed loops for ``seconds`` after a 1 s warm-up."""
    headers = auth_headers()

    def one(run: str) -> Callable[[Session, int, int], Awaitable[str | None]]:
        async def go(session: Session, k: int, i: int) -> str | None:
            return await way(session, headers, f"{run}-{k}-{i}")

        return go

    async with raw_sessions(ports) as new_session:
        await closed_loop(1.0, clients, new_session, one(f"{tag}w"))
        cpu0 = meter.snapshot()
        lat, errors, elapsed = await closed_loop(seconds, clients, new_session, one(tag))
        cpu = meter.since(cpu0)
    return {
        "rps": round(len(lat) / elapsed, 1),
        "answered": len(lat),
        "errors": len(errors),
        "error_samples": errors[:3],
        "ms": summary_ms(lat),
        "cpu": cpu,
        "cpu_ms_per_answer": cpu_ms_per_op(cpu, len(lat)),
    }


# -- scenarios ----------------------------------------------------------------------


async def scenario_idle(stack: Stack, run: str) -> tuple[Figures, dict[str, Any]]:
    plan, meter = stack.plan, stack.meter()
    detail = {
        name: await sequential(
            stack.port, WAYS[name], f"{run}-i{name}", plan.warmup, plan.requests, meter
        )
        for name in ("post", "sse", "prefer")
    }
    post, sse, prefer = detail["post"]["ms"], detail["sse"]["ms"], detail["prefer"]["ms"]
    figures = {
        "post_p50_ms": post.get("p50"),
        "e2e_p50_ms": sse.get("p50"),
        "e2e_p99_ms": sse.get("p99"),
        "prefer_p50_ms": prefer.get("p50"),
        "prefer_p99_ms": prefer.get("p99"),
        "idle_errors": sum(d["errors"] for d in detail.values()),
    }
    return figures, detail


async def scenario_load(stack: Stack, run: str) -> tuple[Figures, dict[str, Any]]:
    plan, meter = stack.plan, stack.meter()
    detail: dict[str, Any] = {}
    for name in ("sse", "prefer"):
        detail[name] = await closed(
            [stack.port], WAYS[name], f"{run}-l{name}", plan.clients, plan.load_seconds, meter
        )
    hello = await start_hello(stack.kids, stack.tmp)
    detail["hello"] = await hello_load(hello.port, hello.serving, plan.hello_seconds, plan.clients)
    await stop_children([hello.child])
    half_hello = detail["hello"]["hello_rps"] / 2
    sse, prefer = detail["sse"], detail["prefer"]
    figures = {
        "load_sse_rps": sse["rps"],
        "load_prefer_rps": prefer["rps"],
        "load_sse_pct_of_half_hello": round(100 * sse["rps"] / half_hello, 1),
        "load_prefer_pct_of_half_hello": round(100 * prefer["rps"] / half_hello, 1),
        "load_prefer_p99_ms": prefer["ms"].get("p99"),
        "load_unanswered": sse["errors"] + prefer["errors"],
        "bff_cpu_ms_sse": sse["cpu_ms_per_answer"].get("bff"),
        "bff_cpu_ms_prefer": prefer["cpu_ms_per_answer"].get("bff"),
        "hello_rps": detail["hello"]["hello_rps"],
        "hello_cpu_ms": detail["hello"]["cpu_ms_per_request"].get("hello"),
    }
    return figures, detail


async def scenario_coalesce(stack: Stack, run: str) -> tuple[Figures, dict[str, Any]]:
    """``plan.coalesce`` identical ``probe.sleep`` requests at once, then their answers."""
    n, job_ms = stack.plan.coalesce, stack.plan.coalesce_job_ms + int(run[:3], 16) % 97
    headers = auth_headers()
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    bodies: list[dict[str, Any]] = []
    done: list[str] = []
    gate = trio.Event()
    async with httpx.AsyncClient(
        base_url=f"http://{HOST}:{stack.port}", timeout=60, limits=limits
    ) as http:

        async def one() -> None:
            await gate.wait()
            body = {"operation": "sleep", "params": {"ms": job_ms}}
            resp = await http.post("/api/probe/q", json=body, headers=headers)
            resp.raise_for_status()
            bodies.append(resp.json())
            for _attempt in range(2):  # a pooled connection closed under us: once more
                try:
                    async with http.stream("GET", bodies[-1]["streamUrl"]) as stream:
                        async for line in stream.aiter_lines():
                            if line.startswith("event: done"):
                                done.append(line)
                                return
                except httpx.TransportError:
                    continue

        t0 = time.perf_counter()
        with trio.fail_after(job_ms / 1000 + 120):
            async with trio.open_nursery() as nursery:
                for _ in range(n):
                    nursery.start_soon(one)
                await trio.sleep(0.2)
                gate.set()
    ids = sorted({b["jobId"] for b in bodies})
    [[(executions,)]] = await admin_sql(  # claims of the jobs: one job, claimed once
        stack.server.dsn,
        (
            "SELECT coalesce(sum(dequeue_count), 0)::int FROM maestro_queues"
            " WHERE id = ANY(%s::uuid[])",
            (ids,),
        ),
    )
    detail = {
        "requests": n,
        "accepted": len(bodies),
        "distinct_jobs": len(ids),
        "coalesced_answers": sum(bool(b.get("coalesced")) for b in bodies),
        "elapsed_s": round(time.perf_counter() - t0, 3),
    }
    figures = {"coalesced_executions": executions, "coalesce_answered": len(done)}
    return figures, detail


@dataclass
class Tally:
    """The waiting streams: each opens (or fails to), then ends (done or not)."""

    total: int
    queued: list[float] = field(default_factory=list)
    done: list[float] = field(default_factory=list)  # wall clock of each done received
    opened: int = 0
    ended: int = 0
    all_open: trio.Event = field(default_factory=trio.Event)
    all_ended: trio.Event = field(default_factory=trio.Event)

    def open(self) -> None:
        self.opened += 1
        if self.opened >= self.total:
            self.all_open.set()

    def end(self) -> None:
        self.ended += 1
        if self.ended >= self.total:
            self.all_ended.set()


async def open_stream(path: str, port: int, opening: trio.CapacityLimiter, tally: Tally) -> None:
    """A minimal GET of an event stream: stamps ``event: queued``, then ``event: done``."""
    stream = None
    opened = False
    try:
        async with opening:
            stream = await trio.open_tcp_stream(HOST, port)
            await stream.send_all(
                f"GET {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
                "Accept: text/event-stream\r\n\r\n".encode()
            )
            buf = b""
            while b"event: queued" not in buf:
                data = await stream.receive_some(8192)
                if not data or b"event: done" in buf:
                    return
                buf += data
            tally.queued.append(time.perf_counter())
            opened = True
            tally.open()
        buf = b""
        while b"event: done" not in buf:
            data = await stream.receive_some(8192)
            if not data:
                return
            buf = buf[-16:] + data
        tally.done.append(time.time())
    except (OSError, trio.BrokenResourceError):
        return
    finally:
        if not opened:
            tally.open()
        tally.end()
        if stream is not None:
            await stream.aclose()


async def scenario_streams(stack: Stack, run: str) -> tuple[Figures, dict[str, Any]]:
    """``plan.streams`` streams waiting on one BFF, then answered by one worker."""
    plan, meter = stack.plan, stack.meter()
    await stack.stop_worker()
    headers = auth_headers()
    paths: list[str] = []
    counter = iter(range(plan.streams))
    async with raw_sessions([stack.port]) as new_session:

        async def poster() -> None:
            session = new_session()
            for i in counter:
                paths.append((await post_echo(session, headers, f"{run}-s{i}"))["streamUrl"])

        with trio.fail_after(180):
            async with trio.open_nursery() as nursery:
                for _ in range(32):
                    nursery.start_soon(poster)
    tally = Tally(len(paths))
    opening = trio.CapacityLimiter(plan.stream_open_concurrency)
    detail: dict[str, Any] = {}
    with trio.fail_after(360):
        async with trio.open_nursery() as nursery:
            cpu0 = meter.snapshot()
            for path in paths:
                nursery.start_soon(open_stream, path, stack.port, opening, tally)
            with trio.move_on_after(150):
                await tally.all_open.wait()
            detail["open"] = {"queued": len(tally.queued), "cpu": meter.since(cpu0)}
            await trio.sleep(2.0)
            detail["bff_rss_waiting_mb"] = rss_mb(stack.bff.serving if stack.bff else 0)
            cpu1 = meter.snapshot()
            await stack.start_worker(plan.drain_concurrency)
            with trio.move_on_after(120):
                await tally.all_ended.wait()
            detail["drain"] = {"done": len(tally.done), "cpu": meter.since(cpu1)}
            nursery.cancel_scope.cancel()
    await stack.stop_worker()
    await stack.start_worker()
    [[(last_completed,)]] = await admin_sql(
        stack.server.dsn,
        "SELECT extract(epoch FROM max(completed_at))::float8 FROM maestro_queues",
    )
    figures = {
        "streams_waiting": len(tally.queued),
        "streams_rss_mb": detail["bff_rss_waiting_mb"].get("VmRSS"),
        "streams_deliver_s": round(max(tally.done) - last_completed, 3) if tally.done else None,
        "streams_answered": len(tally.done),
    }
    return figures, detail


# -- sides: two BFFs (and maybe two workers) serving at once ------------------------


@dataclass
class Side:
    name: str
    env: dict[str, str]
    tree: Path = REPO
    own_worker: bool = False  # a worker of its own (tree), both on the -dev tier
    bff: Hypercorn | None = None
    slices: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


async def start_sides(kids: Children, env: dict[str, str], sides: Sequence[Side]) -> list[Child]:
    """Each side's BFF; one shared worker of this checkout, and one per ``own_worker`` side."""
    workers = [kids.start("worker", WORKER_ARGV, {**env, "SURFACE_QUEUE_TYPE": QUEUE_TYPE})]
    for side in sides:
        if side.own_worker:
            side.env["DATAPLANE_QUEUE_SUFFIX"] = DEV_TIER
            wenv = {**side.env, "SURFACE_QUEUE_TYPE": QUEUE_TYPE + DEV_TIER}
            workers.append(kids.start(f"worker-{side.name}", WORKER_ARGV, wenv, cwd=side.tree))
    await wait_serving(workers, within=60)
    for side in sides:
        side.bff = await start_hypercorn(
            kids, f"bff-{side.name}", "dataplane.app:app", side.env, cwd=side.tree,
            options=BFF_OPTIONS,
        )  # fmt: skip
    return workers


async def one_slice(
    side: Side, way: Way, tag: str, clients: int, seconds: float, warm: float
) -> dict[str, Any]:
    """One side loaded alone: warm, then ``seconds``; its BFF's CPU and answers."""
    assert side.bff is not None
    headers = auth_headers()
    pid = side.bff.serving

    async def one(session: Session, k: int, i: int) -> str | None:
        return await way(session, headers, f"{tag}-{k}-{i}")

    async with raw_sessions([side.bff.port]) as new_session:
        await closed_loop(warm, clients, new_session, one)
        c0 = cpu_seconds(pid) or 0.0
        lat, errors, elapsed = await closed_loop(seconds, clients, new_session, one)
        cpu = (cpu_seconds(pid) or 0.0) - c0
    return {"answered": len(lat), "errors": len(errors), "seconds": elapsed, "cpu_s": cpu,
            "latencies": lat}  # fmt: skip


async def alternate(sides: Sequence[Side], ways: Sequence[str], plan: Plan, clients: int) -> None:
    """``plan.rounds`` rounds; in each, every way, one slice per side, the order alternating."""
    for r in range(plan.rounds):
        for way in ways:
            order = sides if r % 2 == 0 else list(reversed(sides))
            for side in order:
                tag = f"{uuid.uuid4().hex[:8]}-{side.name}{r}"
                piece = await one_slice(
                    side, WAYS[way], tag, clients, plan.slice_seconds, plan.slice_warm_s
                )
                side.slices.setdefault(way, []).append(piece)
            print(f"  round {r + 1} {way}: " + _round_line(sides, way), flush=True)


def _cpu_ms(s: dict[str, Any]) -> float:
    return float(s["cpu_s"]) * 1000 / max(1, int(s["answered"]))


def _round_line(sides: Sequence[Side], way: str) -> str:
    return ", ".join(
        f"{s.name} {_cpu_ms(s.slices[way][-1]):.3f} ms CPU, "
        f"p50 {summary_ms(s.slices[way][-1]['latencies']).get('p50')} ms"
        for s in sides
    )


def pooled(side: Side, way: str) -> dict[str, Any]:
    slices = side.slices[way]
    answered = sum(s["answered"] for s in slices)
    return {
        "answered": answered,
        "errors": sum(s["errors"] for s in slices),
        "rps": round(answered / sum(s["seconds"] for s in slices), 1),
        "bff_cpu_ms_per_answer": round(sum(s["cpu_s"] for s in slices) * 1000 / answered, 4),
        "ms": summary_ms([x for s in slices for x in s["latencies"]]),
        "bff_cpu_ms_by_round": [round(_cpu_ms(s), 4) for s in slices],
    }


def compare(a: Side, b: Side, way: str) -> dict[str, Any]:
    pa, pb = pooled(a, way), pooled(b, way)
    ratios = [_cpu_ms(y) / _cpu_ms(x) for x, y in zip(a.slices[way], b.slices[way], strict=True)]
    return {
        "a": pa,
        "b": pb,
        "cpu_b_over_a": round(pb["bff_cpu_ms_per_answer"] / pa["bff_cpu_ms_per_answer"], 4),
        "cpu_b_over_a_by_round": [round(x, 4) for x in ratios],
        "cpu_b_over_a_median_of_rounds": round(statistics.median(ratios), 4),
        "rounds_b_cheaper": sum(1 for x in ratios if x < 1),
        "p50_b_over_a": round(pb["ms"]["p50"] / pa["ms"]["p50"], 4),
    }


async def scenario_tracing(stack: Stack, run: str) -> tuple[Figures, dict[str, Any]]:
    """Telemetry off (a) against OTLP traces + metrics to a sink (b), one client at a time."""
    sink = await start_sink(stack.kids, stack.tmp)
    await stack.stop_worker()
    off = {k: v for k, v in stack.env.items() if not k.startswith("OTEL_")}
    on = {**off, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{HOST}:{sink.port}"}
    a, b = Side("a", off), Side("b", on, own_worker=True)
    workers = await start_sides(stack.kids, off, [a, b])
    plan = replace(stack.plan, slice_seconds=stack.plan.slice_seconds * 2)
    await alternate([a, b], ["sse"], plan, clients=1)
    await stop_children([*(s.bff.child for s in (a, b) if s.bff), *workers])  # b flushes
    async with httpx.AsyncClient(timeout=10) as http:  # what b exported (proof it did)
        exported = (await http.get(f"http://{HOST}:{sink.port}/")).json()
    await stop_children([sink.child])
    await stack.start_worker()
    cmp = compare(a, b, "sse")
    overhead = round(100 * (cmp["p50_b_over_a"] - 1), 2)
    by_round = [
        round(100 * (statistics.median(y["latencies"]) / statistics.median(x["latencies"]) - 1), 1)
        for x, y in zip(a.slices["sse"], b.slices["sse"], strict=True)
        if x["latencies"] and y["latencies"]
    ]
    figures = {
        "tracing_overhead_p50_pct": overhead,
        "tracing_e2e_p50_ms_off": cmp["a"]["ms"]["p50"],
    }
    return figures, {"sse": cmp, "overhead_p50_pct_by_round": by_round, "exported": exported}


async def scenario_scaling(stack: Stack, run: str) -> tuple[Figures, dict[str, Any]]:
    """End-to-end answers/s at 32 clients with N BFFs and M workers (the stack's own
    BFF stays up, idle; its worker is stopped meanwhile)."""
    plan = stack.plan
    await stack.stop_worker()
    points = []
    for n_bff, n_worker in plan.scaling_points:
        tag = f"{run}-x{n_bff}{n_worker}"
        wenv = {**stack.env, "SURFACE_QUEUE_TYPE": QUEUE_TYPE}
        workers = [stack.kids.start(f"{tag}-w{i}", WORKER_ARGV, wenv) for i in range(n_worker)]
        bffs = [await start_bff(stack.kids, f"{tag}-b{i}", stack.env) for i in range(n_bff)]
        await wait_serving(workers, within=60)
        pids = [b.serving for b in bffs] + [w.pid for w in workers]
        meter = CpuMeter({"stack": pids.copy})
        got = await closed(
            [b.port for b in bffs], WAYS["sse"], tag, plan.clients, plan.scaling_seconds, meter
        )
        await stop_children([*workers, *(b.child for b in bffs)])
        points.append({"bffs": n_bff, "workers": n_worker, **got})
        print(f"  {n_bff} BFF / {n_worker} worker: {got['rps']} answers/s", flush=True)
    await stack.start_worker()
    figures = {f"scaling_rps_{p['bffs']}b{p['workers']}w": p["rps"] for p in points}
    return figures, {"points": points}


RUN: dict[str, Callable[[Stack, str], Awaitable[tuple[Figures, dict[str, Any]]]]] = {
    "idle": scenario_idle,
    "load": scenario_load,
    "coalesce": scenario_coalesce,
    "streams": scenario_streams,
    "tracing": scenario_tracing,
    "scaling": scenario_scaling,
}


# -- orchestration ------------------------------------------------------------------


async def run_scenarios(stack: Stack, names: Sequence[str], result: Result) -> None:
    run = uuid.uuid4().hex[:8]
    stack.bff = await start_bff(stack.kids, "bff", stack.env)
    await stack.start_worker()
    for name in names:
        print(f"{name}...", flush=True)
        t0 = time.perf_counter()
        figures, detail = await RUN[name](stack, run)
        result.figures.update(figures)
        result.detail[name] = {**detail, "seconds": round(time.perf_counter() - t0, 1)}
        print("  " + ", ".join(f"{k} {v}" for k, v in figures.items()), flush=True)
    if "hello_rps" in result.figures:
        result.references["hello_rps"] = result.figures.pop("hello_rps")
        result.references["hello_cpu_ms"] = result.figures.pop("hello_cpu_ms")


async def run_ab(
    kids: Children, env: dict[str, str], args: argparse.Namespace, res: Result
) -> None:
    base = args.ab.resolve()
    plan: Plan = args.plan
    a_env = {**env, "PYTHONPATH": str(base), **dict(item.split("=", 1) for item in args.a_env)}
    a = Side("a", a_env, tree=base, own_worker=args.worker_per_side)
    b = Side("b", dict(env))
    workers = await start_sides(kids, env, [a, b])
    await alternate([a, b], args.ways, plan, plan.clients)
    await stop_children([*(s.bff.child for s in (a, b) if s.bff), *workers])
    for way in args.ways:
        cmp = compare(a, b, way)
        res.detail[way] = cmp
        res.figures[f"bff_cpu_ms_{way}"] = cmp["b"]["bff_cpu_ms_per_answer"]
        res.figures[f"bff_cpu_ms_{way}_b_over_a"] = cmp["cpu_b_over_a"]
        res.references[f"bff_cpu_ms_{way}_a"] = cmp["a"]["bff_cpu_ms_per_answer"]
    res.references["a"] = commit_of(base)


def run(args: argparse.Namespace) -> Result:
    raise_own_nofile()
    plan: Plan = args.plan
    names = ["ab"] if args.ab else args.scenarios
    result = Result(tool="load", scenarios=names, config={"plan": asdict(plan)})
    if args.ab:
        result.config.update(worker_per_side=args.worker_per_side, ways=args.ways, a_env=args.a_env)
        if not (args.ab / "dataplane" / "__init__.py").is_file():
            raise SystemExit(f"--ab {args.ab}: no dataplane package there")
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="dataplane-load-"))
    try:
        with scratch_server("dataplane_load") as server, children_scope(keep_logs=False) as kids:
            settings, result.machine = server_facts(server)
            result.config["server"] = settings
            env = stack_env(server.dsn, DATAPLANE_MAX_LIVE_PER_CLIENT=str(2 * plan.streams + 100))
            migrate_schema(env)
            if args.ab:
                trio.run(until_signalled, run_ab, kids, env, args, result)
            else:
                stack = Stack(server, kids, plan, env, tmp, pg_pid=postmaster_pid(server))
                trio.run(until_signalled, run_scenarios, stack, names, result)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result.total_seconds = round(time.perf_counter() - t0, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("scenarios", nargs="*", help=f"of {', '.join(SCENARIOS)}")
    parser.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    parser.add_argument("--ab", type=Path, metavar="BASE", help="another checkout: side a")
    parser.add_argument(
        "--worker-per-side",
        action="store_true",
        help="--ab: side a gets a worker of its own code, on the dev tier",
    )
    parser.add_argument(
        "--a-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="--ab: variables for side a's processes (e.g. --ab . --a-env "
        "DATAPLANE_STOCK_STACK=1 --worker-per-side: the stock stack against this one)",
    )
    parser.add_argument("--rounds", type=int, help="--ab and tracing: alternating rounds")
    parser.add_argument("--seconds", type=float, help="--ab and tracing: seconds per slice")
    parser.add_argument("--ways", type=lambda s: s.split(","), default=["sse", "prefer"])
    parser.add_argument("--output", type=Path, help="result JSON (default bench/results/)")
    args = parser.parse_args(argv)
    if any("=" not in item for item in args.a_env):
        parser.error("--a-env takes KEY=VALUE")
    args.scenarios = args.scenarios or list(DEFAULT)
    if unknown := set(args.scenarios) - set(SCENARIOS):
        parser.error(f"unknown scenario(s) {sorted(unknown)}: choose of {', '.join(SCENARIOS)}")
    plan = Plan.quick() if args.quick else Plan()
    if args.rounds:
        plan = replace(plan, rounds=args.rounds)
    if args.seconds:
        plan = replace(plan, slice_seconds=args.seconds)
    args.plan = plan
    result = interruptible(lambda: run(args))
    if result is None:
        return 130
    print_figures(result)
    print(f"\nwrote {result.save(args.output)} ({result.total_seconds}s)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
