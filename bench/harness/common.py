"""Shared benchmark plumbing: a scratch server/database, machine facts, percentiles,
tables, a script's run-and-save and housekeeping SQL.

Mostly plain blocking functions (they run before and after ``trio.run``). Child
processes and the CPU meter are in ``procs.py``, a stack's start-up in ``stack.py``,
the load client in ``client.py``, the demo client DB in ``demo.py``, the result
schema in ``result.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import trio
from psycopg import sql as pgsql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

#: Server settings recorded with every result (the ones that move queue numbers).
RECORDED_SETTINGS = (
    "server_version",
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "wal_sync_method",
    "commit_delay",
    "shared_buffers",
    "max_connections",
    "wal_level",
    "max_wal_size",
    "checkpoint_timeout",
    "autovacuum",
)

RESULTS_DIR = Path(__file__).resolve().parents[1] / "results"

T = TypeVar("T")


def with_dbname(dsn: str, dbname: str) -> str:
    params = conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return make_conninfo(**params)  # type: ignore[arg-type]


@dataclass
class Server:
    """Where the benchmark runs: its DSN and how it got there."""

    dsn: str
    kind: str  # "embedded" or "external"
    extra_settings: dict[str, str] = field(default_factory=dict)
    datadir: Path | None = None


@contextlib.contextmanager
def scratch_server(prefix: str) -> Iterator[Server]:
    """An embedded Postgres (durable defaults) or a scratch database on MAESTRO_QUEUES_URL.

    Everything started or created here is stopped/dropped on exit, including on
    KeyboardInterrupt (SIGINT) and SIGTERM (turned into KeyboardInterrupt).
    """
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        external = os.environ.get("MAESTRO_QUEUES_URL")
        if external:
            with scratch_database(external, f"{prefix}_{os.getpid()}") as server:
                yield server
        else:
            with _embedded_server() as server:
                yield server
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def _embedded_server() -> Iterator[Server]:
    from dataplane.dev.embedded import DEFAULT_SETTINGS, EmbeddedPostgres

    tmp = Path(tempfile.mkdtemp(prefix="dataplane-bench-"))
    pg = EmbeddedPostgres(tmp / "data")  # no FAST_SETTINGS: durable defaults
    try:
        pg.start()
        yield Server(
            dsn=pg.dsn(), kind="embedded", extra_settings=dict(DEFAULT_SETTINGS), datadir=tmp
        )
    finally:
        try:
            pg.destroy()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def scratch_database(admin_dsn: str, name: str) -> Iterator[Server]:
    """A new empty database ``name`` on ``admin_dsn``'s server, dropped on exit."""
    drop_database(admin_dsn, name)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(name)))
    try:
        yield Server(dsn=with_dbname(admin_dsn, name), kind="external")
    finally:
        drop_database(admin_dsn, name)


def drop_database(admin_dsn: str, name: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(
            pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pgsql.Identifier(name))
        )


def server_settings(dsn: str) -> dict[str, str]:
    """``SHOW`` of every recorded setting (plain blocking connection)."""
    out: dict[str, str] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in RECORDED_SETTINGS:
            row = conn.execute(pgsql.SQL("SHOW {}").format(pgsql.Identifier(name))).fetchone()
            out[name] = str(row[0]) if row else "?"
    return out


def server_facts(server: Server) -> tuple[dict[str, str], dict[str, Any]]:
    """The recorded server settings and the machine."""
    settings = server_settings(server.dsn)
    return settings, machine_info(settings.get("server_version", "?"))


