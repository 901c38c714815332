"""The drain tool: the queue and worker figures of the design, by phase.

Run from the repository root::

    python bench/drain.py                       # every phase
    python bench/drain.py drain --repeats 6     # the drain at the default settings
    python bench/drain.py drain --concurrency default,8,128
    python bench/drain.py --quick               # smoke run, small counts

On a scratch Postgres migrated by ``dataplane migrate``; what each phase (drain, idle,
herd, wake, noop) measures: docs/perf/benchmarks.md. Prints the figures and writes
``bench/results/drain-<phases>.json`` (``--output``; not committed).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import re
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import psycopg
import trio
from psycopg import sql as pgsql

from bench.harness.common import (
    Server,
    Witness,
    admin_sql,
    scratch_server,
    server_facts,
    summary_ms,
)
from bench.harness.procs import (
    WORKER_ARGV,
    Child,
    Children,
    children_scope,
    cpu_seconds,
    postgres_pids,
    postmaster_pid,
    wait_serving_blocking,
)
from bench.harness.result import Result, interruptible, print_figures
from bench.harness.stack import QUEUE_TYPE, migrate_schema, stack_env
from dataplane.compat import install_process
from dataplane.db import DatabaseConfig, Gap, open_bridge, open_database, q
from dataplane.queue import (
    MAX_DEQUEUES,
    Completion,
    QueueClient,
    done_channel,
    to_json,
    wake_channel,
)
from dataplane.queue.envelope import Auth, Envelope

PHASES = ("drain", "idle", "herd", "wake", "noop")
STAFF = Auth(client="acme", user_id="1", actor_email="bench@acme.test", staff=True, branches=("*",))
WAKE_TYPE = "surface-bench_wake"
NOOP_TYPE = "surface-bench_noop"
NOOP_RESULT: dict[str, Any] = {"ok": True}
WORKER_STOP_S = 15.0


@dataclass(frozen=True)
class Plan:
    jobs: int = 20_000
    concurrency: tuple[int | None, ...] = (None,)  # None: DATAPLANE_CONCURRENCY unset
    repeats: int = 3
    drain_cap_s: float = 45.0
    idle_settle_s: float = 5.0
    idle_sample_s: float = 30.0
    herd_workers: int = 4
    herd_window_s: float = 8.0
    herd_every_s: float = 0.2
    wake_warmup: int = 20
    wake_jobs: int = 300
    wake_interval_s: float = 0.050
    noop_jobs: int = 20_000
    noop_batch: int = 200
    noop_tasks: int = 4
    noop_cap_s: float = 10.0
    a_env: tuple[tuple[str, str], ...] = ()  # --a-env: the drain's other side

    @classmethod
    def quick(cls) -> Plan:
        return cls(
            jobs=2_000,
            repeats=1,
            drain_cap_s=15.0,
            idle_settle_s=1.0,
            idle_sample_s=4.0,
            herd_window_s=3.0,
            wake_warmup=5,
            wake_jobs=40,
            noop_jobs=2_000,
            noop_cap_s=3.0,
        )


# -- processes ----------------------------------------------------------------------


@dataclass
class Workers:
    """``dataplane worker`` children on ``surface-probe``, configured by environment."""

    kids: Children
    env: dict[str, str]

    def start(self, name: str, **extra: str) -> Child:
        env = {
            **self.env,
            "SURFACE_QUEUE_TYPE": QUEUE_TYPE,
            "DATAPLANE_SHUTDOWN_GRACE_SECONDS": "5",
            **extra,
        }
        child = self.kids.start(name, WORKER_ARGV, env, raise_nofile=False)
        wait_serving_blocking(child)
        return child


def postgres_cpu(server: Server) -> Callable[[], dict[int, float]]:
    """A sampler of the embedded Postgres' processes' CPU seconds ({} on an external one)."""
    pg = postmaster_pid(server)
    return lambda: {pid: cpu_seconds(pid) or 0.0 for pid in postgres_pids(pg)}


def used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds between two samples (processes that exited meanwhile are lost)."""
    return sum(v - before.get(pid, 0.0) for pid, v in after.items())


