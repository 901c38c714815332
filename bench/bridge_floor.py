"""The cost floor of one database statement from the BFF's Trio code: CPU per
``SELECT 1`` through each way of reaching psycopg, on one connection.

* psycopg's stock ``AsyncConnection`` through trio-asyncio (one bridge crossing);
* :class:`~dataplane.db.waiting.LeanConnection` through trio-asyncio (what the
  plane's pools use: no loop timer per wait);
* the crossing alone (a no-op coroutine run on the loop);
* psycopg's async API driven from Trio itself (its waits on Trio's own I/O: no
  crossing; a measurement of what trio-asyncio costs, not a code path of the plane);
* sync psycopg, blocking (the floor of the driver and the server).

Process CPU (``time.process_time``) per statement, min and median of the rounds;
prints a table and writes ``bench/results/bridge_floor.json``.

    python bench/bridge_floor.py [--statements 3000] [--rounds 3]
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
from psycopg.abc import PQGen
from psycopg.waiting import READY_R, READY_W, WAIT_W

from bench.harness.common import (
    format_table,
    now_iso,
    output_arg,
    run_and_save,
    scratch_server,
    server_facts,
)
from dataplane.db import open_bridge
from dataplane.db.bridge import run_on_loop
from dataplane.db.waiting import LeanConnection


class TrioDriven(psycopg.AsyncConnection[Any]):
    """psycopg's async API with its waits on Trio's I/O (run from Trio, no loop)."""

    async def wait(
        self,
        gen: PQGen[Any],
        interval: float = 0.1,
        timeout: float | None = None,  # noqa: ASYNC109 (psycopg's signature)
    ) -> Any:
        fd = self.pgconn.socket
        try:
            state = next(gen)
            while True:
                if state & WAIT_W:
                    await trio.lowlevel.wait_writable(fd)
                    state = gen.send(READY_W)
                else:
                    await trio.lowlevel.wait_readable(fd)
                    state = gen.send(READY_R)
        except StopIteration as done:
            return done.value


async def _noop() -> None:
    return None


async def _per_statement(n: int, one: Callable[[], Awaitable[Any]]) -> float:
    for _ in range(100):
        await one()
    started = time.process_time()
    for _ in range(n):
        await one()
    return (time.process_time() - started) / n * 1e6


async def measure(dsn: str, n: int, rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    async with open_bridge() as loop:
        for _ in range(rounds):
            for name, cls in (
                ("stock AsyncConnection via trio-asyncio", psycopg.AsyncConnection),
                ("LeanConnection via trio-asyncio (the plane's)", LeanConnection),
            ):
                conn = await run_on_loop(loop, cls.connect(dsn, autocommit=True))

                async def select_1(conn: Any = conn) -> Any:
                    return await (await conn.execute("SELECT 1")).fetchall()

                out.setdefault(name, []).append(
                    await _per_statement(n, lambda c=select_1: run_on_loop(loop, c()))
                )
                await run_on_loop(loop, conn.close())
            out.setdefault("trio-asyncio crossing alone (no statement)", []).append(
                await _per_statement(n, lambda: run_on_loop(loop, _noop()))
            )
            driven = await run_on_loop(loop, TrioDriven.connect(dsn, autocommit=True))

            async def from_trio(driven: Any = driven) -> Any:
                return await (await driven.execute("SELECT 1")).fetchall()

            out.setdefault("psycopg async API driven from Trio (no crossing)", []).append(
                await _per_statement(n, from_trio)
            )
            await run_on_loop(loop, driven.close())
            with psycopg.connect(dsn, autocommit=True) as sync:

                async def blocking(sync: Any = sync) -> Any:
                    return sync.execute("SELECT 1").fetchall()

                out.setdefault("sync psycopg, blocking", []).append(
                    await _per_statement(n, blocking)
                )
    return out


def run(n: int, rounds: int) -> dict[str, Any]:
    with scratch_server("dataplane_floor") as server:
        _settings, machine = server_facts(server)
        raw = trio.run(measure, server.dsn, n, rounds)
    return {
        "date": now_iso(),
        "machine": machine,
        "statements_per_round": n,
        "rounds": rounds,
        "cpu_us_per_statement": {
            k: {"min": round(min(v), 1), "median": round(statistics.median(v), 1)}
            for k, v in raw.items()
        },
    }


def print_table(result: dict[str, Any]) -> None:
    rows = [[k, v["min"], v["median"]] for k, v in result["cpu_us_per_statement"].items()]
    print(format_table(["SELECT 1 through", "CPU us min", "median"], rows))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--statements", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    output_arg(parser, "bridge_floor")
    args = parser.parse_args()
    result = run_and_save(
        lambda: run(args.statements, args.rounds), args.output, print_table, "interrupted"
    )
    return 130 if result is None else 0


if __name__ == "__main__":
    sys.exit(main())
