"""Tracing overhead: the end-to-end path with and without an OTLP exporter.

Run from the repository root::

    python bench/tracing.py            # own embedded Postgres (temp dir), durable defaults
    MAESTRO_QUEUES_URL=... python bench/tracing.py   # scratch db dataplane_tracing_<pid> there
    python bench/tracing.py --quick    # smoke run (~30 s)

On ONE Postgres server, rounds alternate between two variants (a b, b a, a b, b a):

* **a** -- no ``OTEL_*`` variable at all: the BFF and the worker run with the
  OpenTelemetry API's no-op providers (the default deployment without a collector);
* **b** -- ``OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:<port>`` for the BFF and
  the worker (http/protobuf, every other OTLP/BSP setting at the SDK's default),
  pointing at a real OTLP/HTTP receiver this bench runs in a separate process
  (Quart-Trio on Hypercorn, ``python bench/tracing.py --otlp-receiver PORT``): it
  decodes every ``ExportTraceServiceRequest`` / ``ExportMetricsServiceRequest`` and
  counts spans per service and per name. Setting the endpoint also turns on OTLP
  metrics (``telemetry/otel.py``), so b is "telemetry on", traces and metrics.

Each round starts a fresh BFF (``python -m hypercorn -k trio ... dataplane.app:app``)
and ``dataplane worker`` (``surface-probe``, ``DATAPLANE_PROBE=1``) with the round's
environment on an emptied queue table, then measures, like ``bench/e2e.py``:

1. idle: sequential ``probe.echo`` POST -> GET ``streamUrl`` -> ``event: done`` on one
   keep-alive connection (raw Trio socket client), after a warm-up;
2. load: 32 closed-loop clients running the same loop -> e2e requests per second.

It then stops the BFF and the worker (their shutdown flushes the span queue) and
reads how many spans the receiver got in the round. Figures of each variant are
pooled over its rounds (throughput, CPU, spans per request).

The headline, the idle p50 overhead (target: at most 10 %), is the rounds'. A last,
interleaved phase measures it a second way: a BFF and worker of each variant up at
once (each on a database of its own on the same server), sequential requests
alternating a, b, b, a, ..., in parts with fresh processes and the databases
swapped. A shared host's speed drifts by more than the overhead between rounds
minutes apart; side by side, a and b see the same host at the same moments. But b's
exporter threads then also run during a's requests, which favours b: the truth lies
between the two figures.

The receiver shares the host's two cores with the stack, so its CPU is part of b's
cost here (a collector would usually run elsewhere); it is reported per round.

Prints a table and writes ``bench/results/tracing.json``. Every process started here
is stopped on exit, also on error, Ctrl-C and SIGTERM; the whole run is bounded
(about five minutes, under six).
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as ``python bench/tracing.py``: the repository root first on sys.path (``bench``,
# and this checkout's ``dataplane``).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import contextlib
import json
import os
import statistics
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import httpx
import trio

from bench.harness.client import E2eSample, auth_headers, closed_loop, e2e_once, open_sessions
from bench.harness.common import (
    Server,
    format_table,
    now_iso,
    output_arg,
    run_and_save,
    scratch_database,
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
    postgres_pids,
    postmaster_pid,
    raise_own_nofile,
)
from bench.harness.stack import (
    HOST,
    QUEUE_TYPE,
    Hypercorn,
    empty_queue,
    log_problems,
    migrate_schema,
    stack_env,
    start_bff,
    stop_children,
    wait_http,
    wait_serving,
)
from dataplane.dev.embedded import free_port

SCRIPT = Path(__file__).resolve()  # run again as the OTLP receiver (--otlp-receiver)
TOTAL_BUDGET_S = 330.0  # the whole trio part; server start/stop comes on top
TARGET_P50_OVERHEAD_PCT = 10.0
CLIENT = "raw"
NOISY_PCT = 20.0  # CPU of processes not of this run above which a round is skewed


@dataclass(frozen=True)
class Plan:
    pairs: int = 4  # rounds a, b repeated this many times
    warmup_round: bool = True  # one short, discarded round first (cold caches, .pyc)
    idle_warmup: int = 30
    idle_requests: int = 300  # per round: each variant gets pairs * this
    load_clients: int = 32
    load_warmup_s: float = 1.0
    load_seconds: float = 10.0  # per round: each variant gets pairs * this
    flush_wait_s: float = 10.0  # b: wait at most this for the receiver to settle
    interleaved_warmup: int = 30  # per stack
    interleaved_requests: int = 800  # per stack: a and b alternate request by request
    interleaved_parts: int = 4  # fresh processes per part, the databases swapped

    @classmethod
    def quick(cls) -> Plan:
        return cls(
            pairs=2,
            warmup_round=False,
            idle_warmup=5,
            idle_requests=60,
            load_warmup_s=0.5,
            load_seconds=2.0,
            flush_wait_s=5.0,
            interleaved_warmup=5,
            interleaved_requests=80,
            interleaved_parts=2,
        )


# -- the OTLP/HTTP receiver (its own process) -----------------------------------


def receiver_main(port: int) -> None:
    """``--otlp-receiver PORT``: decode OTLP/HTTP protobuf exports, count them, serve /stats."""
    import gzip
    from collections import Counter

    from hypercorn.config import Config
    from hypercorn.trio import serve
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from quart import request
    from quart_trio import QuartTrio

    app = QuartTrio("otlp-receiver")
    app.config["MAX_CONTENT_LENGTH"] = 64 * 1024 * 1024
    stats: dict[str, Any] = {
        "trace_requests": 0,
        "metric_requests": 0,
        "bytes": 0,
        "spans": 0,
        "metric_points": 0,
        "decode_errors": 0,
    }
    by_service: Counter[str] = Counter()
    by_name: Counter[str] = Counter()

    async def body() -> bytes:
        data = await request.get_data()
        assert isinstance(data, bytes)
        stats["bytes"] += len(data)
        if request.headers.get("Content-Encoding", "").lower() == "gzip":
            data = gzip.decompress(data)
        return data

    @app.post("/v1/traces")
    async def traces() -> tuple[bytes, int, dict[str, str]]:
        stats["trace_requests"] += 1
        msg = ExportTraceServiceRequest()
        try:
            msg.ParseFromString(await body())
        except Exception:
            stats["decode_errors"] += 1
            return b"", 400, {}
        for rs in msg.resource_spans:
            service = next(
                (a.value.string_value for a in rs.resource.attributes if a.key == "service.name"),
                "?",
            )
            for ss in rs.scope_spans:
                for span in ss.spans:
                    stats["spans"] += 1
                    by_service[service] += 1
                    by_name[span.name] += 1
        # An empty ExportTraceServiceResponse (full success).
        return b"", 200, {"Content-Type": "application/x-protobuf"}

    @app.post("/v1/metrics")
    async def metrics() -> tuple[bytes, int, dict[str, str]]:
        stats["metric_requests"] += 1
        msg = ExportMetricsServiceRequest()
        try:
            msg.ParseFromString(await body())
        except Exception:
            stats["decode_errors"] += 1
            return b"", 400, {}
        for rm in msg.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kind = m.WhichOneof("data")
                    if kind is not None:
                        stats["metric_points"] += len(getattr(m, kind).data_points)
        return b"", 200, {"Content-Type": "application/x-protobuf"}

    @app.get("/stats")
    async def get_stats() -> dict[str, Any]:
        return {**stats, "by_service": dict(by_service), "by_name": dict(by_name)}

    config = Config()
    config.bind = [f"{HOST}:{port}"]
    config.accesslog = None
    trio.run(serve, app, config)


async def receiver_stats(port: int) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=10) as client:
        resp = await client.get(f"http://{HOST}:{port}/stats")
        resp.raise_for_status()
        return dict(resp.json())


def stats_delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in after.items():
        if isinstance(value, dict):
            prev = before.get(key, {})
            diff = {k: v - prev.get(k, 0) for k, v in value.items()}
            out[key] = {k: v for k, v in sorted(diff.items()) if v}
        else:
            out[key] = value - before.get(key, 0)
    return out


# -- one round --------------------------------------------------------------------


@dataclass
class Ctx:
    server: Server
    kids: Children
    plan: Plan
    env_a: dict[str, str]
    env_b: dict[str, str]
    receiver_port: int
    receiver_pids: list[int]
    pg_pid: int | None
    env_b_own_db: dict[str, str]  # b on a database of its own (the interleaved phase)

    def postgres_pids(self) -> list[int]:
        return postgres_pids(self.pg_pid)


async def start_worker(kids: Children, env: Mapping[str, str], name: str) -> Child:
    child = kids.start(name, WORKER_ARGV, {**env, "SURFACE_QUEUE_TYPE": QUEUE_TYPE})
    await wait_serving([child])
    return child


async def measure_idle(plan: Plan, bff: Hypercorn, meter: CpuMeter, tag: str) -> dict[str, Any]:
    headers = auth_headers()
    samples: list[E2eSample] = []
    async with open_sessions(CLIENT, bff.port, 2) as new_session:
        session = new_session()
        with trio.fail_after(30 + plan.idle_requests * 0.2):
            for i in range(plan.idle_warmup):
                await e2e_once(session, headers, f"{tag}-w{i}")
            cpu0 = meter.snapshot()
            for i in range(plan.idle_requests):
                samples.append(await e2e_once(session, headers, f"{tag}-{i}"))
            cpu = meter.since(cpu0)
    ok = [s.latency for s in samples if not s.error]
    return {
        "requests": len(samples),
        "errors": [s.error for s in samples if s.error][:5],
        "error_count": len(samples) - len(ok),
        "latencies_s": ok,
        "e2e_ms": summary_ms(ok),
        "cpu": cpu,
        "cpu_ms_per_e2e": cpu_ms_per_op(cpu, len(ok)),
        "issued": plan.idle_warmup + len(samples),
    }


async def measure_load(plan: Plan, bff: Hypercorn, meter: CpuMeter, tag: str) -> dict[str, Any]:
    headers = auth_headers()
    cur = {"tag": f"{tag}-lw"}

    async def one(session: Any, k: int, i: int) -> str | None:
        return (await e2e_once(session, headers, f"{cur['tag']}-{k}-{i}")).error

    async with open_sessions(CLIENT, bff.port, plan.load_clients * 2) as new_session:
        wlat, werr, _ = await closed_loop(plan.load_warmup_s, plan.load_clients, new_session, one)
        cur["tag"] = f"{tag}-l"
        cpu0 = meter.snapshot()
        lat, errors, elapsed = await closed_loop(
            plan.load_seconds, plan.load_clients, new_session, one
        )
        cpu = meter.since(cpu0)
    return {
        "clients": plan.load_clients,
        "seconds": round(elapsed, 3),
        "completed": len(lat),
        "error_count": len(errors),
        "errors": errors[:5],
        "e2e_rps": round(len(lat) / elapsed, 1),
        "latencies_s": lat,
        "e2e_ms": summary_ms(lat),
        "cpu": cpu,
        "cpu_ms_per_e2e": cpu_ms_per_op(cpu, len(lat)),
        "issued": len(wlat) + len(werr) + len(lat) + len(errors),
    }


async def run_round(ctx: Ctx, plan: Plan, variant: str, name: str, run: str) -> dict[str, Any]:
    env = ctx.env_a if variant == "a" else ctx.env_b
    await empty_queue(ctx.server.dsn)
    before = await receiver_stats(ctx.receiver_port)
    t0 = time.perf_counter()
    bff = await start_bff(ctx.kids, f"bff-{name}", env)
    worker = await start_worker(ctx.kids, env, f"worker-{name}")
    started_s = time.perf_counter() - t0
    meter = CpuMeter(
        {
            "bff": lambda: [bff.serving],
            "worker": lambda: [worker.pid] if worker.alive() else [],
            "postgres": ctx.postgres_pids,
            "otlp_receiver": lambda: ctx.receiver_pids,
        }
    )
    tag = f"{run}-{name}"
    idle = await measure_idle(plan, bff, meter, tag + "i")
    load = await measure_load(plan, bff, meter, tag)
    exit_codes = await stop_children([worker, bff.child])
    # Their shutdown flushed the span queues; let the receiver finish what is in flight.
    after = await receiver_stats(ctx.receiver_port)
    deadline = time.perf_counter() + plan.flush_wait_s
    while time.perf_counter() < deadline:
        await trio.sleep(0.3)
        again = await receiver_stats(ctx.receiver_port)
        if again["spans"] == after["spans"] and again["trace_requests"] == after["trace_requests"]:
            break
        after = again
    received = stats_delta(before, after)
    issued = idle.pop("issued") + load.pop("issued")
    problems = {c.name: p for c in (bff.child, worker) if (p := log_problems(c))}
    return {
        "variant": variant,
        "round": name,
        "start_s": round(started_s, 3),
        "idle": idle,
        "load": load,
        "e2e_issued": issued,
        "received": received,
        "spans_per_e2e": round(received["spans"] / issued, 2) if issued else None,
        "exit_codes": exit_codes,
        "log_problems": problems,
    }


# -- both stacks at once, requests alternating ----------------------------------------


async def interleaved(ctx: Ctx, run: str) -> dict[str, Any]:
    """Idle latency of a and b measured side by side: both stacks up at once (each on
    a database of its own on the one server), sequential requests alternating a, b,
    b, a, ...; over ``interleaved_parts`` parts, each with fresh processes and the two
    databases swapped from one part to the next.

    A shared host's speed drifts (other tenants, CPU frequency) by more than the
    overhead measured here: rounds minutes apart can differ by 40 % with nothing
    changed. Alternating request by request gives a and b the same host at the same
    moments, so the drift cancels; only one request is in flight at any time. One
    pair of stacks has luck of its own, though (where its processes run, its
    database): one part once read b 4 % *faster* than a. Fresh processes per part
    and the swapped databases spread that luck over both variants.
    """
    plan = ctx.plan
    dsns = (ctx.server.dsn, ctx.env_b_own_db["MAESTRO_QUEUES_URL"])
    lat: dict[str, list[float]] = {"a": [], "b": []}
    errors: dict[str, list[str]] = {"a": [], "b": []}
    pairs: list[float] = []
    parts: list[dict[str, Any]] = []
    cpu_s: dict[str, float] = {"bff_a": 0.0, "worker_a": 0.0, "bff_b": 0.0, "worker_b": 0.0}
    exit_codes: dict[str, int | None] = {}
    per_part = max(1, plan.interleaved_requests // plan.interleaved_parts)
    headers = auth_headers()
    for part in range(plan.interleaved_parts):
        swap = part % 2 == 1
        env = {
            "a": {**ctx.env_a, "MAESTRO_QUEUES_URL": dsns[1 if swap else 0]},
            "b": {**ctx.env_b_own_db, "MAESTRO_QUEUES_URL": dsns[0 if swap else 1]},
        }
        for dsn in dsns:
            await empty_queue(dsn)
        bffs: dict[str, Hypercorn] = {}
        workers: dict[str, Child] = {}
        for v in ("b", "a") if swap else ("a", "b"):
            bffs[v] = await start_bff(ctx.kids, f"bff-i{v}{part}", env[v])
            workers[v] = await start_worker(ctx.kids, env[v], f"worker-i{v}{part}")
        ba, bb, wa, wb = bffs["a"], bffs["b"], workers["a"], workers["b"]
        meter = CpuMeter(
            {
                "bff_a": lambda ba=ba: [ba.serving],
                "worker_a": lambda wa=wa: [wa.pid] if wa.alive() else [],
                "bff_b": lambda bb=bb: [bb.serving],
                "worker_b": lambda wb=wb: [wb.pid] if wb.alive() else [],
            }
        )
        mine: dict[str, list[float]] = {"a": [], "b": []}
        async with (
            open_sessions(CLIENT, bffs["a"].port, 1) as new_a,
            open_sessions(CLIENT, bffs["b"].port, 1) as new_b,
        ):
            sessions = {"a": new_a(), "b": new_b()}
            with trio.fail_after(60 + per_part * 0.4):
                for i in range(plan.interleaved_warmup):
                    for v in ("a", "b"):
                        await e2e_once(sessions[v], headers, f"{run}-iw{v}{part}-{i}")
                cpu0 = meter.snapshot()
                for i in range(per_part):
                    got: dict[str, float] = {}
                    for v in ("a", "b") if i % 2 == 0 else ("b", "a"):
                        sample = await e2e_once(sessions[v], headers, f"{run}-i{v}{part}-{i}")
                        if sample.error:
                            errors[v].append(sample.error)
                        else:
                            mine[v].append(sample.latency)
                            got[v] = sample.latency
                    if len(got) == 2:
                        pairs.append(got["b"] - got["a"])
                cpu = meter.since(cpu0)
        for key in cpu_s:
            cpu_s[key] += cpu[f"{key}_pct"] / 100 * cpu["wall_s"]
        exit_codes.update(
            await stop_children([workers["a"], bffs["a"].child, workers["b"], bffs["b"].child])
        )
        pa, pb = summary_ms(mine["a"]), summary_ms(mine["b"])
        parts.append(
            {
                "a_on": "second database" if swap else "first database",
                "a_p50_ms": pa.get("p50"),
                "b_p50_ms": pb.get("p50"),
                "overhead_p50_pct": _pct(pb.get("p50") or 0.0, pa.get("p50") or 0.0),
                "others_cpu_pct": cpu["others_pct"],
            }
        )
        lat["a"] += mine["a"]
        lat["b"] += mine["b"]
    a_ms, b_ms = summary_ms(lat["a"]), summary_ms(lat["b"])
    n = per_part * plan.interleaved_parts

    def cpu_ms(key: str, count: int) -> float | None:
        return round(cpu_s[key] * 1000 / count, 3) if count else None

    cpu_per = {
        v: {
            "bff": cpu_ms(f"bff_{v}", len(lat[v])),
            "worker": cpu_ms(f"worker_{v}", len(lat[v])),
        }
        for v in ("a", "b")
    }
    return {
        "requests_per_stack": n,
        "a_e2e_ms": a_ms,
        "b_e2e_ms": b_ms,
        "errors": {v: errors[v][:5] for v in errors},
        "error_count": {v: len(errors[v]) for v in errors},
        "overhead_p50_pct": _pct(b_ms["p50"], a_ms["p50"]),
        "overhead_p99_pct": _pct(b_ms["p99"], a_ms["p99"]),
        "paired_difference_ms": summary_ms([max(0.0, d) for d in pairs]) if pairs else {},
        "paired_difference_median_ms": round(1000 * statistics.median(pairs), 3) if pairs else None,
        "cpu_ms_per_e2e": cpu_per,
        "cpu_overhead_pct": {
            k: _pct(cpu_per["b"][k] or 0.0, cpu_per["a"][k] or 0.0) for k in ("bff", "worker")
        },
        "parts": parts,
        "overhead_p50_pct_per_part": [x["overhead_p50_pct"] for x in parts],
        "others_cpu_pct": round(statistics.mean(x["others_cpu_pct"] for x in parts), 1),
        "exit_codes": exit_codes,
    }


# -- orchestration ----------------------------------------------------------------


async def bench(
    ctx: Ctx,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None, dict[str, Any]]:
    run = uuid.uuid4().hex[:8]
    rounds: list[dict[str, Any]] = []
    warm: dict[str, Any] | None = None
    with trio.fail_after(TOTAL_BUDGET_S):
        receiver = ctx.kids.start(
            "otlp-receiver",
            [
                sys.executable,
                str(SCRIPT),
                "--otlp-receiver",
                str(ctx.receiver_port),
            ],
            {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        )
        await wait_http(receiver, f"http://{HOST}:{ctx.receiver_port}/stats")
        ctx.receiver_pids.append(receiver.pid)
        if ctx.plan.warmup_round:
            short = replace(ctx.plan, idle_requests=50, load_seconds=3.0)
            warm = await run_round(ctx, short, "b", "warm-up", run)
            for phase in ("idle", "load"):
                warm[phase].pop("latencies_s")
            print(f"  warm-up round (b, discarded): {warm['load']['e2e_rps']:,.0f} e2e/s")
        for index in range(ctx.plan.pairs):
            for variant in pair_order(index):
                r = await run_round(ctx, ctx.plan, variant, f"{variant}{index}", run)
                rounds.append(r)
                print(
                    f"  round {variant}{index}: idle p50 {r['idle']['e2e_ms']['p50']} ms, "
                    f"p99 {r['idle']['e2e_ms']['p99']} ms; {r['load']['e2e_rps']:,.0f} e2e/s; "
                    f"spans received {r['received']['spans']:,}; other processes' CPU "
                    f"{r['load']['cpu']['others_pct']:.0f} %",
                    flush=True,
                )
        side = await interleaved(ctx, run)
        print(
            f"  interleaved: idle p50 a {side['a_e2e_ms']['p50']} ms, "
            f"b {side['b_e2e_ms']['p50']} ms ({side['overhead_p50_pct']} %); "
            f"median paired difference {side['paired_difference_median_ms']} ms",
            flush=True,
        )
    return rounds, warm, side


def pair_order(index: int) -> tuple[str, str]:
    """a b, b a, a b, ...: a drift of the host's speed across the run falls on both
    variants alike instead of always on the one that runs second."""
    return ("a", "b") if index % 2 == 0 else ("b", "a")


def _pct(new: float, old: float) -> float:
    return round(100.0 * (new - old) / old, 1) if old else float("nan")


def pool(rounds: Sequence[Mapping[str, Any]], variant: str) -> dict[str, Any]:
    mine = [r for r in rounds if r["variant"] == variant]
    idle = [x for r in mine for x in r["idle"]["latencies_s"]]
    load = [x for r in mine for x in r["load"]["latencies_s"]]
    completed = sum(r["load"]["completed"] for r in mine)
    seconds = sum(r["load"]["seconds"] for r in mine)

    def mean_cpu(phase: str, key: str) -> float | None:
        vals = [r[phase]["cpu_ms_per_e2e"].get(key) for r in mine]
        vals = [v for v in vals if v is not None]
        return round(sum(vals) / len(vals), 3) if vals else None

    return {
        "rounds": len(mine),
        "idle_e2e_ms": summary_ms(idle),
        "idle_errors": sum(r["idle"]["error_count"] for r in mine),
        "load_e2e_rps": round(completed / seconds, 1) if seconds else 0.0,
        "load_e2e_ms": summary_ms(load),
        "load_errors": sum(r["load"]["error_count"] for r in mine),
        "load_rps_per_round": [r["load"]["e2e_rps"] for r in mine],
        "idle_p50_ms_per_round": [r["idle"]["e2e_ms"].get("p50") for r in mine],
        "cpu_ms_per_e2e_idle": {
            k: mean_cpu("idle", k) for k in ("bff", "worker", "postgres", "otlp_receiver")
        },
        "cpu_ms_per_e2e_load": {
            k: mean_cpu("load", k) for k in ("bff", "worker", "postgres", "otlp_receiver", "bench")
        },
        "spans_received": sum(r["received"]["spans"] for r in mine),
        "otlp_trace_requests": sum(r["received"]["trace_requests"] for r in mine),
        "otlp_metric_requests": sum(r["received"]["metric_requests"] for r in mine),
        "host_others_cpu_pct": {
            phase: round(sum(r[phase]["cpu"]["others_pct"] for r in mine) / len(mine), 1)
            for phase in ("idle", "load")
        },
    }


def paired(rounds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """b against the a run next to it, pair by pair (each pair shares the host's mood)."""
    a_rounds = [r for r in rounds if r["variant"] == "a"]
    b_rounds = [r for r in rounds if r["variant"] == "b"]
    p50, rps = [], []
    for a, b in zip(a_rounds, b_rounds, strict=False):
        p50.append(_pct(b["idle"]["e2e_ms"]["p50"], a["idle"]["e2e_ms"]["p50"]))
        rps.append(-_pct(b["load"]["e2e_rps"], a["load"]["e2e_rps"]))
    return {
        "p50_overhead_pct_per_pair": p50,
        "rps_overhead_pct_per_pair": rps,
        "p50_overhead_pct_median": round(statistics.median(p50), 1) if p50 else None,
        "rps_overhead_pct_median": round(statistics.median(rps), 1) if rps else None,
    }


def cpu_overhead(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """CPU per request, b against a: less sensitive to other users of the host than time."""
    out: dict[str, Any] = {}
    for phase in ("idle", "load"):
        ca, cb = a[f"cpu_ms_per_e2e_{phase}"], b[f"cpu_ms_per_e2e_{phase}"]
        out[phase] = {k: _pct(cb[k], ca[k]) for k in ("bff", "worker") if ca.get(k) and cb.get(k)}
        sa = sum(ca.get(k) or 0.0 for k in ("bff", "worker"))
        sb = sum(cb.get(k) or 0.0 for k in ("bff", "worker", "otlp_receiver"))
        out[phase]["bff_worker_plus_receiver"] = _pct(sb, sa)
    return out


def report(
    ctx: Ctx,
    settings: dict[str, str],
    machine: dict[str, Any],
    rounds: list[dict[str, Any]],
    warm: dict[str, Any] | None,
    side: dict[str, Any],
) -> dict[str, Any]:
    a, b = pool(rounds, "a"), pool(rounds, "b")
    by_service: dict[str, int] = {}
    by_name: dict[str, int] = {}
    for r in rounds:
        for k, v in r["received"].get("by_service", {}).items():
            by_service[k] = by_service.get(k, 0) + v
        for k, v in r["received"].get("by_name", {}).items():
            by_name[k] = by_name.get(k, 0) + v
    b_rounds = [r for r in rounds if r["variant"] == "b"]
    for r in rounds:  # the raw samples are pooled above; keep the file small
        r["idle"].pop("latencies_s")
        r["load"].pop("latencies_s")
    plan = ctx.plan
    return {
        # The headline: the rounds (each stack alone on the host, fresh processes); the
        # interleaved phase beside it (see interleaved(): drift cancels there, but b's
        # background export work lands on a's requests too, which favours b).
        "tracing_overhead_p50_pct": _pct(b["idle_e2e_ms"]["p50"], a["idle_e2e_ms"]["p50"]),
        "tracing_overhead_p99_pct": _pct(b["idle_e2e_ms"]["p99"], a["idle_e2e_ms"]["p99"]),
        "interleaved_overhead_p50_pct": side["overhead_p50_pct"],
        "interleaved_overhead_p99_pct": side["overhead_p99_pct"],
        "interleaved": side,
        "tracing_overhead_rps_pct": -_pct(b["load_e2e_rps"], a["load_e2e_rps"]),
        "tracing_overhead_load_p50_pct": _pct(b["load_e2e_ms"]["p50"], a["load_e2e_ms"]["p50"]),
        "paired": paired(rounds),
        "cpu_per_e2e_overhead_pct": cpu_overhead(a, b),
        "targets": {"tracing_overhead_p50_pct": TARGET_P50_OVERHEAD_PCT},
        "spans_received": b["spans_received"],
        "spans_received_in_a_rounds": a["spans_received"],
        "spans_by_service": by_service,
        "spans_by_name": dict(sorted(by_name.items(), key=lambda kv: -kv[1])),
        "spans_per_e2e": [r["spans_per_e2e"] for r in b_rounds],
        "variants": {"a_no_endpoint": a, "b_otlp_endpoint": b},
        "rounds": rounds,
        "warmup_round": warm,
        "host_others_cpu_note": "percent of one core (of 200) used by processes not of this "
        "run during the measured windows (other users of the host): the rounds with much of "
        "it are skewed; alternating a/b spreads that over both variants",
        "date": now_iso(),
        "machine": machine,
        "config": {
            "server": ctx.server.kind,
            "server_settings": settings,
            "embedded_settings_passed": ctx.server.extra_settings,
            "plan": asdict(plan),
            "order": ("warm-up (b, short, discarded) " if plan.warmup_round else "")
            + " ".join(" ".join(f"{v}{i}" for v in pair_order(i)) for i in range(plan.pairs)),
            "variant_a": "no OTEL_* variable in the BFF's or the worker's environment",
            "variant_b": "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:<receiver> for both "
            "(protocol http/protobuf; BatchSpanProcessor and OTLP metric export interval "
            "at their defaults; OTLP metrics on too, as telemetry/otel.py does)",
            "receiver": "separate process: QuartTrio on Hypercorn (trio), decodes each "
            "ExportTraceServiceRequest/ExportMetricsServiceRequest with opentelemetry-proto "
            "and counts spans; its CPU competes with the stack on this host",
            "bff": "python -m hypercorn -k trio -b 127.0.0.1:<port> dataplane.app:app "
            "(1 spawned serving process; CPU is that process's)",
            "worker": f"python -m dataplane worker, SURFACE_QUEUE_TYPE={QUEUE_TYPE}, "
            "DATAPLANE_PROBE=1, default concurrency",
            "round": "TRUNCATE the queue tables, start BFF + worker, idle phase, load phase, "
            "stop both (SIGTERM: the shutdown flushes spans), count what the receiver got",
            "idle": f"{plan.idle_warmup} warm-up + {plan.idle_requests} sequential probe.echo "
            "POST -> stream -> done per round on one keep-alive raw-socket connection",
            "load": f"{plan.load_clients} closed-loop clients, {plan.load_warmup_s}s warm-up "
            f"then {plan.load_seconds}s per round",
            "interleaved": "both stacks up at once, each on a database of its own, "
            f"{plan.interleaved_warmup} warm-up + {plan.interleaved_requests} sequential "
            "requests per stack alternating a b b a ..., in parts with fresh processes and "
            "the databases swapped; interleaved_overhead_*: (b - a) / a of those samples "
            "(b's exporter threads also run during a's requests there, which favours b)",
            "overhead": "p50/p99: (b - a) / a of the pooled idle samples; rps: (a - b) / a "
            "of pooled completions / seconds (positive = b slower); paired: the same per "
            "(a_i, b_i) round pair and the median over pairs; cpu_per_e2e_overhead_pct: CPU "
            "ms per request of the BFF and worker processes (mean over rounds), b against a",
            "spans_per_e2e": "spans received in a b round / e2e requests issued in it "
            "(warm-ups included)",
            "cpu_pct": "percent of one core over the measured window from /proc/<pid>/stat; "
            "cpu_ms_per_e2e = CPU milliseconds of each party per completed request",
        },
    }


def print_tables(result: dict[str, Any]) -> None:
    a = result["variants"]["a_no_endpoint"]
    b = result["variants"]["b_otlp_endpoint"]

    def pq(s: Mapping[str, Any]) -> str:
        return f"{s.get('p50')} / {s.get('p99')}"

    def cpu(v: Mapping[str, Any], phase: str) -> str:
        c = v[f"cpu_ms_per_e2e_{phase}"]
        return " ".join(f"{k} {c[k]}" for k in ("bff", "worker", "postgres", "otlp_receiver"))

    rows = [
        ["idle e2e p50 / p99, ms", pq(a["idle_e2e_ms"]), pq(b["idle_e2e_ms"])],
        [
            "idle samples (errors)",
            f"{a['idle_e2e_ms']['n']} ({a['idle_errors']})",
            f"{b['idle_e2e_ms']['n']} ({b['idle_errors']})",
        ],
        ["idle p50 per round, ms", a["idle_p50_ms_per_round"], b["idle_p50_ms_per_round"]],
        ["load e2e/s (32 clients)", a["load_e2e_rps"], b["load_e2e_rps"]],
        ["load e2e/s per round", a["load_rps_per_round"], b["load_rps_per_round"]],
        ["load p50 / p99, ms", pq(a["load_e2e_ms"]), pq(b["load_e2e_ms"])],
        ["load errors", a["load_errors"], b["load_errors"]],
        [
            "others' CPU % idle / load",
            f"{a['host_others_cpu_pct']['idle']} / {a['host_others_cpu_pct']['load']}",
            f"{b['host_others_cpu_pct']['idle']} / {b['host_others_cpu_pct']['load']}",
        ],
        ["CPU ms/e2e idle", cpu(a, "idle"), cpu(b, "idle")],
        ["CPU ms/e2e load", cpu(a, "load"), cpu(b, "load")],
        ["spans received", a["spans_received"], b["spans_received"]],
        [
            "OTLP trace / metric POSTs",
            f"{a['otlp_trace_requests']} / {a['otlp_metric_requests']}",
            f"{b['otlp_trace_requests']} / {b['otlp_metric_requests']}",
        ],
    ]
    print()
    print(format_table(["metric", "a: no endpoint", "b: OTLP endpoint"], rows))
    t = result["targets"]["tracing_overhead_p50_pct"]
    side = result["interleaved"]
    print(
        f"\ninterleaved (both stacks up, requests alternating), idle e2e p50 / p99 ms: "
        f"a {pq(side['a_e2e_ms'])}, b {pq(side['b_e2e_ms'])}; median paired b - a "
        f"{side['paired_difference_median_ms']} ms; CPU ms/e2e a {side['cpu_ms_per_e2e']['a']}, "
        f"b {side['cpu_ms_per_e2e']['b']}; others' CPU {side['others_cpu_pct']} %"
    )
    print(
        f"tracing overhead: idle p50 {result['tracing_overhead_p50_pct']} % (target <= {t}), "
        f"idle p99 {result['tracing_overhead_p99_pct']} %, "
        f"throughput {result['tracing_overhead_rps_pct']} %, "
        f"load p50 {result['tracing_overhead_load_p50_pct']} %; interleaved: idle p50 "
        f"{result['interleaved_overhead_p50_pct']} % (per part "
        f"{side['overhead_p50_pct_per_part']} %), p99 {result['interleaved_overhead_p99_pct']} %"
    )
    pr, co = result["paired"], result["cpu_per_e2e_overhead_pct"]
    print(
        f"paired (a_i, b_i): idle p50 {pr['p50_overhead_pct_per_pair']} % "
        f"(median {pr['p50_overhead_pct_median']}), throughput "
        f"{pr['rps_overhead_pct_per_pair']} % (median {pr['rps_overhead_pct_median']})"
    )
    print(f"CPU per request, b against a, %: idle {co['idle']}; load {co['load']}")
    print(f"spans per e2e request (b rounds): {result['spans_per_e2e']}")
    noisy = [r["round"] for r in result["rounds"] if r["load"]["cpu"]["others_pct"] > NOISY_PCT]
    if noisy:
        print(
            f"WARNING: rounds {noisy} ran with more than {NOISY_PCT:.0f} % of a core used by "
            "other processes on the host: time-based figures are skewed (the CPU-per-request "
            "comparison less so); rerun on a quiet host"
        )
    print(f"spans by service: {result['spans_by_service']}")
    problems = {r["round"]: r["log_problems"] for r in result["rounds"]}
    problems = {k: v for k, v in problems.items() if v}
    if problems:
        print(f"log lines that look like trouble: {json.dumps(problems)[:1500]}")


def run(plan: Plan, signals: str = "all") -> dict[str, Any]:
    raise_own_nofile()
    with scratch_server("dataplane_tracing") as server, children_scope() as kids:
        print(f"server: {server.kind}; logs in {kids.log_dir}", flush=True)
        settings, machine = server_facts(server)
        env_a = stack_env(server.dsn, drop=("OTEL_",))
        migrate_schema(env_a)
        port = free_port()
        if signals == "traces":  # spans only: the meter stays the API's no-op
            env_b = {
                **env_a,
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://{HOST}:{port}/v1/traces",
            }
        else:  # OTLP traces and metrics, as one endpoint variable turns on
            env_b = {**env_a, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{HOST}:{port}"}
        with scratch_database(server.dsn, f"dataplane_tracing_b_{os.getpid()}") as own:
            env_b_own_db = {**env_b, "MAESTRO_QUEUES_URL": own.dsn}
            migrate_schema(env_b_own_db)
            ctx = Ctx(
                server, kids, plan, env_a, env_b, port, [], postmaster_pid(server), env_b_own_db
            )
            rounds, warm, side = trio.run(until_signalled, bench, ctx)
        result = report(ctx, settings, machine, rounds, warm, side)
        result["config"]["signals"] = signals
        if signals == "traces":
            result["config"]["variant_b"] = (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:<receiver>/v1/traces for "
                "both (spans only; no metrics SDK)"
            )
        return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="short smoke run (~30 s)")
    parser.add_argument(
        "--signals",
        choices=("all", "traces"),
        default="all",
        help="b's telemetry: OTLP traces and metrics (all, the default) or traces only",
    )
    output_arg(parser, "tracing")
    parser.add_argument("--otlp-receiver", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.otlp_receiver is not None:
        with contextlib.suppress(KeyboardInterrupt):
            receiver_main(args.otlp_receiver)
        return 0
    plan = Plan.quick() if args.quick else Plan()
    result = run_and_save(
        lambda: run(plan, args.signals),
        args.output,
        print_tables,
        "interrupted; every process started was stopped",
    )
    return 130 if result is None else 0


if __name__ == "__main__":
    sys.exit(main())
