"""End-to-end benchmark: browser POST -> BFF -> Postgres queue -> worker -> SSE answer.

Run from the repository root::

    python bench/e2e.py            # own embedded Postgres (temp dir), durable defaults
    MAESTRO_QUEUES_URL=... python bench/e2e.py   # scratch db dataplane_e2e_<pid> there
    python bench/e2e.py --quick    # smoke run, small counts
    python bench/e2e.py --py-spy prof/       # also py-spy the BFF in phases 3 and 4

It starts its own stack: the scratch server, ``dataplane migrate``, ONE BFF
(``python -m hypercorn -k trio -b 127.0.0.1:<port> dataplane.app:app``, the
serving process is Hypercorn's one spawned worker) and ONE ``dataplane worker``
on ``surface-probe`` (``DATAPLANE_PROBE=1``). The load generator runs in this
process (Trio + httpx, raw Trio sockets for the 5,000 streams); every process
shares the host's cores, so each phase records the CPU each party used.

Phases (each bounded in count and time, under five minutes in all):

1. POST -> 202 at idle: sequential ``probe.echo`` POSTs on one keep-alive connection.
2. End to end at idle: POST, then GET the ``streamUrl`` and read until ``event: done``
   (latency = POST start -> done received), broken down with the job's server
   timestamps; once strictly sequential, once as two such loops in parallel.
3. Sustained: 32 concurrent clients running the phase-2 loop -> ``e2e_rps``; and a
   bare Hypercorn + Quart-Trio hello world under the same client -> ``hello_rps``.
4. 5,000 waiting streams on the one BFF: the worker is stopped, 5,000 distinct jobs
   are enqueued and 5,000 SSE streams opened (each reads ``event: queued``), the BFF's
   RSS is read, then a worker with ``DATAPLANE_CONCURRENCY=256`` drains them;
   ``sse_deliver_s`` = last job's ``completed_at`` -> last stream's ``done`` received.

Prints a table and writes ``bench/results/e2e.json``. Every process started here
is stopped on exit, also on error, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as ``python bench/e2e.py``: the repository root first on sys.path (``bench``,
# and this checkout's ``dataplane``).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import trio

from bench.harness.client import (
    E2eSample,
    Headers,
    Session,
    auth_headers,
    closed_loop,
    e2e_once,
    hello_load,
    open_sessions,
    post_echo,
)
from bench.harness.common import (
    Server,
    admin_sql,
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
    cpu_ms_per_op,
    fd_count,
    postgres_pids,
    postmaster_pid,
    raise_own_nofile,
    rss_mb,
)
from bench.harness.stack import (
    HOST,
    JWT_SECRET,
    QUEUE_TYPE,
    SSE_DEADLINE_S,
    migrate_schema,
    stack_env,
    start_bff,
    start_hello,
    wait_serving,
)

TOTAL_BUDGET_S = 240.0  # the whole trio part; server start/stop comes on top


@dataclass(frozen=True)
class Plan:
    post_warmup: int = 30
    post_requests: int = 400
    e2e_warmup: int = 30
    e2e_requests: int = 400
    e2e_parallel_loops: int = 2
    load_clients: int = 32
    load_seconds: float = 15.0
    hello_seconds: float = 10.0
    streams: int = 5000
    stream_post_tasks: int = 32  # concurrent POSTs enqueueing the phase-4 jobs
    stream_open_concurrency: int = 200  # streams being opened at once (connect .. queued)
    stream_idle_watch_s: float = 6.0  # BFF CPU with every stream waiting (covers a sweep)
    reference_seconds: float = 4.0  # phase 3 again with the other client, for its cost
    worker_concurrency: int = 8  # phases 1-3: the default
    drain_worker_concurrency: int = 256  # phase 4
    sse_deadline_s: float = SSE_DEADLINE_S  # BFF DATAPLANE_SSE_DEADLINE_SECONDS

    @classmethod
    def quick(cls) -> Plan:
        return cls(
            post_warmup=10,
            post_requests=100,
            e2e_warmup=10,
            e2e_requests=100,
            load_seconds=4.0,
            hello_seconds=3.0,
            streams=500,
            reference_seconds=2.0,
            stream_idle_watch_s=1.0,
        )


# -- the stack -----------------------------------------------------------------


@dataclass
class Stack:
    server: Server
    kids: Children
    plan: Plan
    env: dict[str, str]
    bff: Child | None = None
    bff_port: int = 0
    bff_pid: int = 0  # Hypercorn's serving (spawned) process
    worker: Child | None = None
    pg_pid: int | None = None
    worker_runs: list[dict[str, Any]] = field(default_factory=list)

    def postgres_pids(self) -> list[int]:
        return postgres_pids(self.pg_pid)

    def meter(self) -> CpuMeter:
        return CpuMeter(
            {
                "bff": lambda: [self.bff_pid] if self.bff_pid else [],
                "worker": lambda: [self.worker.pid] if self.worker and self.worker.alive() else [],
                "postgres": self.postgres_pids,
            }
        )


async def start_stack_bff(stack: Stack) -> None:
    bff = await start_bff(stack.kids, "bff", stack.env)
    stack.bff, stack.bff_port, stack.bff_pid = bff.child, bff.port, bff.serving


async def start_worker(stack: Stack, concurrency: int, within: float = 30.0) -> float:
    """Start the worker; seconds until it logged ``serving``."""
    env = {
        **stack.env,
        "SURFACE_QUEUE_TYPE": QUEUE_TYPE,
        "DATAPLANE_CONCURRENCY": str(concurrency),
    }
    t0 = time.perf_counter()
    name = f"worker-{len(stack.worker_runs)}"
    stack.worker = worker = stack.kids.start(name, WORKER_ARGV, env)
    await wait_serving([worker], within)
    ready = time.perf_counter() - t0
    stack.worker_runs.append({"name": name, "concurrency": concurrency, "ready_s": round(ready, 3)})
    return ready


async def stop_worker(stack: Stack) -> None:
    worker = stack.worker
    if worker is not None:
        rc = await trio.to_thread.run_sync(worker.stop, 20.0)
        stack.worker_runs[-1]["exit_code"] = rc
        stack.worker = None


async def job_times(dsn: str, ids: Sequence[str]) -> dict[str, tuple[float, ...]]:
    """id -> (created_at, claimed_at, completed_at) as epoch seconds (server clock = host's)."""
    [rows] = await admin_sql(
        dsn,
        (
            "SELECT id::text, extract(epoch FROM created_at)::float8,"
            " extract(epoch FROM claimed_at)::float8, extract(epoch FROM completed_at)::float8"
            " FROM maestro_queues WHERE id = ANY(%s::uuid[])",
            (list(ids),),
        ),
    )
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


# perf_counter -> wall clock (the job rows carry the server's wall clock).
_WALL_REF = time.time() - time.perf_counter()


def wall(perf: float) -> float:
    return _WALL_REF + perf


# -- phases --------------------------------------------------------------------


async def phase_post(stack: Stack, session: Session, run: str) -> dict[str, Any]:
    """Sequential POST -> 202 on one keep-alive connection, the worker running."""
    headers = auth_headers()
    plan = stack.plan
    for i in range(plan.post_warmup):
        await post_echo(session, headers, f"{run}-p1w-{i}")
    samples: list[float] = []
    meter = stack.meter()
    cpu0 = meter.snapshot()
    for i in range(plan.post_requests):
        t0 = time.perf_counter()
        await post_echo(session, headers, f"{run}-p1-{i}")
        samples.append(time.perf_counter() - t0)
    return {
        "requests": len(samples),
        "warmup": plan.post_warmup,
        "post_ms": summary_ms(samples),
        "cpu": (cpu := meter.since(cpu0)),
        "cpu_ms_per_post": cpu_ms_per_op(cpu, len(samples)),
        "connections": "one keep-alive connection, sequential",
    }


def _breakdown(samples: Sequence[E2eSample], times: Mapping[str, tuple[float, ...]]) -> Any:
    """Each request's path cut at the job row's server timestamps (one host clock)."""
    cuts: dict[str, list[float]] = {
        "post_start_to_created_at": [],
        "created_at_to_claimed_at": [],
        "claimed_at_to_completed_at": [],
        "completed_at_to_done_received": [],
        "post_start_to_202": [],
        "202_to_queued_event": [],
        "202_to_done_received": [],
    }
    for s in samples:
        created, claimed, completed = times.get(s.job_id, (None, None, None))
        cuts["post_start_to_202"].append(s.t_202 - s.t0)
        cuts["202_to_done_received"].append(s.t_done - s.t_202)
        if s.t_queued is not None:
            cuts["202_to_queued_event"].append(s.t_queued - s.t_202)
        if created is None or claimed is None or completed is None:
            continue
        cuts["post_start_to_created_at"].append(created - wall(s.t0))
        cuts["created_at_to_claimed_at"].append(claimed - created)
        cuts["claimed_at_to_completed_at"].append(completed - claimed)
        cuts["completed_at_to_done_received"].append(wall(s.t_done) - completed)
    return {k: summary_ms(v) for k, v in cuts.items()}


async def _e2e_sequential(
    session: Session, headers: Headers, tag: str, n: int, out: list[E2eSample]
) -> None:
    for i in range(n):
        out.append(await e2e_once(session, headers, f"{tag}-{i}"))


async def _e2e_report(dsn: str, samples: list[E2eSample]) -> dict[str, Any]:
    ok = [s for s in samples if not s.error]
    times = await job_times(dsn, [s.job_id for s in ok])
    pending = [s for s in ok if s.t_queued is not None]
    finished = [s for s in ok if s.t_queued is None]
    return {
        "requests": len(samples),
        "error_count": len(samples) - len(ok),
        "errors": [s.error for s in samples if s.error][:5],
        "e2e_ms": summary_ms([s.latency for s in ok]),
        "breakdown_ms": _breakdown(ok, times),
        "stream_found_job_pending": {
            "count": len(pending),
            "e2e_ms": summary_ms([s.latency for s in pending]),
            "note": "the stream answered event: queued, the done came through the reply pump",
        },
        "stream_found_job_finished": {
            "count": len(finished),
            "e2e_ms": summary_ms([s.latency for s in finished]),
            "note": "the job had finished by the stream's own row check: done at once",
        },
    }


async def phase_e2e_idle(stack: Stack, new_session: Any, run: str) -> dict[str, Any]:
    plan = stack.plan
    headers = auth_headers()
    session = new_session()
    await _e2e_sequential(session, headers, f"{run}-p2w", plan.e2e_warmup, [])
    meter = stack.meter()
    cpu0 = meter.snapshot()
    seq: list[E2eSample] = []
    await _e2e_sequential(session, headers, f"{run}-p2", plan.e2e_requests, seq)
    cpu = meter.since(cpu0)
    out = {
        "sequential": {
            **await _e2e_report(stack.server.dsn, seq),
            "cpu": cpu,
            "cpu_ms_per_e2e": cpu_ms_per_op(cpu, len(seq)),
        }
    }

    # The same loop by N tasks at once: each request's wait overlaps another's POST/wait.
    loops = plan.e2e_parallel_loops
    par: list[E2eSample] = []
    sessions = [new_session() for _ in range(loops)]
    for k, sess in enumerate(sessions):  # warm each connection
        await _e2e_sequential(sess, headers, f"{run}-p2pw{k}", 3, [])
    cpu1 = meter.snapshot()
    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for k, sess in enumerate(sessions):
            n = plan.e2e_requests // loops
            nursery.start_soon(_e2e_sequential, sess, headers, f"{run}-p2par{k}", n, par)
    elapsed = time.perf_counter() - t0
    out["parallel"] = {
        "loops": loops,
        **await _e2e_report(stack.server.dsn, par),
        "rps": round(sum(1 for s in par if not s.error) / elapsed, 1),
        "cpu": meter.since(cpu1),
    }
    out["method"] = (
        "sequential: POST, then right after the 202 GET streamUrl on the same keep-alive "
        "connection and read the body to its end; latency = POST start -> the chunk holding "
        "'event: done' parsed. parallel: the same loop run by N tasks at once on N "
        "connections (one request in flight per task, so each wait overlaps another's "
        "POST and wait). Breakdown: the job row's created_at/claimed_at/completed_at "
        "(Postgres now(), transaction start) against the client's wall clock (same host)."
    )
    return out


async def _e2e_load(
    stack: Stack, run: str, client: str, seconds: float, clients: int
) -> dict[str, Any]:
    headers = auth_headers()
    tag = f"{run}-p3{client}"

    async def one(session: Session, k: int, i: int) -> str | None:
        return (await e2e_once(session, headers, f"{tag}-{k}-{i}")).error

    async with open_sessions(client, stack.bff_port, clients * 2) as new_session:
        await closed_loop(1.0, clients, new_session, one)  # warm the connections
        tag += "m"
        meter = stack.meter()
        cpu0 = meter.snapshot()
        lat, errors, elapsed = await closed_loop(seconds, clients, new_session, one)
        cpu = meter.since(cpu0)
    return {
        "client": client,
        "clients": clients,
        "seconds": round(elapsed, 3),
        "completed": len(lat),
        "error_count": len(errors),
        "errors": errors[:5],
        "e2e_rps": round(len(lat) / elapsed, 1),
        "e2e_ms": summary_ms(lat),
        "cpu": cpu,
        "cpu_ms_per_e2e": cpu_ms_per_op(cpu, len(lat)),
        "worker_concurrency": stack.plan.worker_concurrency,
    }


async def phase_load(stack: Stack, run: str, client: str, profilers: Profilers) -> dict[str, Any]:
    plan = stack.plan
    profilers.start("bff-load", stack.bff_pid)
    profilers.start("worker-load", stack.worker.pid if stack.worker else 0)
    out = await _e2e_load(stack, run, client, plan.load_seconds, plan.load_clients)
    await profilers.finish()
    other = "httpx" if client == "raw" else "raw"
    out["other_client"] = await _e2e_load(
        stack, run, other, plan.reference_seconds, plan.load_clients
    )
    return out


async def phase_hello(stack: Stack, tmp: Path, client: str) -> dict[str, Any]:
    plan = stack.plan
    hello = await start_hello(stack.kids, tmp)
    try:
        port, serving = hello.port, hello.serving
        out = await hello_load(port, serving, client, plan.hello_seconds, plan.load_clients)
        other = "httpx" if client == "raw" else "raw"
        out["other_client"] = await hello_load(
            port, serving, other, plan.reference_seconds, plan.load_clients
        )
    finally:
        await trio.to_thread.run_sync(hello.child.stop, 10.0)
    out["app"] = "QuartTrio, one GET / returning 'hello', `python -m hypercorn -k trio -b ...`"
    return out


@dataclass
class Tally:
    """Phase-4 stream counts, with an event when each stage has settled for all."""

    total: int
    queued: int = 0
    failed_open: int = 0
    settled: int = 0
    all_open: trio.Event = field(default_factory=trio.Event)
    all_settled: trio.Event = field(default_factory=trio.Event)

    def opened(self, ok: bool) -> None:
        if ok:
            self.queued += 1
        else:
            self.failed_open += 1
        if self.queued + self.failed_open >= self.total:
            self.all_open.set()

    def finished(self) -> None:
        self.settled += 1
        if self.settled >= self.total:
            self.all_settled.set()


@dataclass
class RawStream:
    path: str
    job_id: str
    queued: float | None = None
    done: float | None = None
    error: str | None = None


async def _raw_stream(s: RawStream, port: int, opening: trio.CapacityLimiter, tally: Tally) -> None:
    """A minimal HTTP/1.1 GET of an event stream on a raw Trio socket.

    Reports to ``tally`` once queued (or failed before) and once finished.
    """
    request = (
        f"GET {s.path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nAccept: text/event-stream\r\n\r\n"
    ).encode()
    buf = b""
    stream: trio.SocketStream | None = None
    try:
        async with opening:
            stream = await trio.open_tcp_stream(HOST, port)
            await stream.send_all(request)
            while b"event: queued" not in buf:
                data = await stream.receive_some(8192)
                if not data:
                    raise RuntimeError(f"closed before queued: {buf[:200]!r}")
                buf += data
                if b"event: done" in buf or b"event: error" in buf:
                    raise RuntimeError(f"final event before queued: {buf[:300]!r}")
            if not buf.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"status: {buf[:100]!r}")
            s.queued = time.perf_counter()
            tally.opened(True)
        buf = buf[buf.index(b"event: queued") + 13 :]
        while True:
            data = await stream.receive_some(8192)
            if not data:
                raise RuntimeError("closed before the final event")
            buf = buf[-32:] + data
            if b"event: done" in buf:
                s.done = time.perf_counter()
                return
            if b"event: error" in buf:
                raise RuntimeError(f"error event: {buf[:300]!r}")
    except (OSError, RuntimeError, trio.BrokenResourceError) as exc:
        s.error = f"{type(exc).__name__}: {exc}"
        if s.queued is None:
            tally.opened(False)
    finally:
        tally.finished()
        if stream is not None:
            with contextlib.suppress(Exception):
                await stream.aclose()


