"""The console's reads at scale: the wallboard's overview and the jobs list's pages.

Run from the repository root::

    python bench/overview.py                # 1,000,000 rows in each table
    python bench/overview.py --quick        # 100,000 (smoke run)
    python bench/overview.py --rows 300000 --explain

On its own embedded Postgres (durable defaults) migrated by ``dataplane migrate``:
bulk-loads ``maestro_queues`` and ``worker_runs`` with INSERT ... SELECT
generate_series (what the load holds: docs/perf/benchmarks.md), ANALYZE, then times
the console's own code :data:`ROUNDS` times each: ``reads.overview`` (the wallboard's
cards), ``reads.list_jobs`` for the first page, a filtered page read from the
previous page's cursor (keyset), and ``reads.slowest_job`` over the longest window
(24 h: some 300,000 done rows) of every type and of one. Prints p50/p95/max in ms and writes
``bench/results/overview.json`` (not committed); ``--explain`` prints each statement's
plan (EXPLAIN ANALYZE, BUFFERS) as the last timed round ran it.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
import trio

from bench.harness.common import format_table, percentile, scratch_server, server_facts
from bench.harness.result import Result, interruptible, print_figures
from bench.harness.stack import migrate_schema, stack_env
from dataplane.compat import install_process
from dataplane.console import reads
from dataplane.db import Database, DatabaseConfig, open_bridge, open_database, q

ROWS = 1_000_000
QUICK_ROWS = 100_000
ROUNDS = 50  # timed reads of each kind
WARMUP = 3  # untimed reads first (and psycopg prepares a statement from its 5th use)
LOAD_WITHIN = 600  # seconds the load may take (statement_timeout of each INSERT)
GOAL_MS = 100.0  # issue #41: the overview answers in under 100 ms at 1,000,000 rows
FILTER = {"type": "surface-orders", "status": "poison"}  # the filtered page's filter

TYPES = [  # 12 queue types: 8 live, 4 dev tiers; the first ones take most of the load
    "surface-orders",
    "surface-users",
    "surface-search",
    "surface-billing",
    "surface-catalog",
    "surface-reports",
    "surface-inventory",
    "surface-probe",
    "surface-orders-dev",
    "surface-users-dev",
    "surface-search-dev",
    "surface-probe-dev",
]
OPERATIONS = ["list", "detail", "search", "export", "sync"]

# One row per i: a type (skewed: power 1.7), a status (94 % done, 2 % pending of which
# a quarter backing off, 0.5 % in flight, 1.5 % poison, 2 % cancelled), a client of 40
# (skewed), created over the last 3 days (live rows: the last 10 minutes).
LOAD_QUEUE = """
INSERT INTO maestro_queues (
    type, status, dedupe_key, client, payload, result, last_error, locked_by,
    lease_expires_at, dequeue_count, max_dequeues, available_at, created_at, claimed_at,
    completed_at
)
SELECT t, st, t || ':' || i || ':' || md5(i::text), c,
       jsonb_build_object(
           'surface', replace(replace(t, 'surface-', ''), '-dev', ''), 'operation', op,
           'version', 1 + i %% 3, 'tier', CASE WHEN t LIKE '%%-dev' THEN 'dev' ELSE 'live' END,
           'params', jsonb_build_object('id', i %% 100000, 'page', i %% 7,
                                        'q', left(md5(i::text), 12)),
           'traceparent', '00-' || md5(i::text) || '-' || left(md5(t || i), 16) || '-01',
           'auth', jsonb_build_object('client', c, 'staff', i %% 9 = 0,
                                      'branches', jsonb_build_array('b' || i %% 5, 'hq'),
                                      'scopeKey', left(md5(c), 16), 'userId', (i %% 5000)::text,
                                      'actorEmail', 'user' || i %% 5000 || '@' || c || '.test')),
       CASE WHEN st = 'done' THEN jsonb_build_object('data', jsonb_build_object(
           'ok', true, 'rows', i %% 50, 'etag', left(md5(i::text), 8))) END,
       CASE WHEN st = 'poison' THEN (ARRAY[
           E'Traceback (most recent call last):\n  File "surface.py", line 88\n'
           'psycopg.errors.QueryCanceled: canceling statement due to statement timeout\n',
           'lease lapsed at the dequeue cutoff',
           E'RuntimeError: upstream answered 502\n',
           E'KeyError: ''customer_id''\n'])[1 + i %% 4]
            WHEN st = 'pending' AND dq > 0 THEN 'ConnectionError: client DB unreachable' END,
       CASE WHEN st IN ('in_progress', 'poison') THEN t || '@host-' || i %% 6 || ':1:abc' END,
       CASE WHEN st = 'in_progress' THEN now() + interval '25 seconds' END,
       dq, 5,
       CASE WHEN st = 'in_progress' THEN now() + interval '25 seconds'
            WHEN st = 'pending' AND dq > 0 THEN now() + r3 * interval '2 minutes'
            ELSE created END,
       created,
       CASE WHEN st <> 'pending' OR dq > 0 THEN created + interval '5 ms' END,
       CASE WHEN st IN ('done', 'poison', 'cancelled')
            THEN created + (5 + r3 * 2000) * interval '1 ms' END
