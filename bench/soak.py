"""Soak test: the whole stack under a fixed mixed load; does anything keep growing?

Run from the repository root::

    python bench/soak.py                 # 10 minutes (the default)
    python bench/soak.py --minutes 2     # any length; --quick = 1 minute (CI-sized)
    MAESTRO_QUEUES_URL=... python bench/soak.py   # scratch dbs on that server instead

Its own stack (embedded Postgres, the demo client DB, one BFF, a worker per demo
surface and probe), ``Plan.clients`` closed-loop clients drawing from one weighted mix
of every demo operation, a sample of processes and tables every period, and the
verdict: ``bounded`` when no resource metric grows (exit status 0, else 1). The
method, the mix and the verdict rule: docs/perf/soak.md. Prints the verdict table
and a timeline and writes ``bench/results/soak.json``; every process started here is
stopped on exit, also on error, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as ``python bench/soak.py``: the repository root first on sys.path (``bench``,
# and this checkout's ``dataplane``).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import dataclasses
import json
import math
import random
import shutil
import statistics
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg
import trio
from dataplane_lms.demo_db import create_demo_db

from bench.harness.client import RawSession
from bench.harness.common import (
    Server,
    format_table,
    now_iso,
    percentile,
    scratch_server,
    server_facts,
    until_signalled,
    with_dbname,
)
from bench.harness.demo import DemoIds, demo_db_scope, demo_ids
from bench.harness.procs import (
    WORKER_ARGV,
    Child,
    Children,
    CpuMeter,
    fd_count,
    postgres_pids,
    postmaster_pid,
    proc_status,
    raise_own_nofile,
)
from bench.harness.result import Result, interruptible
from bench.harness.stack import migrate_schema, stack_env, start_bff, wait_serving
from dataplane.auth.verifier import mint_token
from dataplane.compat import install_process
from dataplane.db import DatabaseConfig, open_bridge, open_database
from dataplane.maintenance.retention import RetentionConfig, reap_once
from dataplane.maintenance.schedule import MAINTENANCE_SECONDS

JWT_SECRET = "bench-soak-secret-that-is-long-enough-for-hs256!"
DEMO_SURFACES = ("users", "learnerviews", "accounting", "skills")
SURFACES = (*DEMO_SURFACES, "probe")
ACME_BRANCHES = ("acme-east", "acme-north", "acme-south", "acme-west")
MANAGER_BRANCHES = ["acme-east", "acme-north"]
GROWTH_LIMIT = 0.20
#: Slow on purpose (retry backoff, sleeps): left out of the judged interval latency.
SLOW_BY_DESIGN = frozenset({"probe.fail", "probe.sleep"})
STACK_PARTIES = ("bff", "workers", "postgres")
SETUP_BUDGET_S = 300.0  # server-side setup + stack start, on top of the run
DRAIN_GRACE_S = 30.0  # in-flight requests may finish this long after the load ends
# Absolute noise floors: a rise smaller than this is never "growing", whatever its %.
FLOORS = {"MB": 5.0, "fds": 5.0, "conns": 2.0, "kB": 1024.0, "rows": 2000.0, "procs": 2.0}


@dataclass(frozen=True)
class Plan:
    minutes: float = 10.0
    clients: int = 32
    think_s: tuple[float, float] = (0.25, 0.75)  # uniform think time between requests
    request_bound_s: float = 60.0  # POST .. final answer (and blob), per request
    poll_every_s: float = 1.0  # after a TIMEOUT event
    sse_deadline_s: float = 20.0  # BFF DATAPLANE_SSE_DEADLINE_SECONDS
    fail_backoff_s: float = 1.0  # probe worker DATAPLANE_FAIL_BACKOFF_SECONDS
    worker_concurrency: int = 8  # the default
    seed: int = 20240601
    autovacuum_naptime_s: float = 60.0  # the server's, read before the run

    @property
    def run_s(self) -> float:
        return self.minutes * 60.0

    @property
    def period_s(self) -> float:
        return 5.0 if self.minutes <= 3 else 10.0

    @property
    def retention_s(self) -> float:
        return min(60.0, max(15.0, self.run_s / 8))

    @property
    def settle_s(self) -> float:
        """Until the queue table has seen a full autovacuum cycle at full load.

        Rows start to be deleted after the retention and their space is freed by the
        next autovacuum (at most a naptime later); the table holds one naptime's
        worth of dead versions, so it settles one cycle after that.
        """
        first = max(self.retention_s, self.autovacuum_naptime_s)
        return first + self.autovacuum_naptime_s + 2 * self.period_s

    @property
    def warmup_s(self) -> float:
        """Samples before this are not judged (at most half the run)."""
        return min(self.settle_s, self.run_s / 2)

    @property
    def table_conclusive(self) -> bool:
        """Long enough for the queue table to settle with half the run left to judge."""
        return self.settle_s <= self.run_s / 2

    def describe(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "run_s": self.run_s,
            "period_s": self.period_s,
            "retention_s": self.retention_s,
            "settle_s": self.settle_s,
            "warmup_s": self.warmup_s,
            "table_conclusive": self.table_conclusive,
        }


# -- the stack -----------------------------------------------------------------


@dataclass
class Stack:
    server: Server
    kids: Children
    plan: Plan
    env: dict[str, str]
    ro_dsn: str = ""
    bff: Child | None = None
    bff_port: int = 0
    bff_pid: int = 0  # Hypercorn's serving (spawned) process
    workers: dict[str, Child] = field(default_factory=dict)
    pg_pid: int | None = None

    def children(self) -> dict[str, Child]:
        out = {"bff": self.bff} if self.bff else {}
        return {**out, **{f"worker-{s}": w for s, w in self.workers.items()}}


def base_env(queue_dsn: str, plan: Plan) -> dict[str, str]:
    env = stack_env(
        queue_dsn,
        jwt_secret=JWT_SECRET,
        sse_deadline_s=plan.sse_deadline_s,
        DATAPLANE_SHUTDOWN_GRACE_SECONDS="2",
    )
    env.pop("DATAPLANE_CLIENT_DB_URL", None)
    env.pop("DATAPLANE_CAPCOM_URL", None)
    return env


async def start_stack(stack: Stack) -> None:
    """The BFF, then one worker per surface; returns when all serve."""
    bff = await start_bff(stack.kids, "bff", stack.env, within=60)
    stack.bff, stack.bff_port, stack.bff_pid = bff.child, bff.port, bff.serving
    for surface in SURFACES:
        env = {
            **stack.env,
            "SURFACE_QUEUE_TYPE": f"surface-{surface}",
            "DATAPLANE_CONCURRENCY": str(stack.plan.worker_concurrency),
        }
        if surface == "probe":
            env["DATAPLANE_FAIL_BACKOFF_SECONDS"] = str(stack.plan.fail_backoff_s)
        else:
            env["DATAPLANE_CLIENT_DB_URL"] = stack.ro_dsn
        stack.workers[surface] = stack.kids.start(f"worker-{surface}", WORKER_ARGV, env)
    await wait_serving(stack.workers.values(), within=60, poll=0.05)


async def prepare_databases(queue_dsn: str, demo_name: str) -> str:
    """The demo client DB created and seeded; its read-only DSN (bridge must be open)."""
    return await create_demo_db(
        queue_dsn, name=demo_name, progress=lambda line: print(f"  demo-db: {line}", flush=True)
    )


# -- the load ------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    surface: str
    operation: str
    params: dict[str, Any]
    token: str
    expect: str = "ok"  # ok | rejected | poison

    @property
    def name(self) -> str:
        return f"{self.surface}.{self.operation}"


#: The fixed request mix: relative weight of each operation.
WEIGHTS = {
    "users.list": 10,
    "users.detail": 6,
    "learnerviews.branchSummary": 5,
    "learnerviews.courseSummary": 5,
    "learnerviews.learner": 5,
    "accounting.invoices": 6,
    "accounting.invoice": 5,
    "accounting.invoicePdf": 3,
    "skills.coverage": 5,
    "skills.profile": 5,
    "probe.echo": 10,
    "probe.sleep": 8,
    "probe.fail": 3,
    "probe.reject": 3,
}


def _some(params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


#: Asked with the staff or (30 %) a manager's token, and a branch valid for it.
SCOPED = frozenset(
    {"users.list", "learnerviews.branchSummary", "learnerviews.courseSummary", "skills.coverage"}
)


class Mix:
    """The fixed weighted request mix; :meth:`draw` builds one request."""

    def __init__(self, ids: DemoIds) -> None:
        self.ids = ids
        self.staff = mint_token(JWT_SECRET, client="acme", sub="soak-staff", staff=True, ttl=86400)
        self.manager = mint_token(
            JWT_SECRET, client="acme", sub="soak-mgr", branches=MANAGER_BRANCHES, ttl=86400
        )

    def draw(self, rng: random.Random) -> Request:
        (name,) = rng.choices(list(WEIGHTS), list(WEIGHTS.values()))
        surface, operation = name.split(".")
        token, branches = self.staff, ["acme-east", "acme-west"]
        if name in SCOPED and rng.random() < 0.3:
            token, branches = self.manager, MANAGER_BRANCHES
        pick, ids, expect = rng.choice, self.ids, "ok"
        some: tuple[str | None, ...] = (None, *branches)  # no branch filter, or one
        match name:
            case "users.list":
                params = {"limit": pick((25, 50)), "offset": pick((0, 50)), "branch": pick(some)}
                params["q"] = pick((None, "an"))
            case "users.detail" | "skills.profile":
                params = {"userId": pick(ids.users)}
            case "learnerviews.branchSummary":
                params = {"branch": pick(some), "since": pick((None, "2025-01-01", "2025-06-01"))}
            case "learnerviews.courseSummary":
                categories = (None, *ids.course_categories[:3])
                params = {"limit": pick((10, 50)), "branch": pick(some[:2])}
                params["category"] = pick(categories)
            case "learnerviews.learner":
                params = {"userId": pick(ids.users), "status": pick((None, "completed"))}
            case "accounting.invoices":
                params = {"status": pick((None, "draft", "sent", "paid", "overdue")), "limit": 25}
                params |= {"offset": pick((0, 25)), "branch": pick((None, "acme-east"))}
            case "accounting.invoice" | "accounting.invoicePdf":
                params = {"invoiceId": pick(ids.invoices)}
            case "skills.coverage":
                params = {"branch": pick(some), "category": pick((None, *ids.skill_categories[:2]))}
            case "probe.echo":
                params = {"value": pick("abcde") if rng.random() < 0.5 else uuid.uuid4().hex}
            case "probe.sleep":
                params = {"ms": pick((100, 250, 500))}  # shared durations: they coalesce
            case "probe.fail":  # fails once, or (1/3) on every claim: parked as poison
                expect = "poison" if rng.random() >= 0.67 else "ok"
                params = {"times": 50 if expect == "poison" else 1, "nonce": uuid.uuid4().hex}
            case _:  # probe.reject: an expected error answer
                params, expect = {"status": pick((400, 403, 404)), "message": "soak"}, "rejected"
        return Request(surface, operation, _some(params), token, expect)


@dataclass
class Window:
    """Client-side counts of one sampling interval."""

    requests: int = 0
    ok: int = 0
    expected_errors: int = 0
    unexpected: int = 0
    polled: int = 0
    coalesced: int = 0
    latencies: list[float] = field(default_factory=list)


@dataclass
class Load:
    """Every client's results: the current window and the run's totals."""

    window: Window = field(default_factory=Window)
    by_op: Counter[str] = field(default_factory=Counter)  # "op outcome" -> n
    cache: Counter[str] = field(default_factory=Counter)
    unexpected: Counter[str] = field(default_factory=Counter)
    coalesced: int = 0
    polled: int = 0
    pdf_bytes: int = 0
    pdfs: int = 0
    latencies_by_op: dict[str, list[float]] = field(default_factory=dict)

    def take_window(self) -> Window:
        window, self.window = self.window, Window()
        return window

    def record(self, req: Request, outcome: str, latency: float, info: Mapping[str, Any]) -> None:
        w = self.window
        w.requests += 1
        self.by_op[f"{req.name} {outcome}"] += 1
        if outcome == "unexpected":
            w.unexpected += 1
            self.unexpected[f"{req.name}: {info.get('error', '?')}"[:200]] += 1
            return
        if req.name not in SLOW_BY_DESIGN:
            w.latencies.append(latency)
        self.latencies_by_op.setdefault(req.name, []).append(latency)
        if outcome == "ok":
            w.ok += 1
        else:
            w.expected_errors += 1
        if info.get("coalesced"):
            w.coalesced += 1
            self.coalesced += 1
        if info.get("polled"):
            w.polled += 1
            self.polled += 1
        if info.get("cache"):
            self.cache[str(info["cache"])] += 1
        if info.get("pdf_bytes"):
            self.pdfs += 1
            self.pdf_bytes += int(info["pdf_bytes"])


class Unexpected(Exception):
    pass


def _classify(req: Request, event: str, data: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(outcome, info) of a final answer: done data or a poll's 200 body."""
    info: dict[str, Any] = {"cache": data.get("cache")}
    error = data if event == "error" else data.get("error")
    if error:
        code = (error or {}).get("code")
        if req.expect == "poison" and code == "POISON":
            return "poison", info
        if req.expect == "rejected" and (error or {}).get("status") == req.params["status"]:
            return "rejected", info
        raise Unexpected(f"{event} {code}: {str((error or {}).get('message'))[:120]}")
    if req.expect != "ok":
        raise Unexpected(f"expected {req.expect}, got a result")
    return "ok", info