async def phase_streams(
    stack: Stack, run: str, client: str, profilers: Profilers
) -> dict[str, Any]:
    """5,000 waiting streams on the one BFF, then a high-concurrency worker drains them."""
    plan = stack.plan
    headers = auth_headers()
    assert stack.bff is not None
    out: dict[str, Any] = {"streams": plan.streams}
    await stop_worker(stack)
    rss_before = rss_mb(stack.bff_pid)

    # Enqueue the jobs (no worker: they stay pending).
    bodies: list[Any] = [None] * plan.streams
    counter = iter(range(plan.streams))
    t0 = time.perf_counter()
    async with open_sessions(client, stack.bff_port, plan.stream_post_tasks * 2) as new_session:

        async def poster() -> None:
            session = new_session()
            for i in counter:
                bodies[i] = await post_echo(session, headers, f"{run}-p4-{i}")

        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                for _ in range(plan.stream_post_tasks):
                    nursery.start_soon(poster)
    post_s = time.perf_counter() - t0
    out["enqueue"] = {
        "client": client,
        "tasks": plan.stream_post_tasks,
        "seconds": round(post_s, 3),
        "posts_per_s": round(plan.streams / post_s, 1),
    }
    rss_posted = rss_mb(stack.bff_pid)

    streams = [RawStream(b["streamUrl"], b["jobId"]) for b in bodies]
    opening = trio.CapacityLimiter(plan.stream_open_concurrency)
    tally = Tally(plan.streams)
    meter = stack.meter()
    drain: dict[str, Any] = {}
    with trio.fail_after(240):
        async with trio.open_nursery() as nursery:
            profilers.start("bff-open", stack.bff_pid)
            t_open = time.perf_counter()
            cpu0 = meter.snapshot()
            for s in streams:
                nursery.start_soon(_raw_stream, s, stack.bff_port, opening, tally)
            # Every stream open (queued) or failed.
            with trio.move_on_after(150):
                await tally.all_open.wait()
            open_s = time.perf_counter() - t_open
            out["open"] = {
                "concurrency": plan.stream_open_concurrency,
                "queued": tally.queued,
                "failed": tally.failed_open,
                "seconds": round(open_s, 3),
                "streams_per_s": round(tally.queued / open_s, 1),
                "cpu": (cpu := meter.since(cpu0)),
                "cpu_ms_per_stream": cpu_ms_per_op(cpu, tally.queued),
                "errors": [s.error for s in streams if s.error][:5],
            }
            await profilers.finish()
            await trio.sleep(1.0)
            # The BFF with every stream waiting.
            cpu1 = meter.snapshot()
            await trio.sleep(plan.stream_idle_watch_s)
            out["waiting"] = {
                "bff_rss_mb": rss_mb(stack.bff_pid),
                "bff_rss_before_posts_mb": rss_before,
                "bff_rss_after_posts_mb": rss_posted,
                "bff_open_fds": -1 if (fds := fd_count(stack.bff_pid)) is None else fds,
                "bench_rss_mb": rss_mb(os.getpid()),
                "cpu_idle_waiting": meter.since(cpu1),
            }
            # Let a worker run them.
            cpu2 = meter.snapshot()
            t_worker = time.perf_counter()
            profilers.start("bff-drain", stack.bff_pid)
            ready_s = await start_worker(stack, plan.drain_worker_concurrency)
            profilers.start("worker-drain", stack.worker.pid if stack.worker else 0)
            with trio.move_on_after(120):
                await tally.all_settled.wait()
            await profilers.finish()
            drain["cpu"] = meter.since(cpu2)
            drain["cpu_ms_per_stream"] = cpu_ms_per_op(drain["cpu"], tally.settled)
            drain["worker_ready_s"] = round(ready_s, 3)
            drain["worker_started_to_last_done_s"] = round(time.perf_counter() - t_worker, 3)
            nursery.cancel_scope.cancel()  # stragglers, if the bound was hit

    done = [s for s in streams if s.done is not None]
    times = await job_times(stack.server.dsn, [s.job_id for s in streams])
    completed = [t[2] for t in times.values() if t[2] is not None]
    deliver = [wall(s.done) - times[s.job_id][2] for s in done if times[s.job_id][2] is not None]
    last_completed = max(completed) if completed else float("nan")
    last_done = wall(max(s.done for s in done)) if done else float("nan")
    drain.update(
        {
            "worker_concurrency": plan.drain_worker_concurrency,
            "done_received": len(done),
            "errors": sum(1 for s in streams if s.error),
            "error_samples": [s.error for s in streams if s.error][:5],
            "jobs_completed": len(completed),
            "first_to_last_completed_at_s": round(last_completed - min(completed), 3)
            if completed
            else None,
            "sse_deliver_s": round(last_done - last_completed, 3),
            "per_stream_completed_to_done_ms": summary_ms(deliver),
        }
    )
    out["drain"] = drain
    out["bff_rss_after_drain_mb"] = rss_mb(stack.bff_pid)
    out["method"] = (
        "worker stopped (SIGTERM) -> jobs POSTed by httpx -> streams opened on raw Trio "
        "sockets (minimal HTTP/1.1 GET, bytes scanned for 'event: queued' / 'event: done'), "
        "at most stream_open_concurrency connecting at once -> BFF VmRSS read from /proc "
        "of Hypercorn's serving process -> a new worker with drain_worker_concurrency; "
        "sse_deliver_s = max(done received, client wall clock) - max(completed_at)."
    )
    return out


