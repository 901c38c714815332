"""Queue benchmark: wake latency at idle, enqueue rate, and drain throughput.

Run from the repository root::

    python bench/queue_level.py            # own embedded Postgres (temp dir), durable defaults
    MAESTRO_QUEUES_URL=... python bench/queue_level.py   # scratch db dataplane_bench_<pid> there
    python bench/queue_level.py --quick    # smoke run, small counts

Phases (each bounded in count and time, under two minutes in all):

* bridge overhead: ``SELECT 1`` through ``Database`` (pool + trio-asyncio bridge)
  vs. a plain blocking psycopg connection, hot and after a 50 ms pause;
* sequential enqueue latency (one task, one ``enqueue()`` at a time);
* wake latency at idle: a claimer woken by a ``Listener`` on the wake channel
  claims and completes; a producer enqueues one job every 50 ms; a separate
  witness process LISTENs too and stamps each commit's NOTIFY (see WAKE_METHOD);
* enqueue rate: 20,000 ``enqueue()`` calls from 8 concurrent tasks over one pool;
* drain: 20,000 pending no-op jobs claimed (``claim(limit=N)``) and completed
  (``complete_many``) by 1, 2 or 4 claimer tasks of this one process, for each
  batch size; each run is capped in time, its rate is jobs done / elapsed.

Prints a table and writes ``bench/results/queue.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as ``python bench/queue_level.py``: the repository root first on sys.path
# (``bench``, and this checkout's ``dataplane``).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg
import trio

from bench.harness.common import (
    Server,
    Witness,
    admin_sql,
    describe,
    format_table,
    now_iso,
    output_arg,
    run_and_save,
    scratch_server,
    server_facts,
    summary_ms,
    until_signalled,
)
from dataplane.db import Database, DatabaseConfig, Gap, open_bridge, open_database
from dataplane.queue import ClaimedJob, Completion, QueueClient, wake_channel
from dataplane.queue.migrations import migrate

WAKE_TYPE = "surface-bench_wake"
SEQ_TYPE = "surface-bench_seq"
DRAIN_TYPE = "surface-bench_drain"
NOOP_RESULT: dict[str, Any] = {"ok": True}

POOL_SIZE = 16
TOTAL_BUDGET_S = 270.0  # the whole trio part; server start/stop comes on top


@dataclass(frozen=True)
class Plan:
    overhead_calls: int = 500
    overhead_idle_calls: int = 60
    seq_enqueues: int = 500
    wake_warmup: int = 20
    wake_jobs: int = 300
    wake_interval_s: float = 0.050
    wake_claim_limit: int = 10
    enqueue_jobs: int = 20_000
    enqueue_tasks: int = 8
    drain_jobs: int = 20_000
    drain_batches: tuple[int, ...] = (1, 10, 50, 100, 200)
    drain_concurrency: tuple[int, ...] = (1, 2, 4)
    drain_cap_s: float = 6.0  # per configuration

    @classmethod
    def quick(cls) -> Plan:
        return cls(
            overhead_calls=100,
            overhead_idle_calls=10,
            seq_enqueues=100,
            wake_jobs=40,
            enqueue_jobs=2_000,
            drain_jobs=2_000,
            drain_batches=(1, 100),
            drain_concurrency=(1, 2),
            drain_cap_s=2.0,
        )


# -- helpers ---------------------------------------------------------------


ADMIN_S = 120.0  # bound of each housekeeping call (untimed SQL on its own connection)
_VACUUM = "VACUUM ANALYZE maestro_queues"


async def _reset(dsn: str) -> None:
    """Empty the queue tables and leave them vacuumed/analysed."""
    await admin_sql(dsn, "TRUNCATE maestro_queues, surface_result_blobs", _VACUUM, within=ADMIN_S)


async def _bulk_fill(dsn: str, queue_type: str, n: int) -> None:
    """``n`` pending rows in one INSERT (refills between drain runs; not the API)."""
    fill = """
        INSERT INTO maestro_queues (type, dedupe_key, payload, available_at, created_at)
        SELECT %(type)s, %(tag)s || g, jsonb_build_object('n', g), clock_timestamp(),
               clock_timestamp()
        FROM generate_series(1, %(n)s) AS g
    """
    params = {"type": queue_type, "tag": f"bulk-{uuid.uuid4().hex[:8]}-", "n": n}
    await admin_sql(dsn, (fill, params), _VACUUM, within=ADMIN_S)


async def _pending(dsn: str, queue_type: str) -> int:
    count = "SELECT count(*) FROM maestro_queues WHERE type = %(t)s AND status = 'pending'"
    [rows] = await admin_sql(dsn, (count, {"t": queue_type}), within=ADMIN_S)
    return int(rows[0][0])


# -- phases ----------------------------------------------------------------


async def _noop(conn: Any) -> None:
    return None


async def phase_overhead(db: Database, dsn: str, plan: Plan) -> dict[str, Any]:
    """``SELECT 1`` through the pool + bridge vs. plain blocking psycopg, hot and after idle.

    "idle" samples follow a ``plan.wake_interval_s`` pause, as every wake-up does; the
    ``db.run`` of a coroutine that does no I/O isolates the bridge crossing itself.
    """
    out: dict[str, Any] = {}
    for label, pause, calls in (
        ("hot", 0.0, plan.overhead_calls),
        ("idle", plan.wake_interval_s, plan.overhead_idle_calls),
    ):
        bridged: list[float] = []
        crossing: list[float] = []
        for _ in range(calls):
            await trio.sleep(pause)
            t0 = time.perf_counter()
            await db.fetchone("SELECT 1")
            bridged.append(time.perf_counter() - t0)
            await trio.sleep(pause)
            t0 = time.perf_counter()
            await db.run(_noop)
            crossing.append(time.perf_counter() - t0)
        direct: list[float] = []
        # Blocking on purpose: a microbenchmark, nothing else runs in this loop now.
        with psycopg.connect(dsn, autocommit=True) as conn:
            for _ in range(calls):
                if pause:
                    time.sleep(pause)  # noqa: ASYNC251
                t0 = time.perf_counter()
                conn.execute("SELECT 1").fetchall()
                direct.append(time.perf_counter() - t0)
        out[f"select1_bridged_{label}_ms"] = summary_ms(bridged)
        out[f"select1_plain_sync_{label}_ms"] = summary_ms(direct)
        out[f"bridge_noop_run_{label}_ms"] = summary_ms(crossing)
    return out


async def phase_seq_enqueue(queue: QueueClient, plan: Plan) -> dict[str, Any]:
    samples: list[float] = []
    for i in range(plan.seq_enqueues):
        t0 = time.perf_counter()
        await queue.enqueue(SEQ_TYPE, f"seq-{i}", {"i": i})
        samples.append(time.perf_counter() - t0)
    return {"enqueue_seq_ms": summary_ms(samples)}


@dataclass
class _WakeRecord:
    enq_start: float = 0.0  # perf_counter before enqueue()
    enq_return: float = 0.0  # perf_counter when enqueue() returned (commit acknowledged)
    witnessed: float = 0.0  # perf_counter when the witness process saw the wake NOTIFY
    witnessed_wall: float = 0.0  # the same moment on the wall clock (Postgres' clock)
    notified: float = 0.0  # perf_counter when the claimer took the notification
    claimed: float = 0.0  # perf_counter when claim() returned holding the job
    job: ClaimedJob | None = None


@dataclass
class _WakeState:
    records: dict[uuid.UUID, _WakeRecord] = field(default_factory=dict)
    claimed: int = 0
    empty_claims: int = 0
    gaps: int = 0
    all_claimed: trio.Event = field(default_factory=trio.Event)
    expected: int = 0


async def phase_wake(db: Database, queue: QueueClient, dsn: str, plan: Plan) -> dict[str, Any]:
    """Idle claimer woken by LISTEN; a producer enqueues one job per interval."""
    state = _WakeState(expected=plan.wake_warmup + plan.wake_jobs)
    worker = f"wake-{uuid.uuid4().hex[:6]}"
    order: list[uuid.UUID] = []
    channel = wake_channel(WAKE_TYPE)
    produce_s = state.expected * plan.wake_interval_s
    witness = Witness(dsn, channel, state.expected, produce_s + 15)
    try:
        await trio.to_thread.run_sync(witness.wait_ready)

        async def claimer() -> None:
            async for event in listener.events:
                notified = time.perf_counter()
                if isinstance(event, Gap):
                    state.gaps += 1
                jobs = await queue.claim(WAKE_TYPE, worker, limit=plan.wake_claim_limit)
                claimed = time.perf_counter()
                if not jobs:
                    state.empty_claims += 1
                    continue
                for job in jobs:
                    rec = state.records.setdefault(job.id, _WakeRecord())
                    rec.notified, rec.claimed, rec.job = notified, claimed, job
                await queue.complete_many([Completion(j, NOOP_RESULT) for j in jobs])
                state.claimed += len(jobs)
                if state.claimed >= state.expected:
                    state.all_claimed.set()

        async with trio.open_nursery() as nursery:
            listener = db.listener([channel])
            await nursery.start(listener.run)
            nursery.start_soon(claimer)
            await trio.sleep(0.2)  # let the claimer reach its first receive
            start = trio.current_time()
            for i in range(state.expected):
                await trio.sleep_until(start + i * plan.wake_interval_s)
                t0 = time.perf_counter()
                res = await queue.enqueue(WAKE_TYPE, f"wake-{uuid.uuid4().hex}", {"i": i})
                t1 = time.perf_counter()
                rec = state.records.setdefault(res.job_id, _WakeRecord())
                rec.enq_start, rec.enq_return = t0, t1
                order.append(res.job_id)
            with trio.fail_after(10):
                await state.all_claimed.wait()
            nursery.cancel_scope.cancel()
        stamps = await trio.to_thread.run_sync(witness.stamps, 20.0)
    finally:
        witness.kill()

    records = [state.records[j] for j in order]
    _attach_witness(records, stamps)
    measured = records[plan.wake_warmup :]
    seen = [r for r in measured if r.witnessed]
    commit_to_claimed = [r.claimed - r.witnessed for r in seen]
    commit_to_claim_start = [
        r.job.claimed_at.timestamp() - r.witnessed_wall for r in seen if r.job is not None
    ]
    created_to_claimed_at = [
        (r.job.claimed_at - r.job.created_at).total_seconds() for r in measured if r.job
    ]
    ack_to_claimed = [r.claimed - r.enq_return for r in measured]
    return {
        "commit_to_claim_ms": summary_ms(commit_to_claim_start),
        "commit_to_claimed_ms": summary_ms(commit_to_claimed),
        "created_at_to_claimed_at_ms": summary_ms(created_to_claimed_at),
        "ack_to_claimed_ms": summary_ms(ack_to_claimed),
        "enqueue_start_to_claimed_ms": summary_ms([r.claimed - r.enq_start for r in measured]),
        "commit_to_notified_ms": summary_ms([r.notified - r.witnessed for r in seen]),
        "notified_to_claimed_ms": summary_ms([r.claimed - r.notified for r in measured]),
        "enqueue_start_to_commit_ms": summary_ms([r.witnessed - r.enq_start for r in seen]),
        "commit_to_ack_ms": summary_ms([r.enq_return - r.witnessed for r in seen]),
        "enqueue_call_ms": summary_ms([r.enq_return - r.enq_start for r in measured]),
        "witness_stamps": len(stamps),
        "witness_matched": len(seen),
        "claimed_before_ack": sum(1 for v in ack_to_claimed if v < 0),
        "empty_claims": state.empty_claims,
        "gaps": state.gaps,
        "listener": repr(listener.statistics()),
    }


def _attach_witness(records: list[_WakeRecord], stamps: list[tuple[float, float]]) -> None:
    """Each job's commit stamp: the first witness stamp after its enqueue() started.

    One enqueue is in flight at a time (50 ms apart), so the match is unambiguous;
    a stamp later than the next enqueue's start is not taken.
    """
    stamps = sorted(stamps)
    k = 0
    for i, rec in enumerate(records):
        while k < len(stamps) and stamps[k][0] < rec.enq_start:
            k += 1
        limit = records[i + 1].enq_start if i + 1 < len(records) else float("inf")
        if k < len(stamps) and stamps[k][0] < limit:
            rec.witnessed, rec.witnessed_wall = stamps[k]
            k += 1


async def phase_enqueue_rate(queue: QueueClient, plan: Plan) -> dict[str, Any]:
    """``enqueue_jobs`` API enqueues from ``enqueue_tasks`` concurrent tasks (one pool)."""
    per_task = plan.enqueue_jobs // plan.enqueue_tasks
    run = uuid.uuid4().hex[:8]

    async def producer(k: int) -> None:
        for i in range(per_task):
            await queue.enqueue(DRAIN_TYPE, f"drain-{run}-{k}-{i}", {"k": k, "i": i})

    t0, cpu0 = time.perf_counter(), time.process_time()
    async with trio.open_nursery() as nursery:
        for k in range(plan.enqueue_tasks):
            nursery.start_soon(producer, k)
    elapsed = time.perf_counter() - t0
    total = per_task * plan.enqueue_tasks
    return {
        "enqueue_jobs": total,
        "enqueue_tasks": plan.enqueue_tasks,
        "enqueue_seconds": round(elapsed, 3),
        "enqueue_jobs_per_s": round(total / elapsed, 1),
        "client_cpu_pct": round(100 * (time.process_time() - cpu0) / elapsed, 1),
    }


@dataclass
class _DrainStats:
    done: int = 0
    lost: int = 0
    claims: int = 0
    claim_s: float = 0.0
    complete_s: float = 0.0


async def _drain_run(queue: QueueClient, batch: int, tasks: int, cap_s: float) -> dict[str, Any]:
    stats = [_DrainStats() for _ in range(tasks)]
    deadline = trio.current_time() + cap_s

    async def claimer(s: _DrainStats, worker: str) -> None:
        while trio.current_time() < deadline:
            t0 = time.perf_counter()
            jobs = await queue.claim(DRAIN_TYPE, worker, limit=batch)
            t1 = time.perf_counter()
            s.claims += 1
            s.claim_s += t1 - t0
            if not jobs:
                return
            done = await queue.complete_many([Completion(j, NOOP_RESULT) for j in jobs])
            s.complete_s += time.perf_counter() - t1
            s.done += len(done)
            s.lost += len(jobs) - len(done)

    t0, cpu0 = time.perf_counter(), time.process_time()
    async with trio.open_nursery() as nursery:
        for k, s in enumerate(stats):
            nursery.start_soon(claimer, s, f"drain-{batch}-{tasks}-{k}")
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    done = sum(s.done for s in stats)
    claims = sum(s.claims for s in stats)
    return {
        "batch": batch,
        "tasks": tasks,
        "jobs_done": done,
        "lost": sum(s.lost for s in stats),
        "seconds": round(elapsed, 3),
        "capped": elapsed >= cap_s,
        "jobs_per_s": round(done / elapsed, 1) if elapsed > 0 else 0.0,
        "claim_ms_mean": round(1000 * sum(s.claim_s for s in stats) / max(claims, 1), 3),
        "complete_ms_mean": round(
            1000 * sum(s.complete_s for s in stats) / max(claims - tasks, 1), 3
        ),
        "client_cpu_pct": round(100 * cpu / elapsed, 1) if elapsed > 0 else 0.0,
    }


async def phase_drain(dsn: str, queue: QueueClient, plan: Plan) -> list[dict[str, Any]]:
    """Every (batch, tasks) configuration on a full queue; the first drains the API rows."""
    table: list[dict[str, Any]] = []
    first = True
    for tasks in plan.drain_concurrency:
        for batch in plan.drain_batches:
            if first:
                source = "api"
                await admin_sql(dsn, _VACUUM, within=ADMIN_S)
            else:
                source = "bulk"
                await _reset(dsn)
                await _bulk_fill(dsn, DRAIN_TYPE, plan.drain_jobs)
            first = False
            queued = await _pending(dsn, DRAIN_TYPE)
            with trio.fail_after(plan.drain_cap_s + 30):
                row = await _drain_run(queue, batch, tasks, plan.drain_cap_s)
            row["queued"] = queued
            row["source"] = source
            table.append(row)
            print(
                f"  drain batch={batch:>4} tasks={tasks}: {row['jobs_per_s']:>9,.0f} jobs/s"
                f" ({row['jobs_done']} in {row['seconds']:.2f}s"
                f"{', capped' if row['capped'] else ''})",
                flush=True,
            )
    await _reset(dsn)
    return table


# -- main ------------------------------------------------------------------

WAKE_METHOD = (
    "headline wake_p50_ms/wake_p99_ms = 'enqueue commit -> claim': from the moment a separate "
    "witness process (a bare blocking psycopg LISTEN on the wake channel, select() loop) "
    "receives the enqueue's wake NOTIFY - Postgres sends it only once the enqueue transaction "
    "has committed, so this is the commit as first observable by any client (it understates "
    "the true commit by the notify delivery, tens of microseconds) - to the job's claimed_at, "
    "the moment the woken claimer's claim statement took the row (Postgres' now(); witness "
    "and server read the same host wall clock). It charges the listener hop, the trio-asyncio "
    "bridge crossings and the claim's dispatch; the claim's own execution, commit and reply "
    "are execution, reported beside it as wake_returned (commit -> claim() returned, one "
    "monotonic clock). Cross-checks: created_at_to_claimed_at (server-side, adds the enqueue's "
    "execution and WAL flush); ack_to_claimed (from enqueue() returning in the producer). "
    "Producer and claimer share one Trio process and pool; warm-up jobs are excluded."
)


async def bench(server: Server, plan: Plan) -> dict[str, Any]:
    cfg = DatabaseConfig(server.dsn, pool_size=POOL_SIZE, application_name="bench-queue")
    async with open_bridge(), open_database(cfg) as db:
        await migrate(db)
        await _reset(server.dsn)
        queue = QueueClient(db)
        out: dict[str, Any] = {}
        with trio.fail_after(TOTAL_BUDGET_S):
            with trio.fail_after(40):
                out["overhead"] = await phase_overhead(db, server.dsn, plan)
                out["sequential_enqueue"] = await phase_seq_enqueue(queue, plan)
            await _reset(server.dsn)
            print("  overhead + sequential enqueue done", flush=True)
            with trio.fail_after(plan.wake_interval_s * (plan.wake_jobs + plan.wake_warmup) + 30):
                out["wake"] = await phase_wake(db, queue, server.dsn, plan)
            await _reset(server.dsn)
            print("  wake done", flush=True)
            with trio.fail_after(90):
                out["enqueue"] = await phase_enqueue_rate(queue, plan)
            print(f"  enqueue done: {out['enqueue']['enqueue_jobs_per_s']:,.0f} jobs/s", flush=True)
            out["drain_table"] = await phase_drain(server.dsn, queue, plan)
        out["pool"] = repr(db.statistics())
        return out


def report(
    server: Server,
    plan: Plan,
    settings: dict[str, str],
    machine: dict[str, Any],
    raw: dict[str, Any],
) -> dict[str, Any]:
    wake = raw["wake"]
    best = max(raw["drain_table"], key=lambda r: r["jobs_per_s"])
    result: dict[str, Any] = {
        "wake_p50_ms": wake["commit_to_claim_ms"]["p50"],
        "wake_p99_ms": wake["commit_to_claim_ms"]["p99"],
        "wake_returned_p50_ms": wake["commit_to_claimed_ms"]["p50"],
        "wake_returned_p99_ms": wake["commit_to_claimed_ms"]["p99"],
        "wake_method": WAKE_METHOD,
        "drain_jobs_per_s": best["jobs_per_s"],
        "drain_best": {"batch": best["batch"], "tasks": best["tasks"]},
        "enqueue_jobs_per_s": raw["enqueue"]["enqueue_jobs_per_s"],
        "enqueue_seq_p50_ms": raw["sequential_enqueue"]["enqueue_seq_ms"]["p50"],
        "targets": {"wake_p50_ms": 1.5, "wake_p99_ms": 8.0, "drain_jobs_per_s": 5000},
        "date": now_iso(),
        "machine": machine,
        "config": {
            "server": server.kind,
            "server_settings": settings,
            "embedded_settings_passed": server.extra_settings,
            "pool_size": POOL_SIZE,
            "plan": {k: v for k, v in plan.__dict__.items()},
            "drain_refill": "first run drains the API-enqueued rows; later runs: TRUNCATE, one "
            "bulk INSERT of drain_jobs rows, VACUUM ANALYZE (untimed)",
        },
        "wake": wake,
        "overhead": raw["overhead"],
        "sequential_enqueue": raw["sequential_enqueue"],
        "enqueue": raw["enqueue"],
        "drain_table": raw["drain_table"],
        "pool": raw["pool"],
    }
    return result


def print_tables(result: dict[str, Any]) -> None:
    w, t, o = result["wake"], result["targets"], result["overhead"]

    def pair(key: str) -> str:
        return f"{w[key]['p50']} / {w[key]['p99']}"

    rows = [
        ["wake p50 (commit -> claim), ms", result["wake_p50_ms"], f"<= {t['wake_p50_ms']}"],
        ["wake p99 (commit -> claim), ms", result["wake_p99_ms"], f"<= {t['wake_p99_ms']}"],
        ["  commit -> claim() returned p50 / p99", pair("commit_to_claimed_ms"), ""],
        ["  created_at -> claimed_at (server) p50 / p99", pair("created_at_to_claimed_at_ms"), ""],
        ["  enqueue() returned -> claimed p50 / p99", pair("ack_to_claimed_ms"), ""],
        ["  enqueue() called -> claimed p50 / p99", pair("enqueue_start_to_claimed_ms"), ""],
        ["  commit -> claimer notified p50 / p99", pair("commit_to_notified_ms"), ""],
        ["  notified -> claim() returned p50 / p99", pair("notified_to_claimed_ms"), ""],
        [
            "drain jobs/s (best)",
            f"{result['drain_jobs_per_s']:,.0f} ({describe(result['drain_best'])})",
            f">= {t['drain_jobs_per_s']:,}",
        ],
        [
            "enqueue jobs/s (8 tasks), client CPU %",
            f"{result['enqueue_jobs_per_s']:,.0f}, {result['enqueue']['client_cpu_pct']}",
            "",
        ],
        ["enqueue sequential p50, ms", result["enqueue_seq_p50_ms"], ""],
        [
            "SELECT 1 bridged / plain p50 hot, ms",
            f"{o['select1_bridged_hot_ms']['p50']} / {o['select1_plain_sync_hot_ms']['p50']}",
            "",
        ],
        [
            "SELECT 1 bridged / plain p50 after idle, ms",
            f"{o['select1_bridged_idle_ms']['p50']} / {o['select1_plain_sync_idle_ms']['p50']}",
            "",
        ],
        [
            "bridge crossing, no I/O, p50 hot / after idle, ms",
            f"{o['bridge_noop_run_hot_ms']['p50']} / {o['bridge_noop_run_idle_ms']['p50']}",
            "",
        ],
    ]
    print()
    print(format_table(["metric", "value", "target"], rows))
    print()
    drain_rows = [
        [
            r["batch"],
            r["tasks"],
            r["jobs_per_s"],
            r["jobs_done"],
            r["seconds"],
            "yes" if r["capped"] else "",
            r["claim_ms_mean"],
            r["complete_ms_mean"],
            r["client_cpu_pct"],
        ]
        for r in result["drain_table"]
    ]
    print(
        format_table(
            [
                "batch",
                "tasks",
                "jobs/s",
                "done",
                "s",
                "capped",
                "claim ms",
                "complete ms",
                "client CPU %",
            ],
            drain_rows,
        )
    )
    s = result["config"]["server_settings"]
    print(
        f"\nserver {s.get('server_version')}: fsync={s.get('fsync')} "
        f"synchronous_commit={s.get('synchronous_commit')} shared_buffers={s.get('shared_buffers')}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    output_arg(parser, "queue")  # queue.json, as bench/run_all.py reads it
    args = parser.parse_args(argv)
    plan = Plan.quick() if args.quick else Plan()
    result = run_and_save(
        lambda: run(plan),
        args.output,
        print_tables,
        "interrupted; the scratch server/database was removed",
    )
    return 130 if result is None else 0


def run(plan: Plan) -> dict[str, Any]:
    """Bring up the scratch server, run every phase, tear the server down."""
    with scratch_server("dataplane_bench") as server:
        print(f"server: {server.kind}; running phases...", flush=True)
        settings, machine = server_facts(server, fdatasync=True)
        raw = trio.run(until_signalled, bench, server, plan)
        return report(server, plan, settings, machine, raw)


if __name__ == "__main__":
    sys.exit(main())