FROM (
    SELECT i, t, op, c, st, r3,
           CASE st WHEN 'poison' THEN 5 WHEN 'pending' THEN (r3 < 0.25)::int
                   WHEN 'cancelled' THEN 0 ELSE 1 END AS dq,
           CASE WHEN st IN ('pending', 'in_progress') THEN now() - r2 * interval '10 minutes'
                ELSE now() - interval '10 minutes' - r2 * interval '3 days' END AS created
    FROM (
        SELECT i, r2, r3,
               (%(types)s::text[])[1 + floor(12 * power(r1, 1.7))::int] AS t,
               (%(operations)s::text[])[1 + i %% 5] AS op,
               'client-' || lpad(floor(40 * power(r3, 2))::int::text, 2, '0') AS c,
               CASE WHEN i %% 1000 < 940 THEN 'done' WHEN i %% 1000 < 960 THEN 'pending'
                    WHEN i %% 1000 < 965 THEN 'in_progress' WHEN i %% 1000 < 980 THEN 'poison'
                    ELSE 'cancelled' END AS st
        FROM (SELECT i, random() AS r1, random() AS r2, random() AS r3
              FROM generate_series(%(first)s::int, %(last)s::int) AS i) AS g
    ) AS s
) AS rows
"""

# Job reports: 10 % in the last hour, 80 % in the last day, 10 % in the week before.
LOAD_RUNS = """
INSERT INTO worker_runs (
    job_id, type, operation, outcome, wall_ms, cpu_ms, rss_bytes, queue_wait_ms, cache,
    coalesced, dequeue_count, worker_id, finished_at, trace_id
)
SELECT gen_random_uuid(), t, (%(operations)s::text[])[1 + i %% 5],
       (ARRAY['done', 'done', 'done', 'done', 'done', 'done', 'done', 'done', 'done', 'done',
              'done', 'done', 'done', 'done', 'error', 'failed', 'done', 'done', 'poison',
              'released'])[1 + i %% 20],
       2 + 400 * power(r2, 4), 1 + 40 * power(r2, 3), 60000000 + (i %% 64) * 1048576,
       0.3 + 50 * power(r3, 6), (ARRAY['hit', 'miss', 'bypass', 'hit'])[1 + i %% 4],
       i %% 9 = 0, 1 + (i %% 50 = 0)::int, t || '@host-' || i %% 6 || ':1:abc',
       now() - CASE WHEN r1 < 0.1 THEN r1 * 10 * interval '1 hour'
                    WHEN r1 < 0.9 THEN interval '1 hour' + r1 * interval '23 hours'
                    ELSE interval '1 day' + r1 * interval '6 days' END,
       md5(i::text)