# -- orchestration -------------------------------------------------------------


async def bench(stack: Stack, tmp: Path, client: str, profile_dir: Path | None) -> Any:
    plan = stack.plan
    run = uuid.uuid4().hex[:8]
    out: dict[str, Any] = {}
    with trio.fail_after(TOTAL_BUDGET_S):
        await start_stack_bff(stack)
        await start_worker(stack, plan.worker_concurrency)
        profilers = Profilers(stack.kids, profile_dir)
        out["bff_rss_at_start_mb"] = rss_mb(stack.bff_pid)
        async with open_sessions(client, stack.bff_port, 8) as new_session:
            profilers.start("bff-idle", stack.bff_pid)
            with trio.fail_after(60):
                out["post"] = await phase_post(stack, new_session(), run)
            p = out["post"]["post_ms"]
            print(f"  1. POST -> 202: p50 {p['p50']} ms, p99 {p['p99']} ms", flush=True)
            with trio.fail_after(90):
                out["e2e"] = await phase_e2e_idle(stack, new_session, run)
            await profilers.finish()
            e = out["e2e"]["sequential"]["e2e_ms"]
            print(f"  2. end to end: p50 {e['p50']} ms, p99 {e['p99']} ms", flush=True)
        out["load"] = await phase_load(stack, run, client, profilers)
        print(f"  3. e2e_rps {out['load']['e2e_rps']:,.0f} ({plan.load_clients} clients)")
        out["hello"] = await phase_hello(stack, tmp, client)
        print(f"     hello_rps {out['hello']['hello_rps']:,.0f}", flush=True)
        out["sse"] = await phase_streams(stack, run, client, profilers)
        d = out["sse"]["drain"]
        print(
            f"  4. {out['sse']['open']['queued']} streams, BFF RSS "
            f"{out['sse']['waiting']['bff_rss_mb'].get('VmRSS')} MB, sse_deliver_s "
            f"{d['sse_deliver_s']}",
            flush=True,
        )
        await stop_worker(stack)
    return out


