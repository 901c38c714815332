"""Claim benchmark: one claim statement's round trip over a backlog, and its plans.

Run from the repository root::

    python bench/claim_plan.py            # own embedded Postgres (temp dir)
    MAESTRO_QUEUES_URL=... python bench/claim_plan.py
    python bench/claim_plan.py --quick    # smoke run, small counts

For a backlog of 20,000 pending rows from one client (FIFO) and from 20 (fair), one
blocking psycopg connection runs the ``job_claim`` query 40 times at limit 32 and 40
times at limit 4. It prepares the query, as the worker's connections do. The first 10
runs of each are left out (psycopg prepares a query on its 5th run, and Postgres makes
5 custom plans before it may keep its generic one). The bench then reads how many
generic and custom plans the session's prepared claim was given
(``pg_prepared_statements``). Last, a session makes its plan on an almost empty queue,
a backlog of 100,000 rows arrives with no ``ANALYZE`` since, and 8 claims of 32 report
their times and the sequential scans they made. Run it on two checkouts to compare the claim's SQL;
``results/claim-plan.md`` has the figures behind migration 0008.

Prints a table and writes ``bench/results/claim_plan.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import statistics
import time
from typing import Any

import psycopg
from psycopg.rows import dict_row

from bench.harness.common import (
    format_table,
    now_iso,
    output_arg,
    run_and_save,
    scratch_server,
    server_facts,
)
from bench.harness.stack import migrate_schema, stack_env
from dataplane.db.sql import q

QUEUE_TYPE = "surface-probe"
BACKLOG = 20_000
CLAIMS = 40
SKIPPED = 10  # preparation and Postgres' first custom plans
CASES = [(1, 32), (1, 4), (20, 32), (20, 4)]  # (clients, limit)
GROWN_BACKLOG = 100_000  # rows arriving after the session planned its claim at idle


def _fill(conn: psycopg.Connection[Any], rows: int, clients: int) -> None:
    conn.execute("TRUNCATE maestro_queues CASCADE")
    conn.execute(
        "INSERT INTO maestro_queues (type, dedupe_key, payload, client)"
        " SELECT %(t)s, 'k-' || g, jsonb_build_object('operation', 'echo', 'n', g),"
        " 'c' || (g %% %(n)s) FROM generate_series(1, %(rows)s) AS g",
        {"t": QUEUE_TYPE, "n": clients, "rows": rows},
    )
    conn.execute("VACUUM ANALYZE maestro_queues")


def _case(dsn: str, rows: int, clients: int, limit: int, claims: int) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        _fill(conn, rows, clients)
    # A new session: its plans are made by this case's claims only.
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        params = {"type": QUEUE_TYPE, "worker_id": "bench", "limit": limit, "lease_seconds": 30}
        took, ms = [], []
        for _ in range(claims):
            started = time.perf_counter()
            took.append(len(conn.execute(q("job_claim"), params, prepare=True).fetchall()))
            ms.append((time.perf_counter() - started) * 1000)
        plans = conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE '%%maestro%%claim%%' OR statement LIKE 'WITH RECURSIVE%%'"
        ).fetchall()
        shares = conn.execute(
            "SELECT count(DISTINCT client) AS clients, min(n) AS least, max(n) AS most FROM"
            " (SELECT client, count(*) AS n FROM maestro_queues"
            "  WHERE status = 'in_progress' GROUP BY client) AS s"
        ).fetchone()
    kept = ms[SKIPPED:] if len(ms) > SKIPPED else ms
    return {
        "clients": clients,
        "limit": limit,
        "claims": claims,
        "rows_per_claim": sorted(set(took)),
        "median_ms": round(statistics.median(kept), 3),
        "min_ms": round(min(kept), 3),
        "generic_plans": sum(p["generic_plans"] for p in plans),
        "custom_plans": sum(p["custom_plans"] for p in plans),
        "claimed_by_client": dict(shares) if shares else {},
    }


def _grown(dsn: str, backlog: int) -> dict[str, Any]:
    """A session plans its claim on an almost empty queue (12 idle claims of one row);
    then a backlog arrives with no ANALYZE since; 8 claims of 32 in one transaction."""
    params = {"type": QUEUE_TYPE, "worker_id": "bench", "limit": 32, "lease_seconds": 30}
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("TRUNCATE maestro_queues CASCADE")
        conn.execute("ANALYZE maestro_queues")
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        for i in range(12):
            conn.execute(
                "INSERT INTO maestro_queues (type, dedupe_key, payload)"
                " VALUES (%(t)s, %(k)s, '{}')",
                {"t": QUEUE_TYPE, "k": f"idle-{i}"},
            )
            conn.execute(q("job_claim"), params, prepare=True).fetchall()
        conn.execute(
            "INSERT INTO maestro_queues (type, dedupe_key, payload)"
            " SELECT %(t)s, 'k-' || g, '{}'::jsonb FROM generate_series(1, %(n)s) AS g",
            {"t": QUEUE_TYPE, "n": backlog},
        )
        ms = []
        with conn.transaction():
            for _ in range(8):
                started = time.perf_counter()
                conn.execute(q("job_claim"), params, prepare=True).fetchall()
                ms.append(round((time.perf_counter() - started) * 1000, 2))
            scans = conn.execute(
                "SELECT seq_scan, seq_tup_read FROM pg_stat_xact_user_tables"
                " WHERE relname = 'maestro_queues'"
            ).fetchone()
    return {"backlog": backlog, "claim_ms": ms, **(dict(scans) if scans else {})}


def run(rows: int, claims: int) -> dict[str, Any]:
    with scratch_server("claim_plan") as server:
        migrate_schema(stack_env(server.dsn))
        settings, machine = server_facts(server)
        cases = [_case(server.dsn, rows, c, limit, claims) for c, limit in CASES]
        grown = _grown(server.dsn, GROWN_BACKLOG if rows == BACKLOG else rows)
    return {
        "date": now_iso(),
        "machine": machine,
        "config": {"backlog": rows, "claims": claims, "skipped": SKIPPED, "server": settings},
        "cases": cases,
        "planned_at_idle": grown,
    }


def print_table(result: dict[str, Any]) -> None:
    headers = ["clients", "limit", "rows/claim", "median ms", "min ms", "generic", "custom"]
    rows = [
        [
            c["clients"],
            c["limit"],
            ",".join(map(str, c["rows_per_claim"])),
            c["median_ms"],
            c["min_ms"],
            c["generic_plans"],
            c["custom_plans"],
        ]
        for c in result["cases"]
    ]
    print(format_table(headers, rows))
    g = result["planned_at_idle"]
    print(
        f"\nplanned at idle, then {g['backlog']:,} rows (no ANALYZE): claims of 32 took"
        f" {g['claim_ms']} ms; sequential scans {g.get('seq_scan')}"
        f" ({g.get('seq_tup_read')} rows read)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    output_arg(parser, "claim_plan")
    args = parser.parse_args(argv)
    rows, claims = (2_000, 15) if args.quick else (BACKLOG, CLAIMS)
    saved = run_and_save(lambda: run(rows, claims), args.output, print_table, "interrupted")
    return 0 if saved is not None else 130


if __name__ == "__main__":
    sys.exit(main())
