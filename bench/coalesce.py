"""Identical concurrent requests: N at once -> exactly one execution, N answers.

Runs its own stack (embedded Postgres with durable defaults, unless
``MAESTRO_QUEUES_URL`` is set; one BFF ``hypercorn -k trio``; one probe worker),
fires ``--requests`` (default 500) identical ``probe.sleep {ms: 10000}`` POSTs (the job must outlive
the burst: a finished row does not absorb new requests) at
once, opens every returned stream, and counts: distinct jobs, executions (claims
of the job row: its ``dequeue_count``, and rows in the queue), and ``done``
answers. Prints a table; writes ``bench/results/coalesce.json``.

    python bench/coalesce.py [--requests 500]
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as ``python bench/coalesce.py``: the repository root first on sys.path (``bench``,
# and this checkout's ``dataplane``).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import json
import os
import time
from typing import Any

import httpx
import psycopg
import trio

from bench.harness.common import (
    RESULTS_DIR,
    format_table,
    machine_info,
    now_iso,
    scratch_server,
    server_settings,
)
from bench.harness.procs import WORKER_ARGV, children_scope
from bench.harness.stack import (
    BFF_OPTIONS,
    HOST,
    NOTIFY_SECRET,
    migrate_schema,
    start_hypercorn,
    wait_serving,
)
from dataplane.bff.auth import mint_token

JWT_SECRET = "bench-secret-that-is-long-enough-for-hs256"
TARGET_REQUESTS = 500
JOB_MS = 10_000  # longer than accepting the whole burst takes on this machine
PHASE_TIMEOUT = 120.0  # seconds for the whole burst, answers included
STREAM_ATTEMPTS = 2  # a stream whose pooled connection was closed reconnects once


async def burst(base: str, n: int) -> dict[str, Any]:
    headers = {
        "Authorization": f"Bearer {mint_token(JWT_SECRET, client='acme', sub='b', staff=True)}"
    }
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    bodies: list[dict[str, Any]] = []
    answers: list[dict[str, Any]] = []
    reconnects: list[int] = []
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as http:
        gate = trio.Event()

        async def one() -> None:
            await gate.wait()
            resp = await http.post(
                "/api/probe/q",
                json={"operation": "sleep", "params": {"ms": JOB_MS}},
                headers=headers,
            )
            resp.raise_for_status()
            body = resp.json()
            bodies.append(body)
            for attempt in range(STREAM_ATTEMPTS):
                try:
                    async with http.stream("GET", body["streamUrl"]) as stream:
                        async for line in stream.aiter_lines():
                            if line.startswith("data:") and '"status":"done"' in line:
                                answers.append(json.loads(line[5:]))
                                break
                    break
                except httpx.TransportError:
                    # A kept-alive connection closed under the client as it reused it:
                    # reconnect once, as a browser's EventSource does.
                    if attempt + 1 == STREAM_ATTEMPTS:
                        raise
                    reconnects.append(1)

        started = time.perf_counter()
        with trio.fail_after(PHASE_TIMEOUT):
            async with trio.open_nursery() as nursery:
                for _ in range(n):
                    nursery.start_soon(one)
                await trio.sleep(0.2)
                gate.set()
        elapsed = time.perf_counter() - started
    return {
        "requests": n,
        "accepted": len(bodies),
        "distinct_jobs": len({b["jobId"] for b in bodies}),
        "coalesced_answers": sum(b["coalesced"] for b in bodies),
        "done_answers": len(answers),
        "stream_reconnects": len(reconnects),
        "elapsed_s": round(elapsed, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=TARGET_REQUESTS)
    args = parser.parse_args(argv)
    with (
        scratch_server("dataplane_bench_coalesce") as server,
        children_scope("dataplane-coalesce-logs-") as kids,
    ):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DATAPLANE_", "SURFACE_"))}
        env.update(
            MAESTRO_QUEUES_URL=server.dsn,
            DATAPLANE_JWT_SECRET=JWT_SECRET,
            DATAPLANE_NOTIFY_SECRET=NOTIFY_SECRET,
            DATAPLANE_PROBE="1",
            SURFACE_QUEUE_TYPE="surface-probe",
        )
        migrate_schema(env)

        async def run() -> dict[str, Any]:
            worker = kids.start("worker", WORKER_ARGV, env)
            bff = await start_hypercorn(
                kids,
                "bff",
                "dataplane.app:app",
                env,
                options=("--backlog", "2048", *BFF_OPTIONS),
                within=60,
            )
            await wait_serving([worker], within=60)
            return await burst(f"http://{HOST}:{bff.port}", args.requests)

        result = trio.run(run)
        with psycopg.connect(server.dsn) as conn:
            rows = conn.execute(
                "SELECT count(*), max(dequeue_count) FROM maestro_queues"
            ).fetchone()
        assert rows is not None
        result["queue_rows"], result["executions"] = rows[0], rows[1]
        settings = server_settings(server.dsn)
    ok = (
        result["distinct_jobs"] == 1
        and result["executions"] == 1
        and (result["done_answers"] == args.requests)
    )
    out = {
        **result,
        "target": f"{args.requests} at once -> exactly 1 execution, all answered",
        "met": ok,
        "date": now_iso(),
        "machine": machine_info(settings.get("server_version", "?")),
        "config": {
            "server": server.kind,
            "server_settings": settings,
            "operation": f"probe.sleep {JOB_MS} ms",
        },
    }
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "coalesce.json").write_text(json.dumps(out, indent=2) + "\n")
    print(format_table(["metric", "value"], [[k, result[k]] for k in result]))
    print(f"\n{'MET' if ok else 'NOT MET'}: {out['target']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