def machine_info(server_version: str) -> dict[str, Any]:
    cpu_model = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    mem_total = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                kib = int(line.split()[1])
                mem_total = f"{kib / 1024 / 1024:.1f} GiB"
                break
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model,
        "memory": mem_total,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "postgres": server_version,
        "psycopg": psycopg.__version__,
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def percentile(samples: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (``pct`` in 0..100); NaN when empty."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    rank = max(1, min(len(ordered), round(pct / 100.0 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def summary_ms(samples_s: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/max/mean in milliseconds of samples given in seconds."""
    ms = [s * 1000.0 for s in samples_s]
    if not ms:
        return {"n": 0}
    return {
        "n": len(ms),
        "p50": round(percentile(ms, 50), 3),
        "p90": round(percentile(ms, 90), 3),
        "p99": round(percentile(ms, 99), 3),
        "max": round(max(ms), 3),
        "mean": round(statistics.fmean(ms), 3),
    }


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers], *[[_cell(v) for v in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


def describe(mapping: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in mapping.items())


# -- under Trio ---------------------------------------------------------------------


async def until_signalled(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``await fn(*args)``, turning SIGTERM into KeyboardInterrupt the Trio way (SIGINT
    already is), so that everything started is stopped on the way out."""

    async def watch_sigterm() -> None:
        with trio.open_signal_receiver(signal.SIGTERM) as signals:
            async for signum in signals:
                raise KeyboardInterrupt(f"signal {signum}")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_sigterm)
        result = await fn(*args)
        nursery.cancel_scope.cancel()
    return result


# -- housekeeping SQL ---------------------------------------------------------------


def close_to_public(dsn: str) -> None:
    """``dsn``'s queue database closed to PUBLIC, as README recommends. A role that does
    not own it leaves it as it is. Its own blocking connection."""
    from dataplane.db import q  # here: the witness process (this file) needs none of it

    try:
        _admin_sync(dsn, [q("database_close_to_public")])
    except psycopg.errors.InsufficientPrivilege as exc:
        print(f"note: queue DB left open to PUBLIC ({exc})")


def _admin_sync(dsn: str, statements: Sequence[str | tuple[str, Any]]) -> list[Any]:
    out: list[Any] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            stmt, params = (statement, None) if isinstance(statement, str) else statement
            cur = conn.execute(stmt, params)
            out.append(cur.fetchall() if cur.description else cur.rowcount)
    return out


async def admin_sql(
    dsn: str, *statements: str | tuple[str, Any], within: float = 60.0
) -> list[Any]:
    """Untimed housekeeping SQL (``stmt`` or ``(stmt, params)``) on its own blocking
    connection, in a worker thread: each statement's rows, or its row count."""
    with trio.fail_after(within):
        return await trio.to_thread.run_sync(_admin_sync, dsn, statements)


# -- notification witness ----------------------------------------------------
#
# A separate, minimal process that LISTENs on one channel with a blocking
# select() loop and stamps each notification with time.perf_counter() (Linux:
# CLOCK_MONOTONIC, one clock for every process of the host). It is the
# benchmark's independent "the commit is visible now" observation: Postgres
# sends a NOTIFY only once its transaction has committed.


class Witness:
    """Runs ``python -m bench.harness.common DSN CHANNEL COUNT SECONDS`` and collects its stamps."""

    def __init__(self, dsn: str, channel: str, count: int, seconds: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.harness.common", dsn, channel, str(count), str(seconds)],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=str(Path(__file__).resolve().parents[2]),
        )

    def wait_ready(self, timeout: float = 20.0) -> None:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if line.strip() != "ready":
            raise RuntimeError(f"notification witness did not start (got {line!r})")

    def stamps(self, timeout: float) -> list[tuple[float, float]]:
        """(perf_counter, wall clock) of each notification, as the witness saw it."""
        out, _ = self.proc.communicate(timeout=timeout)
        return [(p, w) for p, w in json.loads(out.strip().splitlines()[-1])]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _witness_main(dsn: str, channel: str, count: int, seconds: float) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends it (Ctrl-C hits the group)
    stamps: list[tuple[float, float]] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(channel)))
        print("ready", flush=True)
        pgconn = conn.pgconn
        fd = conn.fileno()
        deadline = time.monotonic() + seconds
        while len(stamps) < count and time.monotonic() < deadline:
            readable, _, _ = select.select([fd], [], [], 0.2)
            stamp = (time.perf_counter(), time.time())
            if not readable:
                continue
            pgconn.consume_input()
            while pgconn.notifies() is not None:
                stamps.append(stamp)
    print(json.dumps(stamps), flush=True)


if __name__ == "__main__":
    _witness_main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