class Profilers:
    """``py-spy record`` (raw folded stacks, non-blocking sampling) of chosen processes.

    Off unless ``--py-spy DIR``; sampling costs the target some CPU, so a profiled
    run's figures are not the ones to keep.
    """

    def __init__(self, kids: Children, directory: Path | None) -> None:
        self.kids = kids
        self.directory = directory
        self.running: list[Child] = []

    def start(self, name: str, pid: int, seconds: float = 60.0) -> None:
        if self.directory is None or not pid:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        out = self.directory / f"{name}.folded"
        argv = [py_spy, "record", "--nonblocking", "--format", "raw", "-o", str(out)]
        argv += ["-d", str(int(seconds)), "-p", str(pid)]
        self.running.append(self.kids.start(f"py-spy-{name}", argv, dict(os.environ)))

    async def finish(self) -> None:
        """Stop every running recorder (SIGINT: py-spy writes what it has)."""
        running, self.running = self.running, []
        for child in running:
            if child.alive():
                child.proc.send_signal(signal.SIGINT)
        for child in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                await trio.to_thread.run_sync(child.proc.wait, 20.0)
            await trio.to_thread.run_sync(child.stop, 5.0)


TARGETS = {
    "post_p50_ms": 3.0,
    "e2e_p50_ms": 10.0,
    "e2e_p99_ms": 30.0,
    "sse_rss_mb": 400.0,
    "sse_deliver_s": 5.0,
}


