"""Plans made at idle, then a backlog: what the queue's statements cost, with and
without the BFF's growth watch (``dataplane/queue/growth.py``).

Run from the repository root::

    python bench/plan_growth.py            # own embedded Postgres (temp dir)
    MAESTRO_QUEUES_URL=... python bench/plan_growth.py
    python bench/plan_growth.py --quick    # smoke run, small counts

Three cases, each on one fresh session of the plane's own client (``QueueClient`` over
the bridge, one pooled connection, so every statement is prepared as in the BFF and
the worker):

* ``planned on the backlog``: the reference; the backlog is there before the session's
  first statement;
* ``planned at idle, kept``: 12 rounds of a request's statements on an empty queue
  (past psycopg's prepare threshold and Postgres' five custom plans), then the backlog
  arrives with no ANALYZE since;
* ``planned at idle, watched``: the same, then one ``GrowthWatch.check()`` (what the
  BFF runs every second).

Then 10 rounds: enqueue, claim of 32, renew and complete of those 32, the reply pump's
read of 32 finished rows, the BFF's owned-row read. Median ms per statement, and the
sequential scans and rows the rounds read. Prints a table and writes
``bench/results/plan_growth.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import trio

from bench.harness.common import (
    format_table,
    now_iso,
    output_arg,
    run_and_save,
    scratch_server,
    server_facts,
)
from bench.harness.stack import migrate_schema, stack_env
from dataplane.db import Database, DatabaseConfig, open_bridge, open_database
from dataplane.queue import Completion, JsonText, QueueClient
from dataplane.queue.growth import GrowthWatch

T = "surface-probe"
BACKLOG = 100_000
IDLE_ROUNDS = 12
ROUNDS = 10
CASES = ("planned on the backlog", "planned at idle, kept", "planned at idle, watched")
STATEMENTS = ("enqueue", "claim 32", "renew 32", "complete 32", "read 32 finished", "owned row")


def _reset(dsn: str, backlog: int, now: bool) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE maestro_queues, surface_result_blobs")
        if now:
            _grow(conn, backlog)
        conn.execute("ANALYZE maestro_queues, surface_result_blobs")


def _grow(conn: psycopg.Connection[Any], backlog: int) -> None:
    conn.execute(
        "INSERT INTO maestro_queues (type, dedupe_key, payload)"
        " SELECT %(t)s, 'backlog-' || g, jsonb_build_object('operation', 'echo', 'n', g)"
        " FROM generate_series(1, %(n)s) AS g",
        {"t": T, "n": backlog},
    )


async def _round(queue: QueueClient, tag: str, ms: dict[str, list[float]]) -> None:
    async def timed(name: str, call: Callable[[], Awaitable[Any]]) -> Any:
        started = time.perf_counter()
        result = await call()
        ms[name].append((time.perf_counter() - started) * 1000)
        return result

    new = await timed("enqueue", lambda: queue.enqueue(T, tag, {"operation": "echo"}))
    jobs = await timed("claim 32", lambda: queue.claim(T, "bench", limit=32))
    await timed("renew 32", lambda: queue.renew(jobs))
    done = [Completion(j, JsonText('{"data":1}')) for j in jobs]
    await timed("complete 32", lambda: queue.complete_many(done))
    await timed("read 32 finished", lambda: queue.get_finished_many([j.id for j in jobs]))
    await timed(
        "owned row",
        lambda: queue.get_owned(new.job_id, queue_type=T, client="", scope_key=""),
    )


async def _reads(db: Database) -> tuple[int, int]:
    await db.fetchone("SELECT pg_stat_force_next_flush()")
    row = await db.fetchone(
        "SELECT seq_scan, coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) AS n"
        " FROM pg_stat_user_tables WHERE relname = 'maestro_queues'"
    )
    return (int(row["seq_scan"]), int(row["n"])) if row else (0, 0)


async def _case(dsn: str, case: str, backlog: int, rounds: int) -> dict[str, Any]:
    at_idle = case != CASES[0]
    _reset(dsn, backlog, now=not at_idle)
    ms: dict[str, list[float]] = {name: [] for name in STATEMENTS}
    async with open_bridge(), open_database(DatabaseConfig(dsn, pool_size=1)) as one:
        queue = QueueClient(one)
        if at_idle:
            for i in range(IDLE_ROUNDS):
                await _round(queue, f"idle-{i}", ms)
            with psycopg.connect(dsn, autocommit=True) as conn:
                _grow(conn, backlog)
        analyzed: list[str] = []
        if case == CASES[2]:
            async with open_database(DatabaseConfig(dsn, pool_size=1)) as watcher:
                analyzed = await GrowthWatch(watcher).check()
        ms = {name: [] for name in STATEMENTS}
        scans0, read0 = await _reads(one)
        for i in range(rounds):
            await _round(queue, f"after-{i}", ms)
        scans1, read1 = await _reads(one)
    return {
        "case": case,
        "analyzed": analyzed,
        "median_ms": {name: round(statistics.median(v), 3) for name, v in ms.items()},
        "seq_scans": scans1 - scans0,
        "rows_read": read1 - read0,
    }


def run(backlog: int, rounds: int) -> dict[str, Any]:
    with scratch_server("plan_growth") as server:
        migrate_schema(stack_env(server.dsn))
        settings, machine = server_facts(server)
        cases = [trio.run(_case, server.dsn, case, backlog, rounds) for case in CASES]
    return {
        "date": now_iso(),
        "machine": machine,
        "config": {
            "backlog": backlog,
            "rounds": rounds,
            "idle_rounds": IDLE_ROUNDS,
            "server": settings,
        },
        "cases": cases,
    }


def print_table(result: dict[str, Any]) -> None:
    headers = ["case", *STATEMENTS, "seq scans", "rows read"]
    rows = [
        [c["case"], *(c["median_ms"][s] for s in STATEMENTS), c["seq_scans"], c["rows_read"]]
        for c in result["cases"]
    ]
    print(f"median ms per statement, {result['config']['backlog']:,}-row backlog")
    print(format_table(headers, rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    output_arg(parser, "plan_growth")
    args = parser.parse_args(argv)
    backlog, rounds = (20_000, 3) if args.quick else (BACKLOG, ROUNDS)
    saved = run_and_save(lambda: run(backlog, rounds), args.output, print_table, "interrupted")
    return 0 if saved is not None else 130


if __name__ == "__main__":
    sys.exit(main())
