"""One round trip: ``POST /q`` with ``Prefer: wait`` -> answer, beside POST -> SSE done.

Run from the repository root::

    python bench/prefer_wait.py            # own embedded Postgres (temp dir), durable defaults
    python bench/prefer_wait.py --quick    # smoke run, small counts
    python bench/prefer_wait.py --py-spy prof/   # also py-spy the BFF and the worker
    MAESTRO_QUEUES_URL=... python bench/prefer_wait.py

One stack, as ``bench/e2e.py`` brings it up: ONE BFF (``python -m hypercorn -k trio``)
and ONE ``dataplane worker`` on ``surface-probe`` at its default concurrency. The load
generator (this process) uses the raw keep-alive HTTP/1.1 client of ``bench/_client.py``.

Phases (``probe.echo``, distinct values, so nothing coalesces):

1. Idle, sequential, the two ways interleaved request by request (each on its own
   keep-alive connection), so host noise falls on both alike:
   ``prefer``: POST with ``Prefer: wait=1`` (what ``dataClient.js`` sends) -> the 200's
   body is the answer; latency = POST start -> response read. A 202 (the answer took
   longer than the wait) is followed over the stream, as the client does, and counted.
   ``sse``: POST (no Prefer) -> 202, GET the ``streamUrl`` -> ``event: done``.
2. Under load: 32 closed-loop clients, first the ``prefer`` way, then the ``sse`` way, for
   the same time each; latency, rate, BFF CPU per answer, and nothing unanswered.

Prints a table and writes ``bench/results/prefer_wait.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

import trio

from bench.e2e import Profilers, job_times, wall
from bench.harness.client import (
    Headers,
    Session,
    auth_headers,
    closed_loop,
    e2e_once,
    open_sessions,
)
from bench.harness.common import (
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
    Children,
    CpuMeter,
    children_scope,
    cpu_ms_per_op,
    postgres_pids,
    postmaster_pid,
)
from bench.harness.stack import QUEUE_TYPE, migrate_schema, stack_env, start_bff, wait_serving

PREFER_WAIT_S = 1  # what dataClient.js sends (PREFER_WAIT_SECONDS)
TOTAL_BUDGET_S = 300.0
TARGETS = {"prefer_p50_ms": 4.0, "prefer_p99_ms": 12.0, "load_prefer_p99_ms": 80.0}


@dataclass(frozen=True)
class Plan:
    warmup: int = 30
    requests: int = 1000  # per way, interleaved
    load_clients: int = 32
    load_seconds: float = 15.0

    @classmethod
    def quick(cls) -> Plan:
        return cls(warmup=10, requests=200, load_seconds=4.0)


@dataclass
class Answer:
    latency: float
    via: str  # "post" (200 to the POST) or "stream" (202, then the stream)
    error: str | None = None
    job_id: str = ""
    t0: float = 0.0  # perf_counter at the POST's start


async def prefer_once(session: Session, headers: Headers, value: str) -> Answer:
    """POST with ``Prefer: wait``; the 200 is the answer, a 202 is followed over the stream."""
    body = json.dumps({"operation": "echo", "params": {"value": value}}).encode()
    t0 = time.perf_counter()
    status, raw = await session.request(
        "POST", "/api/probe/q", body, {**(headers or {}), "Prefer": f"wait={PREFER_WAIT_S}"}
    )
    if status == 200:
        answer = json.loads(raw)
        ok = answer.get("status") == "done" and answer.get("result", {}).get("echo") == value
        error = None if ok else f"unexpected answer: {raw[:200]!r}"
        return Answer(time.perf_counter() - t0, "post", error, answer.get("jobId", ""), t0)
    if status != 202:
        return Answer(time.perf_counter() - t0, "post", f"POST answered {status}: {raw[:200]!r}")
    queued = json.loads(raw)
    stream_status, events = await session.events(queued["streamUrl"])
    final = next(((e, d) for e, d, _ in events if e in ("done", "error")), None)
    error = None
    if stream_status != 200 or final is None or final[0] != "done":
        error = f"stream {stream_status}: {final}"
    return Answer(time.perf_counter() - t0, "stream", error, queued["jobId"], t0)


async def sse_once(session: Session, headers: Headers, value: str) -> Answer:
    s = await e2e_once(session, headers, value)
    return Answer(s.latency, "stream", s.error, s.job_id, s.t0)


async def breakdown(dsn: str, answers: list[Answer]) -> dict[str, Any]:
    """Each answer cut at its job row's timestamps (Postgres now(), same host clock)."""
    ok = [a for a in answers if not a.error and a.job_id]
    times = await job_times(dsn, [a.job_id for a in ok])
    cuts: dict[str, list[float]] = {
        "post_start_to_created_at": [],
        "created_at_to_claimed_at": [],
        "claimed_at_to_completed_at": [],
        "completed_at_to_answer_received": [],
    }
    for a in ok:
        created, claimed, completed = times.get(a.job_id, (None, None, None))
        if created is None or claimed is None or completed is None:
            continue
        cuts["post_start_to_created_at"].append(created - wall(a.t0))
        cuts["created_at_to_claimed_at"].append(claimed - created)
        cuts["claimed_at_to_completed_at"].append(completed - claimed)
        cuts["completed_at_to_answer_received"].append(wall(a.t0 + a.latency) - completed)
    return {k: summary_ms(v) for k, v in cuts.items()}