def report(
    stack: Stack,
    settings: dict[str, str],
    machine: dict[str, Any],
    migrate_out: str,
    nofile: int,
    client: str,
    raw: dict[str, Any],
) -> dict[str, Any]:
    plan = stack.plan
    sse, seq = raw["sse"], raw["e2e"]["sequential"]
    return {
        "post_p50_ms": raw["post"]["post_ms"]["p50"],
        "post_p99_ms": raw["post"]["post_ms"]["p99"],
        "e2e_p50_ms": seq["e2e_ms"]["p50"],
        "e2e_p99_ms": seq["e2e_ms"]["p99"],
        "e2e_rps": raw["load"]["e2e_rps"],
        "hello_rps": raw["hello"]["hello_rps"],
        "sse_streams": sse["open"]["queued"],
        "sse_rss_mb": sse["waiting"]["bff_rss_mb"].get("VmRSS"),
        "sse_deliver_s": sse["drain"]["sse_deliver_s"],
        "targets": TARGETS,
        "host_others_cpu_pct": {
            "post": raw["post"]["cpu"]["others_pct"],
            "e2e": seq["cpu"]["others_pct"],
            "load": raw["load"]["cpu"]["others_pct"],
            "hello": raw["hello"]["cpu"]["others_pct"],
            "sse_open": sse["open"]["cpu"]["others_pct"],
            "sse_drain": sse["drain"]["cpu"]["others_pct"],
            "note": "CPU (percent of one core, of 200) used by processes not of this run "
            "during each measured window: above ~20 the figures are skewed by a busy host",
        },
        "date": now_iso(),
        "machine": machine,
        "config": {
            "server": stack.server.kind,
            "server_settings": settings,
            "embedded_settings_passed": stack.server.extra_settings,
            "migrate": migrate_out,
            "bff": "python -m hypercorn -k trio -b 127.0.0.1:<port> dataplane.app:app "
            "(Hypercorn defaults: 1 spawned worker process; RSS/CPU are that process's)",
            "bff_env": {
                "DATAPLANE_PROBE": "1",
                "DATAPLANE_SSE_DEADLINE_SECONDS": plan.sse_deadline_s,
                "DATAPLANE_JWT_SECRET": f"<{len(JWT_SECRET)} bytes>",
            },
            "worker": f"python -m dataplane worker, SURFACE_QUEUE_TYPE={QUEUE_TYPE}, "
            "DATAPLANE_PROBE=1",
            "worker_runs": stack.worker_runs,
            "client": f"{client} (in the bench process, trio {trio.__version__}; raw = one "
            "keep-alive HTTP/1.1 connection per client task on a raw trio socket, httpx "
            f"{httpx.__version__} = one shared AsyncClient); phase 4 streams: raw sockets",
            "cpu_pct": "percent of one core over the measured window, from /proc/<pid>/stat "
            "(bench = this process, bff = Hypercorn's serving process, postgres = postmaster "
            "and its children; others = host busy time from /proc/stat minus all of these: "
            "other users' processes, a noisy-run flag)",
            "open_files_limit": nofile,
            "plan": dict(plan.__dict__),
            "phases": {
                "post": "sequential probe.echo POSTs with distinct values on one keep-alive "
                f"connection, worker running (concurrency {plan.worker_concurrency})",
                "e2e": f"sequential POST + stream, then {plan.e2e_parallel_loops} such loops "
                f"in parallel; worker concurrency {plan.worker_concurrency}",
                "load": f"{plan.load_clients} closed-loop clients for {plan.load_seconds}s after "
                f"a 1 s warm-up; then {plan.reference_seconds}s with the other client",
                "hello": f"same clients: {plan.load_clients} for {plan.hello_seconds}s, then "
                f"{plan.reference_seconds}s with the other client",
                "sse": f"{plan.streams} streams, worker concurrency "
                f"{plan.drain_worker_concurrency} for the drain",
            },
        },
        "bff_rss_at_start_mb": raw["bff_rss_at_start_mb"],
        "post": raw["post"],
        "e2e": raw["e2e"],
        "load": raw["load"],
        "hello": raw["hello"],
        "sse": sse,
    }