def ctx_switches(pid: int) -> int:
    """Times the process's threads were switched out: each wake-up costs at least one."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            for line in (task / "status").read_text().splitlines():
                if "ctxt_switches:" in line:
                    total += int(line.split(":", 1)[1])
    except OSError:
        pass
    return total


def fill_probe(dsn: str, n: int) -> None:
    """``n`` pending ``probe.echo`` jobs with distinct params (COPY; untimed)."""
    tag = uuid.uuid4().hex[:8]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE maestro_queues, surface_result_blobs")
        with (
            conn.cursor() as cur,
            cur.copy("COPY maestro_queues (type, dedupe_key, payload) FROM STDIN") as copy,
        ):
            for i in range(n):
                env = Envelope("probe", "echo", 1, {"value": f"{tag}-{i}"}, STAFF)
                copy.write_row((QUEUE_TYPE, env.dedupe_key, to_json(env.to_json())))
        conn.execute("VACUUM ANALYZE maestro_queues")
        conn.execute("CHECKPOINT")


# -- drain --------------------------------------------------------------------------


def drain_run(
    server: Server, workers: Workers, concurrency: int | None, plan: Plan, side: str = "b"
) -> Any:
    fill_probe(server.dsn, plan.jobs)
    pg = postgres_cpu(server)
    extra = dict(plan.a_env) if side == "a" else {}
    if concurrency is not None:
        extra["DATAPLANE_CONCURRENCY"] = str(concurrency)
    done_sql = "SELECT count(*) FROM maestro_queues WHERE type = %s AND status = 'done'"
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        worker = workers.start(f"drain-{concurrency or 'default'}-{uuid.uuid4().hex[:4]}", **extra)
        try:
            ready = time.perf_counter()
            cpu0, pg0 = cpu_seconds(worker.pid) or 0.0, pg()
            while time.perf_counter() < ready + plan.drain_cap_s:
                row = conn.execute(done_sql, (QUEUE_TYPE,)).fetchone()
                if row and row[0] >= plan.jobs:
                    break
                if not worker.alive():
                    raise RuntimeError(f"drain worker exited:\n{worker.tail()}")
                time.sleep(0.05)
            observed = time.perf_counter() - ready
            cpu1, pg1 = cpu_seconds(worker.pid) or 0.0, pg()
        finally:
            exit_code = worker.stop(WORKER_STOP_S)
        row = conn.execute(
            """
            SELECT count(*) FILTER (WHERE status = 'done'),
                   count(*) FILTER (WHERE status = 'poison'),
                   extract(epoch FROM max(completed_at) FILTER (WHERE status = 'done')
                                     - min(claimed_at)),
                   count(DISTINCT claimed_at), count(DISTINCT completed_at)
            FROM maestro_queues WHERE type = %s
            """,
            (QUEUE_TYPE,),
        ).fetchone()
    assert row is not None
    done, poison, span, claims, completions = int(row[0]), int(row[1]), float(row[2] or 0), *row[3:]
    return {
        "concurrency": concurrency or "default",
        "side": side,
        "done": done,
        "poison": poison,
        "capped": done < plan.jobs,
        "jobs_per_s": round(done / span, 1) if span else 0.0,
        "worker_us_per_job": round(1e6 * (cpu1 - cpu0) / done, 1) if done else None,
        "postgres_us_per_job": round(1e6 * used(pg0, pg1) / done, 1) if done else None,
        "worker_cpu_pct": round(100 * (cpu1 - cpu0) / observed, 1),
        "jobs_per_claim": round(done / max(int(claims), 1), 1),  # one now() per statement
        "jobs_per_completion": round(done / max(int(completions), 1), 1),
        "worker_exit_code": exit_code,
    }


def phase_drain(server: Server, workers: Workers, plan: Plan) -> tuple[dict[str, Any], Any]:
    """``repeats`` runs per concurrency; with ``--a-env``, each repeat runs both sides,
    the order alternating: ``b`` as configured, ``a`` with those variables added."""
    runs = []
    for concurrency in plan.concurrency:
        for r in range(plan.repeats):
            sides = ("b",) if not plan.a_env else ("a", "b") if r % 2 == 0 else ("b", "a")
            for side in sides:
                runs.append(row := drain_run(server, workers, concurrency, plan, side))
                print(
                    f"  {side if plan.a_env else ''} concurrency {row['concurrency']}: "
                    f"{row['jobs_per_s']:,.0f} jobs/s, worker {row['worker_us_per_job']} µs/job, "
                    f"Postgres {row['postgres_us_per_job']} µs/job"
                    f"{' CAPPED' if row['capped'] else ''}",
                    flush=True,
                )
    first = plan.concurrency[0] or "default"

    def median(side: str, key: str) -> float:
        values = [r[key] or 0 for r in runs if r["concurrency"] == first and r["side"] == side]
        return round(statistics.median(values), 1)

    figures: dict[str, Any] = {
        "drain_jobs_per_s": median("b", "jobs_per_s"),
        "drain_worker_us_per_job": median("b", "worker_us_per_job"),
        "drain_postgres_us_per_job": median("b", "postgres_us_per_job"),
        "drain_best_jobs_per_s": max(r["jobs_per_s"] for r in runs if r["side"] == "b"),
    }
    if plan.a_env:
        a_rate, a_cpu = median("a", "jobs_per_s"), median("a", "worker_us_per_job")
        figures["drain_jobs_per_s_a"] = a_rate
        figures["drain_worker_us_per_job_a"] = a_cpu
        figures["drain_jobs_per_s_b_over_a"] = round(figures["drain_jobs_per_s"] / a_rate, 4)
        figures["drain_worker_us_b_over_a"] = round(figures["drain_worker_us_per_job"] / a_cpu, 4)
    return figures, {"runs": runs, "figures_of": f"concurrency {first}", "a_env": plan.a_env}


# -- idle and herd ------------------------------------------------------------------


def phase_idle(server: Server, workers: Workers, plan: Plan) -> tuple[dict[str, Any], Any]:
    """An idle worker's CPU; with ``--a-env``, side a and side b one after the other,
    ``--repeats`` times each, the order alternating (a b, b a, ...): medians of each."""
    if not plan.a_env:
        pct = idle_cpu_pct(workers, plan)
        return {"idle_worker_cpu_pct": pct}, {"sample_s": plan.idle_sample_s}
    runs: list[dict[str, Any]] = []
    for r in range(plan.repeats):
        for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
            pct = idle_cpu_pct(workers, plan, **(dict(plan.a_env) if side == "a" else {}))
            runs.append({"side": side, "idle_worker_cpu_pct": pct})
            print(f"  {side} idle worker: {pct:.3f} % of a core", flush=True)
    a = statistics.median(r["idle_worker_cpu_pct"] for r in runs if r["side"] == "a")
    b = statistics.median(r["idle_worker_cpu_pct"] for r in runs if r["side"] == "b")
    figures = {"idle_worker_cpu_pct": b, "idle_worker_cpu_pct_a": a}
    if a:
        figures["idle_worker_cpu_b_over_a"] = round(b / a, 4)
    return figures, {"runs": runs, "a_env": plan.a_env}


def idle_cpu_pct(workers: Workers, plan: Plan, **extra: str) -> float:
    worker = workers.start(f"idle-{uuid.uuid4().hex[:4]}", **extra)
    try:
        time.sleep(plan.idle_settle_s)
        t0, cpu0 = time.perf_counter(), cpu_seconds(worker.pid) or 0.0
        time.sleep(plan.idle_sample_s)
        t1, cpu1 = time.perf_counter(), cpu_seconds(worker.pid) or 0.0
    finally:
        worker.stop(WORKER_STOP_S)
    return round(100 * (cpu1 - cpu0) / (t1 - t0), 3)


class StatementLog:
    """The workers' statements as the embedded server logs them, with
    ``log_min_duration_statement = 0`` while open (``pg_stat_database`` counters are
    flushed at most once a second: too coarse for a few statements per window)."""

    CLAIM = "maestro_claim("  # job_claim calls it (migration 0008)
    _LINE = re.compile(
        r"^\d+ dataplane-worker: LOG:  duration: [\d.]+ ms  (?:statement|execute [^:]*): (.*)$",
        re.M,
    )

    def __init__(self, server: Server) -> None:
        if server.datadir is None:
            raise SystemExit("herd: needs the embedded server's log (unset MAESTRO_QUEUES_URL)")
        self.server = server
        self.path = server.datadir / "data" / "server.log"

    def __enter__(self) -> StatementLog:
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
                conn.execute(statement.encode())  # bench literals, no parameters
            conn.execute("SELECT pg_reload_conf()")
        time.sleep(0.5)  # the reload reaches every backend

    def offset(self) -> int:
        return self.path.stat().st_size

    def claims(self, start: int, end: int) -> int:
        with self.path.open("rb") as f:
            f.seek(start)
            text = f.read(end - start).decode(errors="replace")
        return sum(self.CLAIM in m.group(1) for m in self._LINE.finditer(text))


def herd_window(
    server: Server, procs: list[Child], log: StatementLog, seconds: float, every: float | None
) -> dict[str, Any]:
    """Claims and the workers' CPU over one window; with ``every``, one job enqueued (the
    real statement) and awaited (its done notify) per period."""
    tag = uuid.uuid4().hex[:8]
    with (
        psycopg.connect(server.dsn, autocommit=True) as conn,
        psycopg.connect(server.dsn, autocommit=True) as listen,
    ):
        listen.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(done_channel(QUEUE_TYPE))))
        log0 = log.offset()
        cpu0 = sum(cpu_seconds(p.pid) or 0.0 for p in procs)
        wake0 = [ctx_switches(p.pid) for p in procs]
        t0 = time.perf_counter()
        jobs = 0
        while (left := seconds - (time.perf_counter() - t0)) > 0:
            if every is None:
                time.sleep(min(0.5, left))
                continue
            env = Envelope("probe", "echo", 1, {"value": f"{tag}-{jobs}"}, STAFF)
            params = {
                "type": QUEUE_TYPE,
                "dedupe_key": env.dedupe_key,
                "payload": to_json(env.to_json()),
                "max_dequeues": MAX_DEQUEUES,
                "client": "acme",
            }
            row = conn.execute(q("job_enqueue"), params).fetchone()
            assert row is not None
            key, next_at = str(row[0]), time.perf_counter() + every
            seen = False
            while not seen and time.perf_counter() < next_at + 5:
                for note in listen.notifies(timeout=5, stop_after=1):
                    seen = seen or note.payload[:36] == key  # the job id leads the payload
            jobs += 1
            time.sleep(max(0.0, next_at - time.perf_counter()))
        elapsed = time.perf_counter() - t0
        cpu1 = sum(cpu_seconds(p.pid) or 0.0 for p in procs)
        wake1 = [ctx_switches(p.pid) for p in procs]
        time.sleep(0.2)  # the last lines reach the file
        claims = log.claims(log0, log.offset())
    return {
        "seconds": elapsed,
        "jobs": jobs,
        "claims": claims,
        "cpu_s": cpu1 - cpu0,
        "wakeups": [b - a for a, b in zip(wake0, wake1, strict=True)],
    }


def herd_run(server: Server, workers: Workers, plan: Plan, count: int) -> dict[str, Any]:
    """``count`` idle workers: a quiet window, then one with enqueues; per enqueue."""
    procs = [workers.start(f"herd-{count}-{i}") for i in range(count)]
    try:
        time.sleep(plan.idle_settle_s)
        with StatementLog(server) as log:
            quiet = herd_window(server, procs, log, plan.herd_window_s, None)
            busy = herd_window(server, procs, log, plan.herd_window_s, plan.herd_every_s)
    finally:
        for proc in procs:
            proc.stop(WORKER_STOP_S)
    scale, jobs = busy["seconds"] / quiet["seconds"], max(busy["jobs"], 1)
    woken = sorted(
        ((b - q * scale) / jobs for q, b in zip(quiet["wakeups"], busy["wakeups"], strict=True)),
        reverse=True,
    )
    return {
        "workers": count,
        "jobs": busy["jobs"],
        "claims_per_enqueue": round((busy["claims"] - quiet["claims"] * scale) / jobs, 2),
        "worker_cpu_us_per_enqueue": round(1e6 * (busy["cpu_s"] - quiet["cpu_s"] * scale) / jobs),
        "wakeups_per_enqueue_others": round(sum(woken[1:]), 2),  # the ones that ran no job
    }


def phase_herd(server: Server, workers: Workers, plan: Plan) -> tuple[dict[str, Any], Any]:
    one = herd_run(server, workers, plan, 1)
    many = herd_run(server, workers, plan, plan.herd_workers)
    base = max(one["worker_cpu_us_per_enqueue"], 1)
    figures = {
        "herd_extra_claims_per_enqueue": round(
            many["claims_per_enqueue"] - one["claims_per_enqueue"], 2
        ),
        "herd_extra_cpu_pct": round(100 * (many["worker_cpu_us_per_enqueue"] - base) / base, 1),
        "herd_wakeups_per_enqueue": many["wakeups_per_enqueue_others"],
    }
    return figures, {"one": one, "many": many}


# -- wake and no-op drain: the queue API in this process ----------------------------


@dataclass
class WakeState:
    expected: int
    start: dict[uuid.UUID, float] = field(default_factory=dict)  # perf_counter, enqueue()
    claimed_at: dict[uuid.UUID, float] = field(default_factory=dict)  # epoch, server clock
    claimed: int = 0
    gaps: int = 0
    all_claimed: trio.Event = field(default_factory=trio.Event)


async def phase_wake(queue: QueueClient, db: Any, dsn: str, plan: Plan) -> Any:
    """An idle claimer woken by LISTEN; one enqueue every ``wake_interval_s``."""
    state = WakeState(plan.wake_warmup + plan.wake_jobs)
    channel = wake_channel(WAKE_TYPE)
    witness = Witness(dsn, channel, state.expected, state.expected * plan.wake_interval_s + 15)
    order: list[uuid.UUID] = []
    try:
        await trio.to_thread.run_sync(witness.wait_ready)
        listener = db.listener([channel])

        async def claimer() -> None:
            async for event in listener.events:
                state.gaps += isinstance(event, Gap)
                jobs = await queue.claim(WAKE_TYPE, "bench-wake", limit=10)
                for job in jobs:
                    state.claimed_at[job.id] = job.claimed_at.timestamp()
                await queue.complete_many([Completion(j, NOOP_RESULT) for j in jobs])
                state.claimed += len(jobs)
                if state.claimed >= state.expected:
                    state.all_claimed.set()

        async with trio.open_nursery() as nursery:
            await nursery.start(listener.run)
            nursery.start_soon(claimer)
            await trio.sleep(0.2)
            t0 = trio.current_time()
            for i in range(state.expected):
                await trio.sleep_until(t0 + i * plan.wake_interval_s)
                started = time.perf_counter()
                res = await queue.enqueue(WAKE_TYPE, f"wake-{uuid.uuid4().hex}", {"i": i})
                state.start[res.job_id] = started
                order.append(res.job_id)
            with trio.fail_after(10):
                await state.all_claimed.wait()
            nursery.cancel_scope.cancel()
        stamps = sorted(await trio.to_thread.run_sync(witness.stamps, 20.0))
    finally:
        witness.kill()
    # Each job's commit: the first witness stamp after its enqueue() started (one enqueue
    # in flight at a time, 50 ms apart, so the match is unambiguous).
    waits: list[float] = []
    k = 0
    for i, job in enumerate(order):
        while k < len(stamps) and stamps[k][0] < state.start[job]:
            k += 1
        limit = state.start[order[i + 1]] if i + 1 < len(order) else float("inf")
        if i >= plan.wake_warmup and k < len(stamps) and stamps[k][0] < limit:
            waits.append(state.claimed_at[job] - stamps[k][1])
    ms = summary_ms(waits)
    detail = {"commit_to_claim_ms": ms, "witnessed": len(waits), "gaps": state.gaps}
    return {"wake_p50_ms": ms.get("p50"), "wake_p99_ms": ms.get("p99")}, detail


async def phase_noop(queue: QueueClient, dsn: str, plan: Plan) -> Any:
    fill = """
        INSERT INTO maestro_queues (type, dedupe_key, payload)
        SELECT %(type)s, %(tag)s || g, jsonb_build_object('n', g)
        FROM generate_series(1, %(n)s) AS g
    """
    params = {"type": NOOP_TYPE, "tag": f"noop-{uuid.uuid4().hex[:8]}-", "n": plan.noop_jobs}
    await admin_sql(dsn, (fill, params), "VACUUM ANALYZE maestro_queues")
    done = [0]
    deadline = trio.current_time() + plan.noop_cap_s

    async def claimer(k: int) -> None:
        while trio.current_time() < deadline:
            jobs = await queue.claim(NOOP_TYPE, f"noop-{k}", limit=plan.noop_batch)
            if not jobs:
                return
            done[0] += len(await queue.complete_many([Completion(j, NOOP_RESULT) for j in jobs]))

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for k in range(plan.noop_tasks):
            nursery.start_soon(claimer, k)
    elapsed = time.perf_counter() - t0
    figures = {"noop_drain_jobs_per_s": round(done[0] / elapsed, 1)}
    return figures, {"done": done[0], "seconds": round(elapsed, 3), "batch": plan.noop_batch}


async def in_process(dsn: str, phases: Sequence[str], plan: Plan, result: Result) -> None:
    cfg = DatabaseConfig(dsn, pool_size=16, application_name="bench-drain")
    async with open_bridge(), open_database(cfg) as db:
        queue = QueueClient(db)
        for name in phases:
            print(f"{name}...", flush=True)
            await admin_sql(dsn, "TRUNCATE maestro_queues, surface_result_blobs")
            if name == "wake":
                figures, detail = await phase_wake(queue, db, dsn, plan)
            else:
                figures, detail = await phase_noop(queue, dsn, plan)
            result.figures.update(figures)
            result.detail[name] = detail


# -- orchestration ------------------------------------------------------------------


def run(phases: Sequence[str], plan: Plan) -> Result:
    result = Result(tool="drain", scenarios=list(phases), config={"plan": asdict(plan)})
    t0 = time.perf_counter()
    with scratch_server("dataplane_drain") as server:
        settings, result.machine = server_facts(server)
        result.config["server"] = settings
        env = stack_env(server.dsn)
        migrate_schema(env)
        with children_scope("dataplane-drain-logs-", keep_logs=False) as kids:
            workers = Workers(kids, env)
            procs = {"drain": phase_drain, "idle": phase_idle, "herd": phase_herd}
            for name in [p for p in phases if p in procs]:
                print(f"{name}...", flush=True)
                figures, result.detail[name] = procs[name](server, workers, plan)
                result.figures.update(figures)
        queue_phases = [p for p in phases if p in ("wake", "noop")]
        if queue_phases:
            trio.run(in_process, server.dsn, queue_phases, plan, result)
    result.total_seconds = round(time.perf_counter() - t0, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    install_process()  # as the entry points do (DATAPLANE_STOCK_STACK honoured)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("phases", nargs="*", help=f"of {', '.join(PHASES)} (default: all)")
    parser.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    parser.add_argument("--repeats", type=int, help="drain runs per concurrency")
    parser.add_argument(
        "--concurrency", help="comma-separated DATAPLANE_CONCURRENCY values, 'default' = unset"
    )
    parser.add_argument(
        "--a-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="drain: alternate runs with these variables (side a) and without (side b), "
        "e.g. DATAPLANE_STOCK_STACK=1",
    )
    parser.add_argument("--output", type=Path, help="result JSON (default bench/results/)")
    args = parser.parse_args(argv)
    phases = args.phases or list(PHASES)
    if unknown := set(phases) - set(PHASES):
        parser.error(f"unknown phase(s) {sorted(unknown)}: choose of {', '.join(PHASES)}")
    plan = Plan.quick() if args.quick else Plan()
    if args.repeats:
        plan = replace(plan, repeats=args.repeats)
    if args.a_env:
        if any("=" not in item for item in args.a_env):
            parser.error("--a-env takes KEY=VALUE")
        pairs = [item.split("=", 1) for item in args.a_env]
        plan = replace(plan, a_env=tuple((k, v) for k, v in pairs))
    if args.concurrency:
        values = [None if v == "default" else int(v) for v in args.concurrency.split(",")]
        plan = replace(plan, concurrency=tuple(values))
    result = interruptible(lambda: run(phases, plan))
    if result is None:
        return 130
    print_figures(result)
    print(f"\nwrote {result.save(args.output)} ({result.total_seconds}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