WAYS = {"prefer": prefer_once, "sse": sse_once}


def _report(answers: list[Answer]) -> dict[str, Any]:
    ok = [a for a in answers if not a.error]
    return {
        "requests": len(answers),
        "error_count": len(answers) - len(ok),
        "errors": [a.error for a in answers if a.error][:5],
        "answered_in_the_post": sum(a.via == "post" for a in ok),
        "via_stream": sum(a.via == "stream" for a in ok),
        "ms": summary_ms([a.latency for a in ok]),
    }


async def phase_idle(plan: Plan, port: int, meter: CpuMeter, run: str, dsn: str) -> dict[str, Any]:
    headers = auth_headers()
    out: dict[str, Any] = {}
    async with open_sessions("raw", port, 4) as new_session:
        sessions = {way: new_session() for way in WAYS}
        for i in range(plan.warmup):
            for way, once in WAYS.items():
                await once(sessions[way], headers, f"{run}-w-{way}-{i}")
        answers: dict[str, list[Answer]] = {way: [] for way in WAYS}
        cpu0 = meter.snapshot()
        for i in range(plan.requests):
            for way, once in WAYS.items():
                answers[way].append(await once(sessions[way], headers, f"{run}-{way}-{i}"))
        cpu = meter.since(cpu0)
    for way in WAYS:
        out[way] = {**_report(answers[way]), "breakdown_ms": await breakdown(dsn, answers[way])}
    out["cpu"] = cpu
    out["cpu_ms_per_answer_both_ways"] = cpu_ms_per_op(cpu, 2 * plan.requests)
    return out


async def phase_load(plan: Plan, port: int, meter: CpuMeter, run: str, way: str) -> dict[str, Any]:
    headers = auth_headers()
    once = WAYS[way]
    via: list[str] = []

    async def one(session: Session, k: int, i: int) -> str | None:
        answer = await once(session, headers, f"{run}-l{way}-{k}-{i}")
        via.append(answer.via)
        return answer.error

    async with open_sessions("raw", port, plan.load_clients * 2) as new_session:
        await closed_loop(1.0, plan.load_clients, new_session, one)  # warm the connections
        via.clear()
        cpu0 = meter.snapshot()
        lat, errors, elapsed = await closed_loop(
            plan.load_seconds, plan.load_clients, new_session, one
        )
        cpu = meter.since(cpu0)
    return {
        "way": way,
        "clients": plan.load_clients,
        "seconds": round(elapsed, 3),
        "completed": len(lat),
        "error_count": len(errors),
        "errors": errors[:5],
        "answered_in_the_post": via.count("post") if way == "prefer" else 0,
        "via_stream": via.count("stream"),
        "rps": round(len(lat) / elapsed, 1),
        "ms": summary_ms(lat),
        "cpu": cpu,
        "cpu_ms_per_answer": cpu_ms_per_op(cpu, len(lat)),
    }


async def bench(
    plan: Plan,
    kids: Children,
    env: dict[str, str],
    pg_pid: int | None,
    dsn: str,
    profile_dir: Path | None = None,
) -> Any:
    run = uuid.uuid4().hex[:8]
    out: dict[str, Any] = {}
    with trio.fail_after(TOTAL_BUDGET_S):
        bff = await start_bff(kids, "bff", env)
        worker = kids.start("worker", WORKER_ARGV, {**env, "SURFACE_QUEUE_TYPE": QUEUE_TYPE})
        await wait_serving([worker])
        meter = CpuMeter(
            {
                "bff": lambda: [bff.serving],
                "worker": lambda: [worker.pid],
                "postgres": lambda: postgres_pids(pg_pid),
            }
        )
        profilers = Profilers(kids, profile_dir)
        profilers.start("bff-idle", bff.serving)
        profilers.start("worker-idle", worker.pid)
        out["idle"] = await phase_idle(plan, bff.port, meter, run, dsn)
        await profilers.finish()
        p, s = out["idle"]["prefer"]["ms"], out["idle"]["sse"]["ms"]
        print(f"  1. idle: Prefer p50 {p.get('p50')} / p99 {p.get('p99')} ms; ", end="")
        print(f"SSE p50 {s.get('p50')} / p99 {s.get('p99')} ms", flush=True)
        out["load"] = {}
        for way in WAYS:
            profilers.start(f"bff-load-{way}", bff.serving)
            profilers.start(f"worker-load-{way}", worker.pid)
            out["load"][way] = await phase_load(plan, bff.port, meter, run, way)
            await profilers.finish()
            ms = out["load"][way]["ms"]
            print(f"  2. load, {way}: {out['load'][way]['rps']} req/s, p99 {ms.get('p99')} ms")
        await trio.to_thread.run_sync(worker.stop, 20.0)
    return out