def print_tables(result: dict[str, Any]) -> None:
    t = result["targets"]
    e2e, load, hello, sse = result["e2e"], result["load"], result["hello"], result["sse"]
    seq, par = e2e["sequential"], e2e["parallel"]
    b, pb = seq["breakdown_ms"], par["breakdown_ms"]

    def pq(summary: Mapping[str, Any]) -> str:
        return f"{summary.get('p50')} / {summary.get('p99')}"

    def cpu(c: Mapping[str, Any]) -> str:
        return " ".join(f"{k[:-4]} {v:.0f}" for k, v in c.items() if k.endswith("_pct"))

    def cut(key: str) -> str:
        return f"{b[key].get('p50')} / {pb[key].get('p50')}"

    lo, ho = load["other_client"], hello["other_client"]
    rows = [
        ["1. POST->202 p50 / p99, ms", pq(result["post"]["post_ms"]), f"p50 <= {t['post_p50_ms']}"],
        ["2. e2e p50 / p99, ms (sequential)", pq(seq["e2e_ms"]), "<= 10 / <= 30"],
        [f"   {par['loops']} loops in parallel p50 / p99", pq(par["e2e_ms"]), ""],
        ["   p50 cuts, ms: sequential / parallel", "", ""],
        ["   POST start -> 202", cut("post_start_to_202"), ""],
        ["   POST start -> created_at", cut("post_start_to_created_at"), ""],
        ["   created_at -> claimed_at", cut("created_at_to_claimed_at"), ""],
        ["   claimed_at -> completed_at", cut("claimed_at_to_completed_at"), ""],
        ["   completed_at -> done received", cut("completed_at_to_done_received"), ""],
        ["   202 -> done received", cut("202_to_done_received"), ""],
        [
            "   stream saw job pending / finished (n)",
            f"{seq['stream_found_job_pending']['count']} / "
            f"{seq['stream_found_job_finished']['count']}",
            "",
        ],
        [
            "   e2e p50 when pending / finished",
            f"{seq['stream_found_job_pending']['e2e_ms'].get('p50')} / "
            f"{seq['stream_found_job_finished']['e2e_ms'].get('p50')}",
            "",
        ],
        ["   CPU % (sequential)", cpu(seq["cpu"]), ""],
        [
            "   BFF CPU ms per POST / e2e / hello req",
            f"{result['post']['cpu_ms_per_post'].get('bff')} / "
            f"{seq['cpu_ms_per_e2e'].get('bff')} / {hello['cpu_ms_per_request'].get('hello')}",
            "",
        ],
        [f"3. e2e_rps ({load['clients']} clients, {load['client']})", load["e2e_rps"], ""],
        ["   e2e p50 / p99 under load, ms", pq(load["e2e_ms"]), ""],
        ["   CPU % under load", cpu(load["cpu"]), ""],
        [f"   e2e_rps with {lo['client']} client", lo["e2e_rps"], ""],
        [f"   CPU % with {lo['client']} client", cpu(lo["cpu"]), ""],
        [f"   hello_rps ({hello['client']})", hello["hello_rps"], ""],
        ["   CPU % hello", cpu(hello["cpu"]), ""],
        [f"   hello_rps with {ho['client']} client", ho["hello_rps"], ""],
        [f"   CPU % hello, {ho['client']}", cpu(ho["cpu"]), ""],
        ["4. streams queued / failed", f"{sse['open']['queued']} / {sse['open']['failed']}", ""],
        ["   open rate, streams/s", sse["open"]["streams_per_s"], ""],
        ["   BFF RSS with all waiting, MB", result["sse_rss_mb"], f"<= {t['sse_rss_mb']:.0f}"],
        ["   BFF RSS before, MB", sse["waiting"]["bff_rss_before_posts_mb"].get("VmRSS"), ""],
        ["   CPU % with all waiting", cpu(sse["waiting"]["cpu_idle_waiting"]), ""],
        ["   sse_deliver_s", result["sse_deliver_s"], f"<= {t['sse_deliver_s']}"],
        ["   first -> last completed_at, s", sse["drain"]["first_to_last_completed_at_s"], ""],
        [
            "   completed -> done per stream p50 / p99",
            pq(sse["drain"]["per_stream_completed_to_done_ms"]),
            "",
        ],
        [
            "   done received / errors",
            f"{sse['drain']['done_received']} / {sse['drain']['errors']}",
            "",
        ],
        ["   CPU % during drain", cpu(sse["drain"]["cpu"]), ""],
        [
            "   BFF CPU ms per stream: open / deliver",
            f"{sse['open']['cpu_ms_per_stream'].get('bff')} / "
            f"{sse['drain']['cpu_ms_per_stream'].get('bff')}",
            "",
        ],
    ]
    print()
    print(format_table(["metric", "value", "target"], rows))
    noise = {k: v for k, v in result["host_others_cpu_pct"].items() if k != "note"}
    print(f"\nCPU of other processes on the host during each phase, %: {noise}")


