"""Worker benchmark: drain rate, idle CPU and per-operation execution time of real workers.

Run from the repository root::

    python bench/worker.py            # own embedded Postgres (temp dir), durable defaults
    MAESTRO_QUEUES_URL=... python bench/worker.py   # scratch dbs dataplane_bench_worker_<pid>*
    python bench/worker.py --quick    # smoke run, small counts

Every worker is a real ``python -m dataplane worker`` child process, configured by
environment variables only, as in production. Phases (bounded in count and time,
well under five minutes in all):

* drain: ``drain_jobs`` distinct ``probe.echo`` jobs (real envelopes and dedupe
  keys, bulk-loaded with COPY, untimed) are drained by one ``surface-probe``
  worker, once per ``DATAPLANE_CONCURRENCY`` value. The rate is jobs /
  (last ``completed_at`` - first ``claimed_at``), both server clock, so worker
  start-up is not charged. Beside it: worker and Postgres CPU over the drain and
  server transactions per job. The queue-level figure of ``bench/results/queue.json``
  (claim/complete loop without a worker) is shown for reference;
* idle CPU: a worker on an empty queue, settled ``idle_settle_s``, then its
  utime+stime (``/proc/<pid>/stat``) over ``idle_sample_s``;
* operations: one worker per demo surface (users, learnerviews, accounting,
  skills) over the seeded demo client DB (``create_demo_db``, read-only DSN).
  For every operation, jobs are enqueued one at a time (the real ``job_enqueue``
  statement), each with distinct params (or a distinct scope) so neither the TTL
  cache nor transport coalescing answers it; the next goes once the previous
  one's done notify arrives. Execution = ``completed_at - claimed_at`` of the row
  (server clock: from the claim statement's start to the completion statement's
  start). Warm-up jobs are excluded. Then the same request is repeated after it
  completed, for a cacheable operation, to time a cache hit (``cache: "hit"``).

Prints tables and writes ``bench/results/worker.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as ``python bench/worker.py``: the repository root first on sys.path (``bench``,
# and this checkout's ``dataplane``).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import contextlib
import dataclasses
import datetime as dt
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
import trio
from dataplane_lms.demo_db import create_demo_db
from psycopg import sql as pgsql

from bench.harness.common import (
    RESULTS_DIR,
    Server,
    describe,
    format_table,
    now_iso,
    output_arg,
    percentile,
    run_and_save,
    scratch_server,
    server_facts,
    summary_ms,
    with_dbname,
)
from bench.harness.demo import DemoIds, demo_db_scope, demo_ids
from bench.harness.procs import (
    CLK_TCK,
    WORKER_ARGV,
    Child,
    Children,
    children_cpu,
    children_scope,
    cpu_seconds,
    postmaster_pid,
    wait_serving_blocking,
)
from bench.harness.stack import NOTIFY_SECRET
from dataplane.db import DatabaseConfig, close_to_public, open_bridge, open_database, q
from dataplane.envelope import Auth, Envelope
from dataplane.queue import MAX_DEQUEUES, done_channel, to_json
from dataplane.queue.migrations import migrate

PROBE_TYPE = "surface-probe"
DEMO_SURFACES = ("users", "learnerviews", "accounting", "skills")
ACME_BRANCHES = ("acme-east", "acme-north", "acme-south", "acme-west")
STAFF = Auth(client="acme", user_id="1", actor_email="bench@acme.test", staff=True, branches=("*",))
# The same branches spelt out: another scope key (so another dedupe/cache key), same rows.
STAFF_EXPLICIT = Auth(
    client="acme", user_id="1", actor_email="bench@acme.test", staff=True, branches=ACME_BRANCHES
)
TARGETS = {
    "drain_jobs_per_s": 3500,
    "drain_default_jobs_per_s": 6000,  # issue #15
    "drain_default_cpu_us_per_job": 100,  # issue #15
    "idle_cpu_percent": 1.0,
}
WORKER_STOP_S = 15.0


@dataclass(frozen=True)
class Plan:
    drain_jobs: int = 20_000
    # None: DATAPLANE_CONCURRENCY unset, the worker's own default (the figure issue #15 holds)
    drain_concurrency: tuple[int | None, ...] = (None, 8, 32, 128)
    drain_repeats: int = 2  # runs per concurrency (the host is shared: best run counts)
    drain_cap_s: float = 45.0  # per run
    idle_settle_s: float = 5.0
    idle_sample_s: float = 30.0
    herd_workers: int = 4
    herd_window_s: float = 8.0  # quiet window, then the same with enqueues
    herd_every_s: float = 0.2  # one job per period: every worker idle between them
    op_jobs: int = 100  # measured jobs per operation
    op_warmup: int = 3  # excluded jobs per operation (first connections, plans)
    op_cap_s: float = 25.0  # per operation
    cache_hit_repeats: int = 20
    cache_ops: tuple[tuple[str, str], ...] = (("users", "list"), ("skills", "coverage"))

    @classmethod
    def quick(cls) -> Plan:
        return cls(
            drain_jobs=2_000,
            drain_concurrency=(None, 32),
            drain_repeats=1,
            drain_cap_s=15.0,
            idle_settle_s=1.0,
            idle_sample_s=5.0,
            herd_window_s=4.0,
            op_jobs=10,
            op_warmup=1,
            op_cap_s=10.0,
            cache_hit_repeats=3,
        )


# -- processes -----------------------------------------------------------


def sched_seconds(pid: int) -> tuple[float, float] | None:
    """(on-CPU, waiting-on-a-run-queue) seconds of all threads, from /proc/<pid>/task/*/schedstat.

    Run-queue wait is time the process was runnable but another task had the CPU
    (here: mostly Postgres backends on the same few cores).
    """
    run = wait = 0.0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = (task / "schedstat").read_text().split()
                run += int(fields[0]) / 1e9
                wait += int(fields[1]) / 1e9
    except OSError:
        return None
    return run, wait


class ServerCpu:
    """CPU used by the embedded Postgres (postmaster + its children) between two samples.

    Backends that exit between the samples are lost; the phases sample while
    their connections are still open. None for an external server.
    """

    def __init__(self, server: Server, *, precise: bool = False) -> None:
        self.postmaster = postmaster_pid(server)
        self.precise = precise  # schedstat nanoseconds instead of 10 ms utime+stime ticks

    def sample(self) -> dict[int, float] | None:
        if self.postmaster is None:
            return None
        out = children_cpu(self.postmaster)
        own = cpu_seconds(self.postmaster)
        if own is not None:
            out[self.postmaster] = own
        if self.precise:
            return {pid: _oncpu_seconds(pid) for pid in out}
        return out

    @staticmethod
    def delta(before: dict[int, float] | None, after: dict[int, float] | None) -> float | None:
        if before is None or after is None:
            return None
        return sum(v - before.get(pid, 0.0) for pid, v in after.items())


class Workers:
    """Starts ``python -m dataplane worker`` children configured by environment only."""

    def __init__(self, kids: Children, queue_dsn: str) -> None:
        self.kids = kids
        self.queue_dsn = queue_dsn

    def start(self, name: str, queue_type: str, **env: str) -> Child:
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("MAESTRO_", "DATAPLANE_", "CAPCOM_"))
            and k not in ("SURFACE_QUEUE_TYPE", "CLIENT_DB_URL")
        }
        full = {
            "MAESTRO_QUEUES_URL": self.queue_dsn,
            "SURFACE_QUEUE_TYPE": queue_type,
            "DATAPLANE_SHUTDOWN_GRACE_SECONDS": "5",
            "DATAPLANE_NOTIFY_SECRET": NOTIFY_SECRET,  # small answers ride sealed, as deployed
            **env,
        }
        return self.kids.start(name, WORKER_ARGV, {**base, **full}, raise_nofile=False)

    @staticmethod
    def stop(worker: Child) -> int | None:
        """SIGTERM (graceful), then SIGKILL after WORKER_STOP_S; returns the exit code."""
        return worker.stop(WORKER_STOP_S)


class Profiler:
    """py-spy sampling one process (``pip install py-spy``) until :meth:`stop`.

    Writes ``<path>.txt``, the top 20 functions by own and by total samples, from
    py-spy's collapsed stacks (one sampler: a second, for a flame graph, would double
    the load on the host the worker shares).
    """

    def __init__(self, pid: int, path: Path) -> None:
        spy = shutil.which("py-spy")
        if spy is None:
            raise RuntimeError("--profile needs py-spy on PATH (pip install py-spy)")
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        common = [spy, "record", "--pid", str(pid), "--rate", "250", "--nonblocking"]
        self.procs = [
            subprocess.Popen(
                [*common, "--format", "raw", "-o", str(path.with_suffix(".raw"))],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        ]
        time.sleep(0.5)  # attached (py-spy has no readiness signal)

    def stop(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGINT)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        raw = self.path.with_suffix(".raw")
        if raw.exists():
            self.path.with_suffix(".txt").write_text(top_table(raw.read_text()))
            raw.rename(raw.with_suffix(".collapsed"))


def top_table(collapsed: str, n: int = 20) -> str:
    """Top ``n`` frames by own and by total samples, from collapsed stacks."""
    own: dict[str, int] = {}
    total: dict[str, int] = {}
    samples = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        samples += count
        frames = stack.split(";")
        own[frames[-1]] = own.get(frames[-1], 0) + count
        for frame in set(frames):
            total[frame] = total.get(frame, 0) + count
    out = [f"{samples} samples", ""]
    for title, table in (("own", own), ("total (inclusive)", total)):
        out.append(f"top {n} by {title}:")
        for frame, count in sorted(table.items(), key=lambda kv: -kv[1])[:n]:
            out.append(f"{100 * count / max(samples, 1):6.1f}%  {frame}")
        out.append("")
    return "\n".join(out)


# -- setup ---------------------------------------------------------------


async def _setup(queue_dsn: str, demo_name: str) -> str:
    """Migrate the queue DB, build the demo client DB; return its read-only DSN."""
    async with open_bridge():
        cfg = DatabaseConfig(queue_dsn, pool_size=1, application_name="bench-worker")
        async with open_database(cfg) as db:
            await migrate(db)
            await close_to_public(db)  # as README recommends (the answer notify)
        ro_dsn: str = await create_demo_db(
            queue_dsn,
            name=demo_name,
            progress=lambda line: print(f"  demo-db: {line}", flush=True),
        )
    return ro_dsn


def _xact_commits(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return int(row[0]) if row else 0


# -- phase 1: drain ------------------------------------------------------


def _fill_probe(dsn: str, n: int) -> None:
    """``n`` pending probe.echo jobs with distinct params (COPY; untimed)."""
    tag = uuid.uuid4().hex[:8]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE maestro_queues, surface_result_blobs")
        with (
            conn.cursor() as cur,
            cur.copy("COPY maestro_queues (type, dedupe_key, payload) FROM STDIN") as copy,
        ):
            for i in range(n):
                env = Envelope("probe", "echo", 1, {"value": f"{tag}-{i}"}, STAFF)
                copy.write_row((PROBE_TYPE, env.dedupe_key, to_json(env.to_json())))
        conn.execute("VACUUM ANALYZE maestro_queues")
        conn.execute("CHECKPOINT")


def _drain_run(
    server: Server,
    workers: Workers,
    concurrency: int | None,
    plan: Plan,
    profile: Path | None = None,
) -> dict[str, Any]:
    _fill_probe(server.dsn, plan.drain_jobs)
    pg_cpu = ServerCpu(server)
    label = "default" if concurrency is None else str(concurrency)
    env = {"DATAPLANE_PROBE": "1"}
    if concurrency is not None:
        env["DATAPLANE_CONCURRENCY"] = str(concurrency)
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        started = time.perf_counter()
        worker = workers.start(f"drain-c{label}", PROBE_TYPE, **env)
        spy: Profiler | None = None
        try:
            wait_serving_blocking(worker)
            if profile is not None:
                spy = Profiler(worker.pid, profile)
            ready = time.perf_counter()
            cpu0, pg0, sched0 = cpu_seconds(worker.pid), pg_cpu.sample(), sched_seconds(worker.pid)
            deadline = ready + plan.drain_cap_s
            done = 0
            count = "SELECT count(*) FROM maestro_queues WHERE type = %s AND status = 'done'"
            while time.perf_counter() < deadline:
                row = conn.execute(count, (PROBE_TYPE,)).fetchone()
                done = int(row[0]) if row else 0
                if done >= plan.drain_jobs:
                    break
                if worker.proc.poll() is not None:
                    raise RuntimeError(f"drain worker exited:\n{worker.tail()}")
                time.sleep(0.05)
            finished = time.perf_counter()
            cpu1, pg1, sched1 = cpu_seconds(worker.pid), pg_cpu.sample(), sched_seconds(worker.pid)
        finally:
            if spy is not None:
                spy.stop()
            exit_code = workers.stop(worker)
        row = conn.execute(
            """
            SELECT count(*) FILTER (WHERE status = 'done'),
                   count(*) FILTER (WHERE status = 'done' AND result ? 'error'),
                   count(*) FILTER (WHERE status = 'poison'),
                   count(*) FILTER (WHERE dequeue_count > 1),
                   extract(epoch FROM max(completed_at) FILTER (WHERE status = 'done')
                                     - min(claimed_at)),
                   count(DISTINCT claimed_at),
                   count(DISTINCT completed_at)
            FROM maestro_queues WHERE type = %s
            """,
            (PROBE_TYPE,),
        ).fetchone()
        cycles = _cycles(conn)
    assert row is not None
    n_done, n_error, n_poison, n_retried, span, claim_txns, complete_txns = row
    span_s = float(span or 0.0)
    observed = finished - ready
    runq_wait = (sched1[1] - sched0[1]) if sched0 is not None and sched1 is not None else None
    worker_cpu = (cpu1 - cpu0) if cpu0 is not None and cpu1 is not None else None
    pg_cpu_s = ServerCpu.delta(pg0, pg1)
    return {
        "concurrency": label,
        "jobs": plan.drain_jobs,
        "done": int(n_done),
        "errors": int(n_error),
        "poison": int(n_poison),
        "retried": int(n_retried),
        "capped": int(n_done) < plan.drain_jobs,
        "first_claim_to_last_complete_s": round(span_s, 3),
        "jobs_per_s": round(int(n_done) / span_s, 1) if span_s > 0 else 0.0,
        "ready_to_all_done_observed_s": round(observed, 3),
        "spawn_to_ready_s": round(ready - started, 3),
        "claim_statements": int(claim_txns),
        "jobs_per_claim": round(int(n_done) / max(int(claim_txns), 1), 1),
        # one now() per statement: distinct values count claim / completion statements
        "completion_statements": int(complete_txns),
        "jobs_per_completion": round(int(n_done) / max(int(complete_txns), 1), 1),
        "worker_cpu_pct": (
            round(100 * worker_cpu / observed, 1) if worker_cpu is not None else None
        ),
        "worker_cpu_us_per_job": (
            round(1e6 * worker_cpu / int(n_done), 1) if worker_cpu is not None and n_done else None
        ),
        "worker_runqueue_wait_pct": (
            round(100 * runq_wait / observed, 1) if runq_wait is not None else None
        ),
        "postgres_cpu_pct": round(100 * pg_cpu_s / observed, 1) if pg_cpu_s is not None else None,
        **cycles,
        "worker_exit_code": exit_code,
    }


def _cycles(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Mean claim cycle from the rows: claim statement -> last completion statement before
    the next claim (batch executed and committed) -> next claim statement (server clock)."""

    def times(column: str) -> list[float]:
        stmt = pgsql.SQL(
            "SELECT DISTINCT extract(epoch FROM {c})::float8 FROM maestro_queues "
            "WHERE type = %s AND status = 'done' ORDER BY 1"
        ).format(c=pgsql.Identifier(column))
        return [float(r[0]) for r in conn.execute(stmt, (PROBE_TYPE,)).fetchall()]

    claims, completions = times("claimed_at"), times("completed_at")
    work: list[float] = []
    gap: list[float] = []
    k = 0
    for start, nxt in itertools.pairwise(claims):
        last = None
        while k < len(completions) and completions[k] < nxt:
            last = completions[k]
            k += 1
        if last is not None and last >= start:
            work.append(last - start)
            gap.append(nxt - last)
    if not work:
        return {}
    return {
        "cycle_ms_mean": round(1000 * (claims[-1] - claims[0]) / (len(claims) - 1), 3),
        "claim_to_last_completion_ms_mean": round(1000 * sum(work) / len(work), 3),
        "last_completion_to_next_claim_ms_mean": round(1000 * sum(gap) / len(gap), 3),
    }


def phase_drain(
    server: Server, workers: Workers, plan: Plan, profile: Path | None = None
) -> list[dict[str, Any]]:
    """Every concurrency ``drain_repeats`` times; ``profile``: py-spy over the first run."""
    table = []
    for concurrency in plan.drain_concurrency:
        for repeat in range(plan.drain_repeats):
            spy, profile = profile, None
            row = {"run": repeat + 1, **_drain_run(server, workers, concurrency, plan, spy)}
            table.append(row)
            _print_drain_row(row)
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE maestro_queues, surface_result_blobs")
    return table


def _print_drain_row(row: dict[str, Any]) -> None:
    print(
        f"  drain concurrency={row['concurrency']:>7} run {row['run']}: "
        f"{row['jobs_per_s']:>8,.0f} jobs/s ({row['done']} in "
        f"{row['first_claim_to_last_complete_s']:.2f}s, worker CPU {row['worker_cpu_pct']}% "
        f"(run-queue wait {row['worker_runqueue_wait_pct']}%), "
        f"postgres CPU {row['postgres_cpu_pct']}%{', CAPPED' if row['capped'] else ''})",
        flush=True,
    )


# -- phase 2: idle CPU ---------------------------------------------------


def phase_idle(server: Server, workers: Workers, plan: Plan) -> dict[str, Any]:
    pg_cpu = ServerCpu(server)
    worker = workers.start("idle", PROBE_TYPE, DATAPLANE_PROBE="1")
    try:
        wait_serving_blocking(worker)
        time.sleep(plan.idle_settle_s)
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            t0, cpu0, pg0, x0 = (
                time.perf_counter(),
                cpu_seconds(worker.pid),
                pg_cpu.sample(),
                _xact_commits(conn),
            )
            time.sleep(plan.idle_sample_s)
            t1, cpu1, pg1, x1 = (
                time.perf_counter(),
                cpu_seconds(worker.pid),
                pg_cpu.sample(),
                _xact_commits(conn),
            )
    finally:
        exit_code = workers.stop(worker)
    if cpu0 is None or cpu1 is None:
        raise RuntimeError(f"idle worker vanished:\n{worker.tail()}")
    elapsed = t1 - t0
    pg_s = ServerCpu.delta(pg0, pg1)
    return {
        "idle_cpu_percent": round(100 * (cpu1 - cpu0) / elapsed, 3),
        "cpu_seconds": round(cpu1 - cpu0, 3),
        "sample_s": round(elapsed, 2),
        "settle_s": plan.idle_settle_s,
        "clock_tick_s": round(1 / CLK_TCK, 4),
        # the sampler's own two snapshots are two transactions of these
        "server_xacts_per_s": round((x1 - x0 - 1) / elapsed, 2),
        "postgres_cpu_percent": round(100 * pg_s / elapsed, 3) if pg_s is not None else None,
        "worker_exit_code": exit_code,
    }


# -- phase 2b: thundering herd --------------------------------------------


class StatementLog:
    """Statements as the server runs them: the embedded server's own log, with
    ``log_min_duration_statement = 0`` for as long as this is open.

    ``pg_stat_database.xact_commit`` cannot count a few statements per window: since
    PostgreSQL 15 a backend flushes its counters at most once a second and an idle one
    only after a 10 s timeout, so counts move between windows of a few seconds (the
    herd read 5.7 "extra claims" per enqueue that the log shows are not there). An
    external server (no log to read) falls back to the transaction count.
    """

    CLAIM = "WITH RECURSIVE clients"  # job_claim's first words
    _LINE = re.compile(
        r"^\d+ dataplane-worker: LOG:  duration: [\d.]+ ms  (?:statement|execute [^:]*): (.*)$",
        re.M,
    )

    def __init__(self, server: Server) -> None:
        self.server = server
        self.path = server.datadir / "data" / "server.log" if server.datadir else None

    def __enter__(self) -> StatementLog | None:
        if self.server.kind != "embedded" or self.path is None or not self.path.exists():
            return None
        self._settings(
            "ALTER SYSTEM SET log_min_duration_statement = 0",
            "ALTER SYSTEM SET log_line_prefix = '%p %a: '",
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self._settings(
            "ALTER SYSTEM RESET log_min_duration_statement", "ALTER SYSTEM RESET log_line_prefix"
        )

    def _settings(self, *statements: str) -> None:
        with psycopg.connect(self.server.dsn, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)  # type: ignore[call-overload]  # bench literals
            conn.execute("SELECT pg_reload_conf()")
        time.sleep(0.5)  # the reload reaches every backend

    def offset(self) -> int:
        assert self.path is not None
        return self.path.stat().st_size

    def worker_statements(self, start: int, end: int) -> dict[str, int]:
        """The workers' statements between two offsets: claims and the others."""
        assert self.path is not None
        with self.path.open("rb") as f:
            f.seek(start)
            text = f.read(end - start).decode(errors="replace")
        found = [m.group(1) for m in self._LINE.finditer(text)]
        claims = sum(line.startswith(self.CLAIM) for line in found)
        return {"claims": claims, "other": len(found) - claims}


def _herd_window(
    server: Server,
    procs: list[Child],
    seconds: float,
    enqueue_every: float | None,
    statements: StatementLog | None = None,
) -> dict[str, Any]:
    """Server transactions and the workers' CPU over one window; with ``enqueue_every``,
    one probe.echo job enqueued (real statement) and awaited (done notify) per period.
    CPU is read from schedstat (nanoseconds): the per-enqueue difference is a few ms in
    windows of hundreds, which 10 ms utime ticks summed over ~20 processes would blur."""
    pg_cpu = ServerCpu(server, precise=True)
    tag = uuid.uuid4().hex[:8]
    with (
        psycopg.connect(server.dsn, autocommit=True) as conn,
        psycopg.connect(server.dsn, autocommit=True) as listen,
    ):
        listen.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(done_channel(PROBE_TYPE))))
        x0, pg0 = _xact_commits(conn), pg_cpu.sample()
        log0 = statements.offset() if statements else 0
        cpu0 = [_oncpu_seconds(p.pid) for p in procs]
        wake0 = [_wakeups(p.pid) for p in procs]
        t0 = time.perf_counter()
        jobs = 0
        while time.perf_counter() - t0 < seconds:
            if enqueue_every is None:
                time.sleep(min(0.5, seconds - (time.perf_counter() - t0)))
                continue
            env = Envelope("probe", "echo", 1, {"value": f"{tag}-{jobs}"}, STAFF)
            params = {
                "type": PROBE_TYPE,
                "dedupe_key": env.dedupe_key,
                "payload": to_json(env.to_json()),
                "max_dequeues": MAX_DEQUEUES,
                "client": "acme",
            }
            row = conn.execute(q("job_enqueue"), params).fetchone()
            assert row is not None
            key, next_at = str(row[0]), time.perf_counter() + enqueue_every
            seen = False
            while not seen and time.perf_counter() < next_at + 5:
                for note in listen.notifies(timeout=5, stop_after=1):
                    # the job id leads the payload (a small answer may follow it)
                    seen = seen or note.payload[:36] == key
            jobs += 1
            time.sleep(max(0.0, next_at - time.perf_counter()))
        elapsed = time.perf_counter() - t0
        cpu1 = [_oncpu_seconds(p.pid) for p in procs]
        wake1 = [_wakeups(p.pid) for p in procs]
        x1, pg1 = _xact_commits(conn), pg_cpu.sample()
        if statements:
            time.sleep(0.2)  # the last lines reach the file
            logged = statements.worker_statements(log0, statements.offset())
    return {
        "seconds": elapsed,
        "jobs": jobs,
        "xacts": x1 - x0 - 1,  # the sampler's own second snapshot
        "logged": logged if statements else None,
        "worker_cpu_s": sum(cpu1) - sum(cpu0),
        "wakeups": [b - a for a, b in zip(wake0, wake1, strict=True)],
        "postgres_cpu_s": ServerCpu.delta(pg0, pg1) or 0.0,
    }


def _oncpu_seconds(pid: int) -> float:
    """On-CPU time of every thread of ``pid`` (schedstat, ns); 0 when it is gone."""
    total = 0
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
    return total / 1e9


def _wakeups(pid: int) -> int:
    """Times the process's threads were switched out, voluntarily or not (/proc): each
    wake-up of an idle process costs at least one."""
    total = 0
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/task/{task}/status").read_text().splitlines():
                    if "ctxt_switches:" in line:  # voluntary_ and nonvoluntary_
                        total += int(line.split(":", 1)[1])
    return total


def _herd_run(server: Server, workers: Workers, plan: Plan, count: int) -> dict[str, Any]:
    """``count`` idle probe workers (default settings): a quiet window, then the same
    length with jobs enqueued one at a time; per enqueue, what it added."""
    procs = [
        workers.start(f"herd-{count}-{i}", PROBE_TYPE, DATAPLANE_PROBE="1") for i in range(count)
    ]
    try:
        for proc in procs:
            wait_serving_blocking(proc)
        time.sleep(plan.idle_settle_s)
        with StatementLog(server) as log:
            quiet = _herd_window(server, procs, plan.herd_window_s, None, log)
            busy = _herd_window(server, procs, plan.herd_window_s, plan.herd_every_s, log)
    finally:
        for proc in procs:
            workers.stop(proc)
    scale = busy["seconds"] / quiet["seconds"]
    jobs = max(busy["jobs"], 1)
    statements = (busy["xacts"] - quiet["xacts"] * scale) / jobs
    if busy["logged"] is not None:  # exact: the server's log of the workers' statements
        claims = (busy["logged"]["claims"] - quiet["logged"]["claims"] * scale) / jobs
        other = (busy["logged"]["other"] - quiet["logged"]["other"] * scale) / jobs
        counted = "server log"
    else:  # the enqueue and the completion are one each; the rest are taken as claims
        claims, other, counted = statements - 2, 0.0, "xact_commit (approximate)"
    # Per worker, the wake-ups the enqueues added: the busiest worker is the one that
    # ran the jobs; the others are the herd (0 when the enqueue woke only one).
    woken = sorted(
        ((b - q * scale) / jobs for q, b in zip(quiet["wakeups"], busy["wakeups"], strict=True)),
        reverse=True,
    )
    return {
        "workers": count,
        "jobs": busy["jobs"],
        "transactions_per_enqueue": round(statements, 2),
        "claims_counted_from": counted,
        "claims_per_enqueue": round(claims, 2),  # any follow-up poll after work included
        "other_worker_statements_per_enqueue": round(other, 2),  # the completion's among them
        "worker_cpu_us_per_enqueue": round(
            1e6 * (busy["worker_cpu_s"] - quiet["worker_cpu_s"] * scale) / jobs, 1
        ),
        "postgres_cpu_us_per_enqueue": round(
            1e6 * (busy["postgres_cpu_s"] - quiet["postgres_cpu_s"] * scale) / jobs, 1
        ),
        "idle_cpu_percent_per_worker": round(
            100 * quiet["worker_cpu_s"] / quiet["seconds"] / count, 3
        ),
        "wakeups_per_enqueue_busiest_worker": round(woken[0], 2),
        "wakeups_per_enqueue_other_workers": [round(w, 2) for w in woken[1:]],
    }


def phase_herd(server: Server, workers: Workers, plan: Plan) -> dict[str, Any]:
    """One idle worker, then ``herd_workers``, jobs enqueued one at a time (``herd_every_s``).

    Claims per enqueue count every claim statement the enqueue brought about, a
    follow-up poll after work included (the backoff restarts at 100 ms on work while a
    worker does not hear the enqueue notify), so the herd is the difference: the claims
    (and CPU) the other idle workers added.
    """
    one = _herd_run(server, workers, plan, 1)
    many = _herd_run(server, workers, plan, plan.herd_workers)
    jobs_cpu = max(one["worker_cpu_us_per_enqueue"] + one["postgres_cpu_us_per_enqueue"], 1.0)
    extra_cpu = many["worker_cpu_us_per_enqueue"] + many["postgres_cpu_us_per_enqueue"] - jobs_cpu
    return {
        "workers": plan.herd_workers,
        "enqueue_every_s": plan.herd_every_s,
        "one_worker": one,
        "many_workers": many,
        "extra_claims_per_enqueue": round(
            many["claims_per_enqueue"] - one["claims_per_enqueue"], 2
        ),
        "extra_cpu_us_per_enqueue": round(extra_cpu, 1),
        "extra_cpu_percent": round(100 * extra_cpu / jobs_cpu, 1),
        # the workers that did not run the job: their wake-ups per enqueue, summed
        "herd_wakeups_per_enqueue": round(sum(many["wakeups_per_enqueue_other_workers"]), 2),
    }


# -- phase 3: per-operation execution ------------------------------------


Request = tuple[dict[str, Any], Auth]


def _spread(values: Sequence[Any], count: int) -> list[Any]:
    """``count`` distinct values spread evenly over ``values`` (all of them if fewer)."""
    if count >= len(values):
        return list(values)
    step = len(values) / count
    return [values[int(i * step)] for i in range(count)]


def _no_none(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


def _requests(ids: DemoIds, count: int) -> dict[tuple[str, str], list[Request]]:
    """``count`` distinct requests per operation (distinct dedupe keys), valid for acme."""
    branches: list[str | None] = [None, *ACME_BRANCHES]
    users = _spread(ids.users, count)
    invoices = _spread(ids.invoices, count)
    statuses: list[str | None] = [None, "enrolled", "in_progress", "completed", "failed"]
    inv_statuses: list[str | None] = [None, "draft", "sent", "paid", "overdue"]
    day0 = dt.date(2024, 2, 1)
    coverage = [
        (_no_none({"branch": b, "category": c}), auth)
        for auth in (STAFF, STAFF_EXPLICIT)
        for c in [None, *ids.skill_categories]
        for b in branches
    ]
    r = range(count)
    return {
        ("users", "list"): [
            (
                _no_none(
                    {
                        "limit": (10, 25, 50)[i % 3],
                        "offset": (i * 37) % 1000,
                        "branch": branches[i % 5],
                    }
                ),
                STAFF,
            )
            for i in r
        ],
        ("users", "detail"): [({"userId": u}, STAFF) for u in users],
        ("learnerviews", "branchSummary"): [
            (
                _no_none(
                    {
                        "since": (day0 + dt.timedelta(days=3 * i)).isoformat(),
                        "branch": branches[i % 5],
                    }
                ),
                STAFF,
            )
            for i in r
        ],
        ("learnerviews", "courseSummary"): [
            (
                _no_none(
                    {
                        "limit": 1 + i % 200,
                        "branch": branches[i % 5],
                        "category": ([None, *ids.course_categories])[
                            (i // 5) % (1 + len(ids.course_categories))
                        ],
                    }
                ),
                STAFF,
            )
            for i in r
        ],
        ("learnerviews", "learner"): [
            (_no_none({"userId": u, "status": statuses[i % 5]}), STAFF) for i, u in enumerate(users)
        ],
        ("accounting", "invoices"): [
            (
                _no_none(
                    {
                        "limit": (10, 25, 50)[i % 3],
                        "offset": (i * 13) % 1000,
                        "status": inv_statuses[i % 5],
                        "branch": branches[(i // 5) % 5],
                    }
                ),
                STAFF,
            )
            for i in r
        ],
        ("accounting", "invoice"): [({"invoiceId": v}, STAFF) for v in invoices],
        ("accounting", "invoicePdf"): [({"invoiceId": v}, STAFF) for v in invoices],
        ("skills", "coverage"): coverage[:count],
        ("skills", "profile"): [({"userId": u}, STAFF) for u in users],
    }


@dataclass
class _Sample:
    job_id: uuid.UUID
    roundtrip_s: float  # enqueue call start -> done notify seen (client clock)


@dataclass
class Submitter:
    """Enqueues with the real statement on one connection; awaits done notifies on another."""

    dsn: str
    seen: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.conn = psycopg.connect(self.dsn, autocommit=True)
        self.listen = psycopg.connect(self.dsn, autocommit=True)
        for surface in DEMO_SURFACES:
            channel = done_channel(f"surface-{surface}")
            self.listen.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(channel)))

    def close(self) -> None:
        self.conn.close()
        self.listen.close()

    def run_one(self, surface: str, op: str, request: Request, timeout: float = 30.0) -> _Sample:
        params, auth = request
        env = Envelope(surface, op, 1, params, auth)
        queue_type = f"surface-{surface}"
        t0 = time.perf_counter()
        row = self.conn.execute(
            q("job_enqueue"),
            {
                "type": queue_type,
                "dedupe_key": env.dedupe_key,
                "payload": to_json(env.to_json()),
                "max_dequeues": MAX_DEQUEUES,
                "client": auth.client,
            },
        ).fetchone()
        if row is None or row[2]:
            raise RuntimeError(f"{surface}.{op} {params}: enqueue coalesced or failed ({row})")
        job_id: uuid.UUID = row[0]
        key = str(job_id)
        deadline = t0 + timeout
        while key not in self.seen:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise RuntimeError(f"{surface}.{op} job {key} not done within {timeout}s")
            for notify in self.listen.notifies(timeout=remaining, stop_after=1):
                self.seen.add(notify.payload[:36])  # the job id (an answer may follow)
        return _Sample(job_id, time.perf_counter() - t0)


def _rows(dsn: str, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, tuple[float, str, bool]]:
    """(execution s, cache, is_error) per job: completed_at - claimed_at, server clock."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            """
            SELECT id, extract(epoch FROM completed_at - claimed_at), result->>'cache',
                   status <> 'done' OR result ? 'error'
            FROM maestro_queues WHERE id = ANY(%s)
            """,
            (list(ids),),
        ).fetchall()
    return {r[0]: (float(r[1]), str(r[2]), bool(r[3])) for r in rows}


def _op_stats(dsn: str, samples: list[_Sample], warmup: int) -> dict[str, Any]:
    rows = _rows(dsn, [s.job_id for s in samples])
    measured = samples[warmup:]
    exec_s = [rows[s.job_id][0] for s in measured]
    summary = summary_ms(exec_s)
    return {
        "n": len(measured),
        "p50_ms": summary.get("p50"),
        "p99_ms": summary.get("p99"),
        "max_ms": summary.get("max"),
        "mean_ms": summary.get("mean"),
        "roundtrip_p50_ms": round(percentile([s.roundtrip_s * 1000 for s in measured], 50), 3),
        "errors": sum(1 for s in measured if rows[s.job_id][2]),
        "cache": sorted({rows[s.job_id][1] for s in measured}),
    }


def phase_ops(
    server: Server, workers: Workers, ro_dsn: str, demo_admin_dsn: str, plan: Plan
) -> dict[str, Any]:
    ids = demo_ids(demo_admin_dsn)
    extra = plan.op_warmup + 1  # warm-ups and the cache-hit request come from the same lists
    requests = _requests(ids, plan.op_jobs + extra)
    procs = [workers.start(f"ops-{s}", f"surface-{s}", CLIENT_DB_URL=ro_dsn) for s in DEMO_SURFACES]
    out: dict[str, Any] = {"operations": {}, "cache_hits": {}}
    submitter = Submitter(server.dsn)
    try:
        for proc in procs:
            wait_serving_blocking(proc)
        for (surface, op), reqs in requests.items():
            samples: list[_Sample] = []
            deadline = time.perf_counter() + plan.op_cap_s
            for req in reqs[: plan.op_warmup + plan.op_jobs]:
                samples.append(submitter.run_one(surface, op, req))
                if time.perf_counter() > deadline and len(samples) > plan.op_warmup + 10:
                    break
            stats = _op_stats(server.dsn, samples, plan.op_warmup)
            stats["capped"] = len(samples) < plan.op_warmup + plan.op_jobs
            out["operations"][f"{surface}.{op}"] = stats
            print(
                f"  {surface}.{op}: p50 {stats['p50_ms']} ms, p99 {stats['p99_ms']} ms "
                f"(n={stats['n']}, errors={stats['errors']}, cache={stats['cache']})",
                flush=True,
            )
        for surface, op in plan.cache_ops:
            req = requests[(surface, op)][-1]  # not used above
            first = submitter.run_one(surface, op, req)
            repeats = [submitter.run_one(surface, op, req) for _ in range(plan.cache_hit_repeats)]
            rows = _rows(server.dsn, [first.job_id, *[s.job_id for s in repeats]])
            hit_s = [rows[s.job_id][0] for s in repeats]
            summary = summary_ms(hit_s)
            out["cache_hits"][f"{surface}.{op}"] = {
                "miss_ms": round(rows[first.job_id][0] * 1000, 3),
                "miss_cache": rows[first.job_id][1],
                "n": len(repeats),
                "hit_p50_ms": summary.get("p50"),
                "hit_p99_ms": summary.get("p99"),
                "hit_roundtrip_p50_ms": round(
                    percentile([s.roundtrip_s * 1000 for s in repeats], 50), 3
                ),
                "cache_values": sorted({rows[s.job_id][1] for s in repeats}),
                "all_hits": all(rows[s.job_id][1] == "hit" for s in repeats),
            }
            print(f"  cache {surface}.{op}: {describe(out['cache_hits'][f'{surface}.{op}'])}")
    finally:
        submitter.close()
        for proc in procs:
            workers.stop(proc)
    return out


# -- report --------------------------------------------------------------


def _queue_reference() -> dict[str, Any] | None:
    path = RESULTS_DIR / "queue.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return {
        "drain_jobs_per_s": data.get("drain_jobs_per_s"),
        "drain_best": data.get("drain_best"),
        "date": data.get("date"),
        "file": "bench/results/queue.json",
    }


def report(
    server: Server,
    plan: Plan,
    settings: dict[str, str],
    machine: dict[str, Any],
    raw: dict[str, Any],
) -> dict[str, Any]:
    drain = raw.get("drain", [])
    best: dict[str, Any] = max(drain, key=lambda r: r["jobs_per_s"], default={})
    default: dict[str, Any] = max(
        (r for r in drain if r["concurrency"] == "default"),
        key=lambda r: r["jobs_per_s"],
        default={},
    )
    ops = raw.get("ops", {}).get("operations", {})
    idle = raw.get("idle", {})
    return {
        "drain_jobs_per_s": best.get("jobs_per_s"),
        "drain_best": {
            "DATAPLANE_CONCURRENCY": best.get("concurrency"),
            "run": best.get("run"),
            "worker_runqueue_wait_pct": best.get("worker_runqueue_wait_pct"),
        },
        # DATAPLANE_CONCURRENCY unset: the worker as shipped (issue #15: >= 6,000, <= 100 us)
        "drain_default_jobs_per_s": default.get("jobs_per_s"),
        "drain_default_cpu_us_per_job": default.get("worker_cpu_us_per_job"),
        "drain_jobs_per_s_by_concurrency": {
            label: max(r["jobs_per_s"] for r in drain if r["concurrency"] == label)
            for label in dict.fromkeys(r["concurrency"] for r in drain)
        },
        "queue_drain_jobs_per_s": raw["queue_reference"],
        "idle_cpu_percent": idle.get("idle_cpu_percent"),
        # four idle workers, one enqueue: claim statements it caused (1 = no herd)
        "herd_extra_claims_per_enqueue": raw.get("herd", {}).get("extra_claims_per_enqueue"),
        "herd_extra_cpu_percent": raw.get("herd", {}).get("extra_cpu_percent"),
        "herd_wakeups_per_enqueue": raw.get("herd", {}).get("herd_wakeups_per_enqueue"),
        "operations": {
            name: {"p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"], "n": s["n"]}
            for name, s in ops.items()
        },
        "cache_hits": raw.get("ops", {}).get("cache_hits", {}),
        "targets": TARGETS,
        "date": now_iso(),
        "machine": machine,
        "config": {
            "server": server.kind,
            "server_settings": settings,
            "embedded_settings_passed": server.extra_settings,
            "plan": dict(plan.__dict__.items()),
            "worker": "python -m dataplane worker; env MAESTRO_QUEUES_URL, SURFACE_QUEUE_TYPE, "
            "DATAPLANE_PROBE=1 (probe), DATAPLANE_CONCURRENCY (drain), CLIENT_DB_URL = demo "
            "read-only DSN (operations), DATAPLANE_SHUTDOWN_GRACE_SECONDS=5; other settings "
            "default",
            "drain_method": "drain_repeats runs per concurrency, the best counts (shared "
            "host: see worker_runqueue_wait_pct and loadavg); each run: TRUNCATE, COPY of "
            "drain_jobs probe.echo rows with real envelopes "
            "and dedupe keys, VACUUM ANALYZE, CHECKPOINT (untimed); start the worker; rate = "
            "done / (max(completed_at) - min(claimed_at)); CPU figures over worker ready -> all "
            "done as seen by a 50 ms count poll",
            "ops_method": "one worker per demo surface; jobs enqueued one at a time (job_enqueue) "
            "by staff of acme, branches ['*'] (skills.coverage also the four branches spelt out, "
            "another scope key); distinct params per job; execution = completed_at - claimed_at "
            "(server clock), first op_warmup jobs per operation excluded; roundtrip = client "
            "enqueue call -> done notify",
        },
        "drain_table": drain,
        "idle": idle,
        "herd": raw.get("herd", {}),
        "operations_detail": ops,
    }


def print_tables(result: dict[str, Any]) -> None:
    t = result["targets"]
    ref = result["queue_drain_jobs_per_s"]
    ref_text = (
        f"{ref['drain_jobs_per_s']:,.0f} ({describe(ref['drain_best'] or {})}, {ref['date']})"
        if ref and ref.get("drain_jobs_per_s")
        else "n/a (no bench/results/queue.json)"
    )
    idle = result["idle"]
    rows = [
        [
            "drain jobs/s, worker process (best)",
            f"{result['drain_jobs_per_s'] or 0:,.0f} "
            f"(concurrency {result['drain_best']['DATAPLANE_CONCURRENCY']})",
            f">= {t['drain_jobs_per_s']:,}",
        ],
        [
            "drain jobs/s at default settings, CPU us/job",
            f"{result['drain_default_jobs_per_s']}, {result['drain_default_cpu_us_per_job']}",
            f">= {t['drain_default_jobs_per_s']:,}, <= {t['drain_default_cpu_us_per_job']}",
        ],
        [
            "  best per concurrency",
            ", ".join(
                f"{c}: {v:,.0f}" for c, v in result["drain_jobs_per_s_by_concurrency"].items()
            ),
            "",
        ],
        ["  queue-level drain jobs/s (queue.json)", ref_text, ""],
        ["idle CPU %, worker", idle.get("idle_cpu_percent"), f"<= {t['idle_cpu_percent']}"],
        [
            "herd: wake-ups per enqueue of the 3 workers not running the job",
            result.get("herd", {}).get("herd_wakeups_per_enqueue"),
            "0",
        ],
        [
            "herd: extra claims per enqueue, 4 idle workers vs 1",
            result.get("herd", {}).get("extra_claims_per_enqueue"),
            "0",
        ],
        [
            "  herd: extra CPU per enqueue (workers + postgres), % of 1 worker's",
            result.get("herd", {}).get("extra_cpu_percent"),
            "< 5",
        ],
        [
            "  idle: server xacts/s, postgres CPU %",
            f"{idle.get('server_xacts_per_s')}, {idle.get('postgres_cpu_percent')}",
            "",
        ],
    ]
    print()
    print(format_table(["metric", "value", "target"], rows))
    print()
    print(
        format_table(
            [
                "concurrency",
                "run",
                "jobs/s",
                "done",
                "span s",
                "jobs/claim",
                "jobs/completion",
                "worker CPU %",
                "CPU us/job",
                "runq wait %",
                "postgres CPU %",
                "cycle ms",
                "claim->batch done ms",
                "batch done->claim ms",
                "capped",
            ],
            [
                [
                    r["concurrency"],
                    r["run"],
                    r["jobs_per_s"],
                    r["done"],
                    r["first_claim_to_last_complete_s"],
                    r["jobs_per_claim"],
                    r["jobs_per_completion"],
                    r["worker_cpu_pct"],
                    r["worker_cpu_us_per_job"],
                    r["worker_runqueue_wait_pct"],
                    r["postgres_cpu_pct"],
                    r.get("cycle_ms_mean"),
                    r.get("claim_to_last_completion_ms_mean"),
                    r.get("last_completion_to_next_claim_ms_mean"),
                    "yes" if r["capped"] else "",
                ]
                for r in result["drain_table"]
            ],
        )
    )
    print()
    op_rows = [
        [
            name,
            s["n"],
            f"{s['p50_ms']:.2f}",
            f"{s['p99_ms']:.2f}",
            f"{s['max_ms']:.2f}",
            f"{s['roundtrip_p50_ms']:.2f}",
            s["errors"],
            "/".join(s["cache"]),
        ]
        for name, s in result["operations_detail"].items()
    ]
    for name, c in result["cache_hits"].items():
        op_rows.append(
            [
                f"{name} (cache hit)",
                c["n"],
                f"{c['hit_p50_ms']:.2f}",
                f"{c['hit_p99_ms']:.2f}",
                "",
                f"{c['hit_roundtrip_p50_ms']:.2f}",
                "",
                "/".join(c["cache_values"]) + f" (miss {c['miss_ms']:.2f} ms)",
            ]
        )
    print(
        format_table(
            ["operation", "n", "p50 ms", "p99 ms", "max ms", "roundtrip p50", "errors", "cache"],
            op_rows,
        )
    )
    s, m = result["config"]["server_settings"], result["machine"]
    print(
        f"\nserver {s.get('server_version')}: fsync={s.get('fsync')} "
        f"synchronous_commit={s.get('synchronous_commit')} shared_buffers={s.get('shared_buffers')}"
        f"; nproc={m['nproc']}, loadavg start {m['loadavg_at_start']}"
        f" end {m.get('loadavg_at_end')}"
    )


# -- main ----------------------------------------------------------------


PHASES = ("drain", "idle", "herd", "ops")


def run(
    plan: Plan,
    progress: Callable[[str], None] = print,
    phases: Sequence[str] = PHASES,
    profile: Path | None = None,
) -> dict[str, Any]:
    """Bring up the scratch server, run the phases, stop every worker and the server."""
    with scratch_server("dataplane_bench_worker") as server:
        progress(f"server: {server.kind}; migrating, building the demo DB...")
        settings, machine = server_facts(server)
        if machine["loadavg_at_start"][0] > 0.5 * machine["nproc"]:
            progress(
                f"note: host busy (loadavg {machine['loadavg_at_start']}); numbers will be noisy"
            )
        with demo_db_scope(server) as demo_name:
            ro_dsn = trio.run(_setup, server.dsn, demo_name)
            demo_admin_dsn = with_dbname(server.dsn, demo_name)
            with children_scope("dataplane-bench-worker-logs-", keep_logs=False) as kids:
                workers = Workers(kids, server.dsn)
                raw: dict[str, Any] = {"queue_reference": _queue_reference()}
                if "drain" in phases:
                    progress("phase 1: drain through a worker process")
                    raw["drain"] = phase_drain(server, workers, plan, profile)
                if "idle" in phases:
                    progress(
                        f"phase 2: idle CPU ({plan.idle_settle_s:g}s + {plan.idle_sample_s:g}s)"
                    )
                    raw["idle"] = phase_idle(server, workers, plan)
                    progress(f"  idle CPU {raw['idle']['idle_cpu_percent']}%")
                if "herd" in phases:
                    progress(f"phase 2b: thundering herd ({plan.herd_workers} idle workers)")
                    raw["herd"] = phase_herd(server, workers, plan)
                    progress(f"  {describe(raw['herd'])}")
                if "ops" in phases:
                    progress("phase 3: per-operation execution time on the demo data")
                    raw["ops"] = phase_ops(server, workers, ro_dsn, demo_admin_dsn, plan)
        return report(server, plan, settings, machine, raw)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    parser.add_argument(
        "--only",
        default=",".join(PHASES),
        help=f"comma-separated phases of {','.join(PHASES)} (default all; a partial run "
        "writes bench/results/worker-<phases>.json unless --output says otherwise)",
    )
    parser.add_argument(
        "--concurrency",
        help="comma-separated DATAPLANE_CONCURRENCY values for the drain, 'default' = unset",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="py-spy the first drain run's worker: writes PROFILE.txt (top 20 functions)",
    )
    output_arg(parser, "worker")
    args = parser.parse_args(argv)
    plan = Plan.quick() if args.quick else Plan()
    phases = [p for p in args.only.split(",") if p]
    if unknown := set(phases) - set(PHASES):
        parser.error(f"unknown phases {sorted(unknown)}")
    if args.concurrency:
        values = [None if v == "default" else int(v) for v in args.concurrency.split(",")]
        plan = dataclasses.replace(plan, drain_concurrency=tuple(values))
    output = args.output
    if set(phases) != set(PHASES) and output == RESULTS_DIR / "worker.json":
        output = RESULTS_DIR / f"worker-{'-'.join(phases)}.json"
    result = run_and_save(
        lambda: run(
            plan,
            progress=lambda line: print(line, flush=True),
            phases=phases,
            profile=args.profile,
        ),
        output,
        print_tables,
        "interrupted; workers stopped, scratch server/database removed",
    )
    return 130 if result is None else 0


if __name__ == "__main__":
    sys.exit(main())