def run(plan: Plan, profile_dir: Path | None = None) -> dict[str, Any]:
    with scratch_server("dataplane_prefer") as server, children_scope() as kids:
        print(f"server: {server.kind}; logs in {kids.log_dir}; running phases...", flush=True)
        settings, machine = server_facts(server)
        env = stack_env(server.dsn)
        migrate_schema(env)
        raw = trio.run(
            until_signalled, bench, plan, kids, env, postmaster_pid(server), server.dsn, profile_dir
        )
    idle, load = raw["idle"], raw["load"]
    return {
        "prefer_p50_ms": idle["prefer"]["ms"].get("p50"),
        "prefer_p99_ms": idle["prefer"]["ms"].get("p99"),
        "sse_p50_ms": idle["sse"]["ms"].get("p50"),
        "sse_p99_ms": idle["sse"]["ms"].get("p99"),
        "load_prefer_p99_ms": load["prefer"]["ms"].get("p99"),
        "load_prefer_rps": load["prefer"]["rps"],
        "load_prefer_unanswered": load["prefer"]["error_count"],
        "load_sse_p99_ms": load["sse"]["ms"].get("p99"),
        "load_sse_rps": load["sse"]["rps"],
        "targets": TARGETS,
        "host_others_cpu_pct": {
            "idle": idle["cpu"]["others_pct"],
            "load_prefer": load["prefer"]["cpu"]["others_pct"],
            "load_sse": load["sse"]["cpu"]["others_pct"],
        },
        "date": now_iso(),
        "machine": machine,
        "config": {
            "server": server.kind,
            "server_settings": settings,
            "bff": "python -m hypercorn -k trio --keep-alive 75 dataplane.app:app (defaults:"
            " DATAPLANE_MAX_PREFER_WAIT_SECONDS=5)",
            "worker": f"python -m dataplane worker, SURFACE_QUEUE_TYPE={QUEUE_TYPE}, defaults",
            "client": "raw keep-alive HTTP/1.1 on trio sockets, in the bench process",
            "prefer": f"Prefer: wait={PREFER_WAIT_S}",
            "plan": dict(plan.__dict__),
        },
        "idle": idle,
        "load": load,
    }


def print_tables(result: dict[str, Any]) -> None:
    t = result["targets"]
    idle, load = result["idle"], result["load"]

    def pq(summary: dict[str, Any]) -> str:
        return f"{summary.get('p50')} / {summary.get('p99')}"

    rows = [
        [
            "POST (Prefer: wait) -> answer, p50 / p99 ms",
            pq(idle["prefer"]["ms"]),
            f"<= {t['prefer_p50_ms']} / <= {t['prefer_p99_ms']}",
        ],
        ["   answered in the POST / via stream", _via(idle["prefer"]), ""],
        ["POST -> SSE done, same run, p50 / p99 ms", pq(idle["sse"]["ms"]), ""],
        ["   errors prefer / sse", _errors(idle), ""],
        ["   p50 cuts, ms: Prefer / SSE", "", ""],
        *(
            [f"   {cut.replace('_', ' ')}", _cut(idle, cut), ""]
            for cut in idle["prefer"]["breakdown_ms"]
        ),
        [
            f"{load['prefer']['clients']} clients, Prefer: p50 / p99 ms",
            pq(load["prefer"]["ms"]),
            f"p99 <= {t['load_prefer_p99_ms']}",
        ],
        ["   req/s; unanswered", f"{load['prefer']['rps']}; {load['prefer']['error_count']}", "0"],
        ["   answered in the POST / via stream", _via(load["prefer"]), ""],
        ["   BFF CPU ms per answer", load["prefer"]["cpu_ms_per_answer"].get("bff"), ""],
        [f"{load['sse']['clients']} clients, SSE: p50 / p99 ms", pq(load["sse"]["ms"]), ""],
        ["   req/s; unanswered", f"{load['sse']['rps']}; {load['sse']['error_count']}", ""],
        ["   BFF CPU ms per answer", load["sse"]["cpu_ms_per_answer"].get("bff"), ""],
    ]
    print()
    print(format_table(["metric", "value", "target"], rows))
    print(f"\nCPU of other processes on the host, %: {result['host_others_cpu_pct']}")


def _cut(idle: dict[str, Any], cut: str) -> str:
    return (
        f"{idle['prefer']['breakdown_ms'][cut].get('p50')} / "
        f"{idle['sse']['breakdown_ms'][cut].get('p50')}"
    )


def _via(r: dict[str, Any]) -> str:
    return f"{r['answered_in_the_post']} / {r['via_stream']}"


def _errors(idle: dict[str, Any]) -> str:
    return f"{idle['prefer']['error_count']} / {idle['sse']['error_count']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    parser.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        metavar="DIR",
        help="py-spy the BFF and the worker in every phase (raw folded stacks in DIR)",
    )
    output_arg(parser, "prefer_wait")
    args = parser.parse_args(argv)
    plan = Plan.quick() if args.quick else Plan()
    result = run_and_save(
        lambda: run(plan, args.py_spy),
        args.output,
        print_tables,
        "interrupted; every process started was stopped",
    )
    return 130 if result is None else 0


if __name__ == "__main__":
    sys.exit(main())