def run(plan: Plan, client: str, profile_dir: Path | None) -> dict[str, Any]:
    """Bring up the scratch server and the stack, run every phase, tear it all down."""
    nofile = raise_own_nofile()
    tmp = Path(tempfile.mkdtemp(prefix="dataplane-e2e-"))
    try:
        with scratch_server("dataplane_e2e") as server, children_scope() as kids:
            print(f"server: {server.kind}; logs in {kids.log_dir}; running phases...", flush=True)
            settings, machine = server_facts(server, fdatasync=True)
            # Phase 4 holds all its jobs live at once, from one client: above the default
            # per-client backpressure share (it would answer 429), so the limit is raised.
            env = stack_env(
                server.dsn,
                sse_deadline_s=plan.sse_deadline_s,
                DATAPLANE_MAX_LIVE_PER_CLIENT=str(2 * plan.streams),
            )
            migrate_out = migrate_schema(env)
            stack = Stack(server, kids, plan, env, pg_pid=postmaster_pid(server))
            raw = trio.run(until_signalled, bench, stack, tmp, client, profile_dir)
            return report(stack, settings, machine, migrate_out, nofile, client, raw)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    output_arg(parser, "e2e")
    parser.add_argument(
        "--py-spy", type=Path, default=None, metavar="DIR", help="py-spy the BFF in phase 3"
    )
    parser.add_argument(
        "--client",
        choices=("raw", "httpx"),
        default="raw",
        help="load generator for phases 1-3 (the other one gets a short reference run)",
    )
    args = parser.parse_args(argv)
    plan = Plan.quick() if args.quick else Plan()
    result = run_and_save(
        lambda: run(plan, args.client, args.py_spy),
        args.output,
        print_tables,
        "interrupted; every process started was stopped",
    )
    return 130 if result is None else 0


if __name__ == "__main__":
    sys.exit(main())