FROM (SELECT i, random() AS r1, random() AS r2, random() AS r3,
             (%(types)s::text[])[1 + floor(12 * power(random(), 1.7))::int] AS t
      FROM generate_series(%(first)s::int, %(last)s::int) AS i) AS g
"""


def load(dsn: str, rows: int) -> dict[str, Any]:
    """Both tables filled (in chunks of 250,000 rows, one transaction each), analyzed."""
    out: dict[str, Any] = {}
    params = {"types": TYPES, "operations": OPERATIONS}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"SET statement_timeout = '{LOAD_WITHIN}s'")
        conn.execute("SELECT setseed(0.41)")
        for table, statement in (("maestro_queues", LOAD_QUEUE), ("worker_runs", LOAD_RUNS)):
            t0 = time.perf_counter()
            for first in range(1, rows + 1, 250_000):
                last = min(rows, first + 249_999)
                conn.execute(statement, {**params, "first": first, "last": last})  # type: ignore[arg-type]
            out[f"{table}_load_s"] = round(time.perf_counter() - t0, 1)
            print(f"  {table}: {rows:,} rows in {out[f'{table}_load_s']} s", flush=True)
        conn.execute(
            "INSERT INTO maestro_paused (type, paused_by) VALUES (%s, 'bench')", [TYPES[5]]
        )
        t0 = time.perf_counter()
        conn.execute("VACUUM (ANALYZE) maestro_queues, worker_runs, maestro_paused")
        out["vacuum_analyze_s"] = round(time.perf_counter() - t0, 1)
        sizes = conn.execute(
            "SELECT relname, pg_total_relation_size(oid) FROM pg_class"
            " WHERE relname IN ('maestro_queues', 'worker_runs')"
        ).fetchall()
        out["total_mb"] = {name: round(size / 2**20) for name, size in sizes}
        counts = conn.execute("SELECT status, count(*) FROM maestro_queues GROUP BY 1").fetchall()
        out["statuses"] = dict(counts)
    return out


async def timed(fn: Callable[[], Awaitable[Any]]) -> dict[str, float]:
    """p50/p95/max/mean ms of :data:`ROUNDS` calls, after :data:`WARMUP`."""
    for _ in range(WARMUP):
        await fn()
    ms = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        await fn()
        ms.append((time.perf_counter() - t0) * 1000.0)
    return {
        "p50": round(percentile(ms, 50), 2),
        "p95": round(percentile(ms, 95), 2),
        "max": round(max(ms), 2),
        "mean": round(sum(ms) / len(ms), 2),
    }


async def measure(dsn: str, result: Result, explain: bool) -> None:
    config = DatabaseConfig(dsn, pool_size=2, application_name="bench-overview")
    async with open_bridge(), open_database(config) as db:
        cards = await reads.overview(db)
        first = await reads.list_jobs(db, reads.JobFilter())
        only = reads.JobFilter(**FILTER)
        after = (await reads.list_jobs(db, only)).next_cursor
        assert first.next_cursor and after, "the load left no second page"
        at, job_id = reads.parse_cursor(after) or (None, None)

        async def filtered() -> None:
            await reads.list_jobs(db, only, after=after)

        since = reads.parse_since("24h", datetime.now(UTC))
        queries: dict[str, Callable[[], Awaitable[Any]]] = {
            "overview": lambda: reads.overview(db),
            "jobs_first_page": lambda: reads.list_jobs(db, reads.JobFilter()),
            "jobs_filtered_page": filtered,
            "slowest": lambda: reads.slowest_job(db, since, None),
            "slowest_of_type": lambda: reads.slowest_job(db, since, TYPES[7]),
        }
        for name, fn in queries.items():
            result.detail[name] = await timed(fn)
        result.detail["cards"] = [
            {k: getattr(c, k) for k in ("type", "pending", "in_flight", "poison", "runs")}
            for c in cards
        ]
        jobs = {**only.params(), "after_at": None, "after_id": None, "limit": 51}
        plans: dict[str, dict[str, Any]] = {"console_overview": {}}
        plans["console_jobs"] = {**jobs, "type": None, "status": None}
        plans["console_jobs filtered"] = {**jobs, "after_at": at, "after_id": job_id}
        slow = {"since": since, "type": TYPES[7], "sample": reads.SLOWEST_SAMPLE}
        plans["console_slowest"] = slow
        result.detail["plans"] = {n: await _plan(db, n, p) for n, p in plans.items()}
    if explain:
        for name, plan in result.detail["plans"].items():
            print(f"\n-- {name}\n{plan}")


async def _plan(db: Database, name: str, params: dict[str, Any]) -> str:
    rows = await db.fetchall(
        "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + q(name.split()[0]),  # type: ignore[arg-type]
        params,
    )
    return "\n".join(next(iter(r.values())) for r in rows)


def run(rows: int, explain: bool) -> Result:
    result = Result(tool="overview", scenarios=[], config={"rows": rows, "rounds": ROUNDS})
    t0 = time.perf_counter()
    with scratch_server("dataplane_overview") as server:
        settings, result.machine = server_facts(server)
        result.config["server"] = settings
        migrate_schema(stack_env(server.dsn))
        print(f"loading {rows:,} rows into each table...", flush=True)
        result.detail["load"] = load(server.dsn, rows)
        trio.run(measure, server.dsn, result, explain)
    load_s = result.detail["load"]
    result.figures = {
        "overview_p50_ms": result.detail["overview"]["p50"],
        "overview_p95_ms": result.detail["overview"]["p95"],
        "overview_max_ms": result.detail["overview"]["max"],
        "jobs_first_page_p50_ms": result.detail["jobs_first_page"]["p50"],
        "jobs_first_page_p95_ms": result.detail["jobs_first_page"]["p95"],
        "jobs_filtered_page_p50_ms": result.detail["jobs_filtered_page"]["p50"],
        "jobs_filtered_page_p95_ms": result.detail["jobs_filtered_page"]["p95"],
        "slowest_p95_ms": result.detail["slowest"]["p95"],
        "slowest_of_type_p95_ms": result.detail["slowest_of_type"]["p95"],
        "load_s": round(load_s["maestro_queues_load_s"] + load_s["worker_runs_load_s"], 1),
    }
    result.total_seconds = round(time.perf_counter() - t0, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    install_process()  # as the entry points do (the console's own psycopg set-up)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_ROWS:,} rows (smoke run)")
    parser.add_argument("--rows", type=int, help=f"rows in each table (default {ROWS:,})")
    parser.add_argument("--explain", action="store_true", help="print each statement's plan")
    parser.add_argument("--output", type=Path, help="result JSON (default bench/results/)")
    args = parser.parse_args(argv)
    rows = args.rows or (QUICK_ROWS if args.quick else ROWS)
    if rows < 1_000:
        parser.error("--rows: at least 1,000")
    result = interruptible(lambda: run(rows, args.explain))
    if result is None:
        return 130
    names = ["overview", "jobs_first_page", "jobs_filtered_page", "slowest", "slowest_of_type"]
    table = [[n, *(result.detail[n][k] for k in ("p50", "p95", "max", "mean"))] for n in names]
    print("\n" + format_table(["read (ms)", "p50", "p95", "max", "mean"], table))
    print_figures(result)
    verdict = "under" if result.figures["overview_p95_ms"] < GOAL_MS else "OVER"  # type: ignore[operator]
    print(f"\noverview p95 {verdict} {GOAL_MS:.0f} ms at {rows:,} rows")
    print(f"wrote {result.save(args.output)} ({result.total_seconds}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