async def _poll(session: RawSession, url: str, plan: Plan) -> dict[str, Any]:
    for _ in range(int(plan.request_bound_s / plan.poll_every_s) + 1):
        status, raw = await session.request("GET", url)
        if status == 200:
            return dict(json.loads(raw))
        if status != 202:
            raise Unexpected(f"poll answered {status}")
        await trio.sleep(plan.poll_every_s)
    raise Unexpected("poll: no answer within the bound")


async def one_request(session: RawSession, req: Request, plan: Plan) -> tuple[str, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {req.token}", "Content-Type": "application/json"}
    body = json.dumps({"operation": req.operation, "params": req.params}).encode()
    status, raw = await session.request("POST", f"/api/{req.surface}/q", body, headers)
    if status != 202:
        raise Unexpected(f"POST answered {status}: {raw[:120]!r}")
    accepted = json.loads(raw)
    status, events = await session.events(accepted["streamUrl"])
    if status != 200:
        raise Unexpected(f"stream answered {status}")
    final = next(((e, d) for e, d, _ in reversed(events) if e in ("done", "error")), None)
    if final is None:
        raise Unexpected("stream ended without a final event")
    event, data = final[0], json.loads(final[1])
    polled = False
    if event == "error" and data.get("code") == "TIMEOUT":
        data, polled = await _poll(session, accepted["pollUrl"], plan), True
        event = "done"  # a poll answer: a poisoned job's carries its "error"
    outcome, info = _classify(req, event, data)
    info["coalesced"] = bool(accepted.get("coalesced")) or bool(data.get("coalesced"))
    info["polled"] = polled
    ref = data.get("blobRef")
    if req.operation == "invoicePdf":
        if not isinstance(ref, dict) or "url" not in ref:
            raise Unexpected("invoicePdf answered without a blobRef")
        status, pdf = await session.request("GET", ref["url"])
        if status != 200 or not pdf.startswith(b"%PDF"):
            raise Unexpected(f"blob GET answered {status} ({pdf[:8]!r})")
        info["pdf_bytes"] = len(pdf)
    return outcome, info


async def run_client(k: int, stack: Stack, mix: Mix, load: Load, deadline: float) -> None:
    plan = stack.plan
    rng = random.Random(plan.seed * 1000 + k)
    session = RawSession(stack.bff_port)
    try:
        await trio.sleep(rng.uniform(0, 1.0))  # spread the first requests
        while time.perf_counter() < deadline:
            req = mix.draw(rng)
            t0 = time.perf_counter()
            outcome, info = "unexpected", {"error": "request bound exceeded"}
            with trio.move_on_after(plan.request_bound_s):
                try:
                    outcome, info = await one_request(session, req, plan)
                except Unexpected as exc:
                    info = {"error": str(exc)}
                except Exception as exc:  # transport trouble: a fresh connection next
                    info = {"error": f"{type(exc).__name__}: {exc}"}
                    await session.aclose()
            if outcome == "unexpected":
                await session.aclose()  # a fresh connection for the next request
            load.record(req, outcome, time.perf_counter() - t0, info)
            await trio.sleep(rng.uniform(*plan.think_s))
    finally:
        await session.aclose()


# -- sampling ------------------------------------------------------------------


SQL_CONNS = """
SELECT coalesce(nullif(application_name, ''), '(none)') AS app, count(*)
FROM pg_stat_activity
WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
GROUP BY 1
"""
SQL_SIZES = """
SELECT pg_total_relation_size('maestro_queues'), pg_relation_size('maestro_queues'),
       pg_indexes_size('maestro_queues'), pg_total_relation_size('surface_result_blobs'),
       (SELECT count(*) FROM surface_result_blobs)
"""
SQL_TUPLES = """
SELECT relname, n_live_tup, n_dead_tup, last_autovacuum::text, autovacuum_count
FROM pg_stat_user_tables WHERE relname IN ('maestro_queues', 'surface_result_blobs')
"""
SQL_STATUS = "SELECT status, count(*) FROM maestro_queues GROUP BY status"
# Stand-in for a blob TTL of retention_s (the real one is 24 h): the reaper deletes them.
SQL_AGE_BLOBS = """
UPDATE surface_result_blobs SET expires_at = now()
WHERE expires_at > now() AND created_at < now() - make_interval(secs => %(secs)s)
"""


class Sampler:
    """Process and database facts, one blocking connection (run in a thread)."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.conn = psycopg.connect(
            stack.server.dsn, autocommit=True, application_name="soak-sampler"
        )

    def close(self) -> None:
        self.conn.close()

    def sample(self) -> dict[str, Any]:
        stack = self.stack
        procs: dict[str, Any] = {}
        for name, child in stack.children().items():
            pid = stack.bff_pid if name == "bff" else child.pid
            st = proc_status(pid)
            procs[name] = {
                "alive": child.alive(),
                "rss_mb": round(st.get("VmRSS", 0.0), 1),
                "anon_mb": round(st.get("RssAnon", 0.0), 1),
                "fds": fd_count(pid),
            }
        if stack.bff is not None:
            procs["bff-master"] = {"rss_mb": round(proc_status(stack.bff.pid).get("VmRSS", 0), 1)}
        pg: dict[str, Any] = {}
        if stack.pg_pid is not None:
            pids = postgres_pids(stack.pg_pid)
            stats = [proc_status(p) for p in pids]
            pg = {
                "processes": len(pids),
                "rss_mb": round(sum(s.get("VmRSS", 0.0) for s in stats), 1),
                "anon_mb": round(sum(s.get("RssAnon", 0.0) for s in stats), 1),
                "shmem_mb": round(sum(s.get("RssShmem", 0.0) for s in stats), 1),
            }
            pg["private_mb"] = round(pg["rss_mb"] - pg["shmem_mb"], 1)
        conns = {str(app): int(n) for app, n in self.conn.execute(SQL_CONNS).fetchall()}
        size = self.conn.execute(SQL_SIZES).fetchone() or (0, 0, 0, 0, 0)
        tuples = {
            str(r[0]): {
                "n_live_tup": int(r[1]),
                "n_dead_tup": int(r[2]),
                "last_autovacuum": r[3],
                "autovacuum_count": int(r[4]),
            }
            for r in self.conn.execute(SQL_TUPLES).fetchall()
        }
        status = {str(s): int(n) for s, n in self.conn.execute(SQL_STATUS).fetchall()}
        return {
            "procs": procs,
            "postgres": pg,
            "connections": dict(sorted(conns.items())),
            "maestro_queues": {
                "total_bytes": int(size[0]),
                "heap_bytes": int(size[1]),
                "index_bytes": int(size[2]),
                **tuples.get("maestro_queues", {}),
                "rows_by_status": status,
            },
            "surface_result_blobs": {
                "total_bytes": int(size[3]),
                "rows": int(size[4]),
                **tuples.get("surface_result_blobs", {}),
            },
        }

    def age_blobs(self, seconds: float) -> int:
        return self.conn.execute(SQL_AGE_BLOBS, {"secs": seconds}).rowcount


async def sample_loop(
    stack: Stack, load: Load, started: float, deadline: float, real_blob_ttl: bool
) -> list[dict[str, Any]]:
    """Sample every period until ``deadline``, a reaper pass after each sample."""
    plan = stack.plan
    retention = RetentionConfig(done_seconds=plan.retention_s, poison_seconds=plan.retention_s)
    sampler = await trio.to_thread.run_sync(Sampler, stack)
    samples: list[dict[str, Any]] = []
    reaper_cfg = DatabaseConfig(stack.server.dsn, pool_size=1, application_name="soak-reaper")
    meter = CpuMeter(
        {
            "bff": lambda: [stack.bff_pid] if stack.bff_pid else [],
            "workers": lambda: [w.pid for w in stack.workers.values() if w.alive()],
            "postgres": lambda: postgres_pids(stack.pg_pid),
        }
    )
    cpu0 = meter.snapshot()
    try:
        async with open_database(reaper_cfg) as db:
            for i in range(1, int(plan.run_s / plan.period_s) + 2):
                await trio.sleep(_until(started + i * plan.period_s))
                with trio.fail_after(30):
                    facts = await trio.to_thread.run_sync(sampler.sample)
                window = load.take_window()
                t = time.perf_counter() - started
                elapsed = plan.period_s if not samples else t - samples[-1]["t_s"]
                lat = [x * 1000 for x in window.latencies]
                sample = {
                    "t_s": round(t, 1),
                    "load": {
                        "requests": window.requests,
                        "rps": round(window.requests / elapsed, 1),
                        "ok": window.ok,
                        "expected_errors": window.expected_errors,
                        "unexpected_errors": window.unexpected,
                        "polled_after_timeout": window.polled,
                        "coalesced": window.coalesced,
                        "p50_ms": round(percentile(lat, 50), 1) if lat else None,
                        "p99_ms": round(percentile(lat, 99), 1) if lat else None,
                    },
                    "cpu_pct": meter.since(cpu0),
                    **facts,
                }
                cpu0 = meter.snapshot()
                with trio.fail_after(60):
                    aged = (
                        0
                        if real_blob_ttl
                        else await trio.to_thread.run_sync(sampler.age_blobs, plan.retention_s)
                    )
                    reaped = await reap_once(db, retention)
                sample["reaper"] = {**asdict(reaped), "blobs_aged": aged}
                samples.append(sample)
                _print_progress(sample)
                dead = [n for n, p in facts["procs"].items() if p.get("alive") is False]
                if dead:
                    print(f"  child(ren) died: {dead}; ending the run", flush=True)
                    break
                if time.perf_counter() >= deadline:
                    break
    finally:
        await trio.to_thread.run_sync(sampler.close)
    return samples


def _until(when: float) -> float:
    return max(0.0, when - time.perf_counter())


def _print_progress(s: dict[str, Any]) -> None:
    q, ld = s["maestro_queues"], s["load"]
    print(
        f"  t={s['t_s']:>6.1f}s rps {ld['rps']:>6.1f} unexpected {ld['unexpected_errors']}"
        f" | bff {s['procs'].get('bff', {}).get('rss_mb')} MB pg {s['postgres'].get('rss_mb')} MB"
        f" | conns {sum(s['connections'].values())} | queue {q['total_bytes'] // 1024} kB"
        f" live {q.get('n_live_tup')} dead {q.get('n_dead_tup')}"
        f" | reaped {s['reaper']['done_deleted'] + s['reaper']['poison_deleted']}",
        flush=True,
    )


# -- the run -------------------------------------------------------------------


async def soak(stack: Stack, demo_name: str, real_blob_ttl: bool) -> dict[str, Any]:
    plan = stack.plan
    out: dict[str, Any] = {}
    with trio.fail_after(SETUP_BUDGET_S + plan.run_s + DRAIN_GRACE_S + 60):
        async with open_bridge():
            t0 = time.perf_counter()
            stack.ro_dsn = await prepare_databases(stack.server.dsn, demo_name)
            out["demo_db_s"] = round(time.perf_counter() - t0, 1)
            ids = await trio.to_thread.run_sync(
                demo_ids, with_dbname(stack.server.dsn, demo_name), "soak-setup"
            )
            t0 = time.perf_counter()
            await start_stack(stack)
            out["stack_start_s"] = round(time.perf_counter() - t0, 1)
            print(
                f"stack up in {out['stack_start_s']}s (logs in {stack.kids.log_dir}); "
                f"{plan.clients} clients for {plan.run_s:g}s, a sample every {plan.period_s:g}s, "
                f"retention {plan.retention_s:g}s",
                flush=True,
            )
            mix = Mix(ids)
            load = Load()
            started = time.perf_counter()
            deadline = started + plan.run_s
            async with trio.open_nursery() as nursery:
                for k in range(plan.clients):
                    nursery.start_soon(run_client, k, stack, mix, load, deadline)
                samples = await sample_loop(stack, load, started, deadline, real_blob_ttl)
                if time.perf_counter() < deadline:  # ended early (a child died)
                    nursery.cancel_scope.cancel()
                nursery.cancel_scope.deadline = trio.current_time() + _until(
                    deadline + DRAIN_GRACE_S
                )
            out["load_s"] = round(time.perf_counter() - started, 1)
            out["samples"] = samples
            out["load"] = load
    return out


# -- verdicts ------------------------------------------------------------------


def series(samples: Sequence[dict[str, Any]]) -> dict[str, tuple[str, list[float | None]]]:
    """metric -> (unit, one value per sample)."""
    out: dict[str, tuple[str, list[float | None]]] = {}

    def put(i: int, name: str, unit: str, value: Any) -> None:
        out.setdefault(name, (unit, [None] * len(samples)))[1][i] = value

    for i, s in enumerate(samples):
        for name, p in s["procs"].items():
            put(i, f"RSS {name}, MB", "MB", p.get("rss_mb"))
            if "fds" in p:
                put(i, f"open fds {name}", "fds", p.get("fds"))
        pg = s["postgres"]
        if pg:
            put(i, "RSS Postgres (sum; shared buffers per backend), MB", "info", pg["rss_mb"])
            put(i, "RSS Postgres private (VmRSS-RssShmem, sum), MB", "MB", pg["private_mb"])
            put(i, "RssAnon Postgres (sum), MB", "MB", pg["anon_mb"])
            put(i, "Postgres processes", "procs", pg["processes"])
        total = 0
        for app, n in s["connections"].items():
            put(i, f"connections {app}", "conns", n)
            total += n if not app.startswith("soak-") else 0
        put(i, "connections, stack total", "conns", total)
        q, b = s["maestro_queues"], s["surface_result_blobs"]
        put(i, "maestro_queues total size, kB", "kB", q["total_bytes"] / 1024)
        put(i, "maestro_queues indexes, kB", "kB", q["index_bytes"] / 1024)
        put(i, "maestro_queues n_live_tup", "rows", q.get("n_live_tup"))
        put(i, "maestro_queues n_dead_tup", "rows", q.get("n_dead_tup"))
        status = q["rows_by_status"]
        put(i, "maestro_queues rows (all)", "rows", sum(status.values()))
        for st in ("pending", "in_progress", "done", "poison"):
            put(i, f"maestro_queues rows {st}", "rows", status.get(st, 0))
        put(i, "surface_result_blobs total size, kB", "kB", b["total_bytes"] / 1024)
        put(i, "surface_result_blobs rows", "rows", b["rows"])
    for i, s in enumerate(samples):
        put(i, "throughput, requests/s", "rps", s["load"]["rps"])
        put(i, "latency p99 (interactive ops), ms", "ms", s["load"]["p99_ms"])
        put(i, "unexpected errors in the interval", "errors", s["load"]["unexpected_errors"])
        for party in ("bff", "workers", "postgres", "bench", "others"):
            put(i, f"CPU {party}, % of one core", "info", s["cpu_pct"].get(f"{party}_pct"))
    return out


def judge(unit: str, values: Sequence[float | None], steady: Sequence[bool]) -> dict[str, Any]:
    """First third vs last third of the steady samples, and the max of all samples."""
    judged = [v for v, ok in zip(values, steady, strict=True) if ok and v is not None]
    every = [v for v in values if v is not None]
    if len(judged) < 3:
        return {"verdict": "too few samples", "max": max(every) if every else None}
    third = max(1, len(judged) // 3)
    first, last = statistics.fmean(judged[:third]), statistics.fmean(judged[-third:])
    growth = (last - first) / first if first else (0.0 if last == first else float("inf"))
    out: dict[str, Any] = {
        "first_third_avg": round(first, 2),
        "last_third_avg": round(last, 2),
        "max": max(every),
        "growth_pct": round(100 * growth, 1) if growth != float("inf") else None,
        "samples_judged": len(judged),
    }
    if unit == "info":
        out["verdict"] = "info"
    elif unit == "errors":
        out["verdict"] = "ok" if sum(judged) == 0 else "errors"
    elif unit == "rps":
        out["verdict"] = "dropping" if last < (1 - GROWTH_LIMIT) * first else "steady"
    elif unit == "ms":
        out["verdict"] = "slower" if growth > GROWTH_LIMIT and last - first > 20 else "steady"
    else:
        floor = FLOORS.get(unit, 0.0)
        out["noise_floor"] = floor
        out["verdict"] = "growing" if growth > GROWTH_LIMIT and last - first > floor else "bounded"
    return out


def log_errors(stack: Stack) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for name, child in stack.children().items():
        text = child.output()
        out[name] = {
            "tracebacks": text.count("Traceback (most recent call last)"),
            "error_lines": sum(1 for line in text.splitlines() if " ERROR " in line),
        }
    return out


def report(
    stack: Stack,
    settings: dict[str, str],
    machine: dict[str, Any],
    migrate_out: str,
    raw: dict[str, Any],
    real_blob_ttl: bool,
) -> dict[str, Any]:
    plan = stack.plan
    samples: list[dict[str, Any]] = raw["samples"]
    load: Load = raw["load"]
    steady = [s["t_s"] >= plan.warmup_s for s in samples]
    metrics = {
        name: {"unit": unit, **judge(unit, values, steady)}
        for name, (unit, values) in series(samples).items()
    }
    if not plan.table_conclusive:  # too short for the tables to settle: say so
        for name, m in metrics.items():
            if name.startswith(TABLE_METRICS) and m["verdict"] == "growing":
                m["verdict"] = "unsettled"
    flagged = {n: m["verdict"] for n, m in metrics.items() if m["verdict"] not in _GOOD}
    resources = {n: v for n, v in flagged.items() if metrics[n]["unit"] not in ("rps", "ms")}
    dead = sorted({n for s in samples for n, p in s["procs"].items() if p.get("alive") is False})
    total = sum(s["load"]["requests"] for s in samples)
    return {
        "bounded": not resources and not dead and not load.unexpected,
        "flagged": flagged,
        "performance_steady": not (flagged.keys() - resources.keys()),
        "table_conclusive": plan.table_conclusive,
        "unsettled": sorted(n for n, m in metrics.items() if m["verdict"] == "unsettled"),
        "children_died": dead,
        "requests": total,
        "requests_per_s": round(total / raw["load_s"], 1) if raw["load_s"] else None,
        "unexpected_errors": sum(load.unexpected.values()),
        "unexpected_error_kinds": dict(load.unexpected.most_common(20)),
        "metrics": metrics,
        "traffic": {
            "by_operation_outcome": dict(sorted(load.by_op.items())),
            "cache": dict(load.cache),
            "coalesced": load.coalesced,
            "polled_after_timeout": load.polled,
            "pdfs": load.pdfs,
            "pdf_bytes_avg": round(load.pdf_bytes / load.pdfs) if load.pdfs else None,
            "latency_ms_by_operation": {
                op: {
                    "n": len(v),
                    "p50": round(percentile(v, 50) * 1000, 1),
                    "p99": round(percentile(v, 99) * 1000, 1),
                }
                for op, v in sorted(load.latencies_by_op.items())
            },
        },
        "child_logs": log_errors(stack),
        "date": now_iso(),
        "machine": machine,
        "config": {
            "server": stack.server.kind,
            "server_settings": settings,
            "embedded_settings_passed": stack.server.extra_settings,
            "migrate": migrate_out,
            "plan": plan.describe(),
            "method": "docs/perf/soak.md (the stack, the mix, retention, the verdict rule)",
            "surfaces": list(SURFACES),
            "weights": WEIGHTS,
            "real_blob_ttl": real_blob_ttl,
            "growth_limit": GROWTH_LIMIT,
            "noise_floors": FLOORS,
            "maintenance_seconds": MAINTENANCE_SECONDS,
            "demo_db_s": raw["demo_db_s"],
            "stack_start_s": raw["stack_start_s"],
            "load_s": raw["load_s"],
        },
        "samples": samples,
    }


_GOOD = ("bounded", "steady", "ok", "info", "unsettled")
TABLE_METRICS = ("maestro_queues", "surface_result_blobs")


def print_tables(result: dict[str, Any]) -> None:
    rows = []
    for name, m in result["metrics"].items():
        if name.startswith("open fds") or (
            name.startswith("connections ") and name != "connections, stack total"
        ):
            continue  # in the JSON; the table keeps the headline figures
        rows.append(
            [
                name,
                m.get("first_third_avg", ""),
                m.get("last_third_avg", ""),
                m.get("max", ""),
                "" if m.get("growth_pct") is None else f"{m['growth_pct']:+.1f}%",
                m["verdict"],
            ]
        )
    print()
    print(
        format_table(["metric", "first 1/3 avg", "last 1/3 avg", "max", "growth", "verdict"], rows)
    )
    timeline = []
    for s in result["samples"]:
        q, ld = s["maestro_queues"], s["load"]
        workers = sum(p["rss_mb"] for n, p in s["procs"].items() if n.startswith("worker-"))
        timeline.append(
            [
                s["t_s"],
                ld["rps"],
                ld["unexpected_errors"],
                ld["p99_ms"],
                s["procs"].get("bff", {}).get("rss_mb"),
                round(workers, 1),
                s["postgres"].get("rss_mb", ""),
                sum(n for a, n in s["connections"].items() if not a.startswith("soak-")),
                q["total_bytes"] // 1024,
                q.get("n_live_tup"),
                q.get("n_dead_tup"),
                sum(q["rows_by_status"].values()),
                s["surface_result_blobs"]["total_bytes"] // 1024,
                s["reaper"]["done_deleted"] + s["reaper"]["poison_deleted"],
                round(sum(s["cpu_pct"].get(f"{k}_pct", 0) for k in STACK_PARTIES)),
                round(s["cpu_pct"].get("others_pct", 0)),
            ]
        )
    print()
    heads = ["t s", "rps", "unexp", "p99 ms", "bff MB", "workers MB", "pg MB", "conns"]
    heads += ["queue kB", "live", "dead", "rows", "blobs kB", "reaped", "cpu %", "others %"]
    print(format_table(heads, timeline))
    t = result["traffic"]
    print(
        f"\nrequests {result['requests']} ({result['requests_per_s']}/s); unexpected errors "
        f"{result['unexpected_errors']}; cache {t['cache']}; coalesced {t['coalesced']}; "
        f"polled after TIMEOUT {t['polled_after_timeout']}; PDFs {t['pdfs']}"
    )
    if result["unexpected_error_kinds"]:
        print(f"unexpected: {result['unexpected_error_kinds']}")
    print(f"child logs: {result['child_logs']}")
    verdict = "BOUNDED" if result["bounded"] else "NOT BOUNDED"
    if result["flagged"]:
        verdict += f"; flagged: {result['flagged']}"
    if not result["table_conclusive"]:
        plan = result["config"]["plan"]
        verdict += (
            f"\nqueue-table verdicts inconclusive: the table settles after ~{plan['settle_s']:g} s "
            f"(two autovacuum cycles) and this run lasted {plan['run_s']:g} s; run "
            f">= {math.ceil(2 * plan['settle_s'] / 60)} minutes to judge it"
        )
        if result["unsettled"]:
            verdict += f" (still rising: {', '.join(result['unsettled'])})"
    if result["children_died"]:
        verdict += f"; children died: {result['children_died']}"
    print(f"\nverdict: {verdict}")


# -- main ----------------------------------------------------------------------


def _naptime(dsn: str) -> float:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT setting::float8 FROM pg_settings WHERE name = 'autovacuum_naptime'"
        ).fetchone()
    return float(row[0]) if row else 60.0


def run(plan: Plan, real_blob_ttl: bool) -> dict[str, Any]:
    """Bring up the scratch server and the stack, soak, tear it all down."""
    raise_own_nofile()
    log_dir = Path(tempfile.mkdtemp(prefix="dataplane-soak-logs-"))
    ok = False
    try:
        with scratch_server("dataplane_soak") as server, demo_db_scope(server) as demo_name:
            kids = Children(log_dir)
            try:  # every child stops before the demo DB and the server go
                print(f"server: {server.kind}; migrating, building the demo DB...", flush=True)
                settings, machine = server_facts(server)
                plan = dataclasses.replace(plan, autovacuum_naptime_s=_naptime(server.dsn))
                env = base_env(server.dsn, plan)
                migrate_out = migrate_schema(env)
                stack = Stack(server, kids, plan, env, pg_pid=postmaster_pid(server))
                raw = trio.run(until_signalled, soak, stack, demo_name, real_blob_ttl)
                result = report(stack, settings, machine, migrate_out, raw, real_blob_ttl)
            finally:
                kids.stop_all()
        ok = True
        return result
    finally:
        if ok:
            shutil.rmtree(log_dir, ignore_errors=True)
        else:
            print(f"child logs kept in {log_dir}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    install_process()  # as the entry points do (DATAPLANE_STOCK_STACK honoured)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=10.0, help="load duration (default 10)")
    parser.add_argument("--quick", action="store_true", help="1 minute (CI-sized)")
    parser.add_argument("--clients", type=int, default=Plan.clients, help="concurrent clients")
    parser.add_argument(
        "--real-blob-ttl",
        action="store_true",
        help="leave blob expiry alone (24 h): the blob table then only grows",
    )
    parser.add_argument("--output", type=Path, help="result JSON (default bench/results/)")
    args = parser.parse_args(argv)
    minutes = 1.0 if args.quick else args.minutes
    if not 0.25 <= minutes <= 24 * 60:
        parser.error("--minutes must be between 0.25 and 1440")
    if not 1 <= args.clients <= 1000:
        parser.error("--clients must be between 1 and 1000")
    plan = Plan(minutes=minutes, clients=args.clients)
    started = time.perf_counter()
    result = interruptible(lambda: as_result(run(plan, args.real_blob_ttl)))
    if result is None:
        return 130
    result.total_seconds = round(time.perf_counter() - started, 1)
    print_tables(result.detail)
    print(f"\nwrote {result.save(args.output)} ({result.total_seconds}s)")
    return 0 if result.figures["bounded"] else 1


def as_result(report: dict[str, Any]) -> Result:
    """The soak's report in the one result schema: its verdicts as figures."""
    figures = {
        key: report[key]
        for key in ("bounded", "performance_steady", "requests", "requests_per_s")
        if key in report
    }
    figures["unexpected_errors"] = report.get("unexpected_errors")
    return Result(
        tool="soak",
        scenarios=[],
        figures=figures,
        detail=report,
        config=report.get("config", {}),
        machine=report.get("machine", {}),
        date=report.get("date") or now_iso(),
    )


if __name__ == "__main__":
    sys.exit(main())
