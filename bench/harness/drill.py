"""A failover drill: real BFFs and workers on an HA cluster under steady load, a fault.

Shared by bench/failover.py (publishes the figures) and tests/ha/test_failover.py
(asserts the promises). One drill: the cluster (:class:`HACluster`) is up and migrated,
a stack of 2 BFFs and 2 workers runs on it — one BFF and one worker through the libpq
multi-host DSN, the others through HAProxy, so both ways in are exercised at once —,
a steady open-loop load (``rate`` requests a second for ``duration`` seconds) runs,
and ``fault`` is applied ``fault_at`` seconds in. Meanwhile three watchers record:

* every request: 503s (each must carry ``Retry-After``), any other unexpected status,
  when it was accepted (202) and answered (``done``, or ``POISON``/``TIMEOUT`` then a
  poll) on its stream;
* a write probe: a fresh connection through the multi-host DSN inserts a row every
  :data:`PROBE_EVERY` seconds; the longest gap between the ends of successful inserts
  is the write outage (a commit waiting for the synchronous standby counts);
* each BFF's ``/readyz`` every :data:`PROBE_EVERY` seconds: when it went unready and
  when it was ready again.

A trigger installed before the drill logs every write that leaves a row ``done``
(``ha_done_log``): more than one entry for a job is a second completion or a
replaced answer.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import trio

from bench.harness.procs import WORKER_ARGV, Child, Children
from bench.harness.stack import HOST, JWT_SECRET, Hypercorn, stack_env, start_bff, wait_serving
from dataplane.auth.claims import mint_token
from dataplane.dev.ha import HACluster

PROBE_EVERY = 0.1  # seconds between write probes and between /readyz checks
GIVE_UP = 120.0  # seconds a request keeps retrying (POST 503s, cut streams) before it counts lost
RETRY_DELAY = 0.25  # seconds between a client's retries
DB_NAME = "dataplane"

AUDIT_SQL = """
CREATE TABLE IF NOT EXISTS ha_done_log (id uuid, result jsonb, at timestamptz DEFAULT now());
CREATE TABLE IF NOT EXISTS ha_probe (at timestamptz DEFAULT now());
CREATE OR REPLACE FUNCTION ha_done_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO ha_done_log (id, result) VALUES (NEW.id, NEW.result);
  RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS ha_done_audit ON maestro_queues;
CREATE TRIGGER ha_done_audit AFTER UPDATE ON maestro_queues
  FOR EACH ROW WHEN (NEW.status = 'done') EXECUTE FUNCTION ha_done_audit();
"""


@dataclass
class Request:
    started: float
    job_id: str | None = None
    accepted: float | None = None
    answered: str | None = None  # "done" | "poison" | "timeout-then-poll"
    answered_at: float | None = None
    result: Any = None
    refused: int = 0  # 503s
    refused_at: list[float] = field(default_factory=list)
    no_retry_after: int = 0  # 503s without Retry-After
    unexpected: list[str] = field(default_factory=list)  # other statuses, lost streams
    reconnects: int = 0  # streams cut or refused, then opened again
    dropped: int = 0  # POSTs whose connection failed (no status): retried
    longest_post: float = 0.0  # seconds, the slowest single POST's round trip
    longest_post_at: float = 0.0  # when it was sent


@dataclass
class Readiness:
    name: str
    unready: list[tuple[float, float]] = field(default_factory=list)  # [start, end) spans


@dataclass
class Drill:
    """What one drill saw (times are ``time.monotonic()``)."""

    fault: str
    fault_at: float = 0.0
    fault_done: float = 0.0
    requests: list[Request] = field(default_factory=list)
    probe_ok: list[float] = field(default_factory=list)
    readiness: list[Readiness] = field(default_factory=list)
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    done_log: dict[str, int] = field(default_factory=dict)

    def write_outage(self) -> float:
        """Longest gap between successful probe writes after the fault began."""
        after = [t for t in self.probe_ok if t >= self.fault_at - 1]
        gaps = [b - a for a, b in itertools.pairwise(after)]
        return max(gaps, default=0.0)

    def ready_again(self) -> float:
        """Seconds from the fault until every BFF answered /readyz 200 again."""
        ends = [end for r in self.readiness for start, end in r.unready if end >= self.fault_at]
        return max(ends, default=self.fault_at) - self.fault_at

    def refused(self) -> int:
        return sum(r.refused for r in self.requests)

    def in_flight_p99(self) -> float:
        """p99 seconds (first POST to answer) of requests started within 30 s of the fault."""
        spans = [
            r.answered_at - r.started
            for r in self.requests
            if r.answered_at is not None and self.fault_at - 5 <= r.started <= self.fault_at + 30
        ]
        if len(spans) < 2:
            return max(spans, default=0.0)
        return statistics.quantiles(spans, n=100)[98]

    def figures(self) -> dict[str, Any]:
        return {
            "fault": self.fault,
            "requests": len(self.requests),
            "accepted": sum(r.job_id is not None for r in self.requests),
            "write_outage_s": round(self.write_outage(), 2),
            "every_bff_ready_after_s": round(self.ready_again(), 2),
            "refused_503": self.refused(),
            "requests_refused": sum(r.refused > 0 for r in self.requests),
            "stream_reconnects": sum(r.reconnects for r in self.requests),
            "posts_dropped": sum(r.dropped for r in self.requests),
            "slowest_post_s": round(max((r.longest_post for r in self.requests), default=0), 2),
            "in_flight_p99_s": round(self.in_flight_p99(), 2),
        }


@dataclass
class HAStack:
    """2 BFFs and 2 workers on ``cluster``: index 0 via the multi-host DSN, 1 via HAProxy.
    The BFFs keep connections alive 75 s, as deployed (no idle-close race with clients)."""

    cluster: HACluster
    logs: Path
    bffs: list[Hypercorn] = field(default_factory=list)
    workers: list[Child] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.children = Children(self.logs)

    def dsns(self) -> list[str]:
        return [self.cluster.multihost_dsn(DB_NAME), self.cluster.haproxy_dsn(DB_NAME)]

    def env(self, dsn: str) -> dict[str, str]:
        return stack_env(
            dsn,
            DATAPLANE_SWEEP_SECONDS="1",
            MAESTRO_LEASE_SECONDS="10",
            MAESTRO_RENEW_SECONDS="2",
            DATAPLANE_FAIL_BACKOFF_SECONDS="0.5",
            DATAPLANE_IDLE_MS="500",
            DATAPLANE_MAINTENANCE_SECONDS="2",
            DATAPLANE_QUEUE_SAMPLE_SECONDS="2",  # the leader's sampler
            DATAPLANE_MAX_DEQUEUES="20",  # a fault is not poison
        )

    async def start(self) -> None:
        for i, dsn in enumerate(self.dsns()):
            env = {**self.env(dsn), "SURFACE_QUEUE_TYPE": "surface-probe"}
            self.workers.append(self.children.start(f"worker-{i}", WORKER_ARGV, env))
            self.bffs.append(await start_bff(self.children, f"bff-{i}", self.env(dsn), within=60))
        await wait_serving(self.workers, within=60)

    def stop(self) -> None:
        self.children.stop_all()

    def dead(self) -> list[str]:
        return [str(c.log_path) for c in self.children.started if not c.alive()]


def base(bff: Hypercorn) -> str:
    return f"http://{HOST}:{bff.port}"


def prepare(cluster: HACluster) -> None:
    """Create and migrate the queue DB on the cluster, and install the audit trigger."""
    with psycopg.connect(cluster.multihost_dsn(), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME]).fetchone():
            conn.execute(f'CREATE DATABASE "{DB_NAME}"')
    subprocess.run(
        [sys.executable, "-m", "dataplane", "migrate"],
        env={**os.environ, "MAESTRO_QUEUES_URL": cluster.multihost_dsn(DB_NAME)},
        check=True,
        timeout=120,
    )
    with psycopg.connect(cluster.multihost_dsn(DB_NAME), autocommit=True) as conn:
        conn.execute(AUDIT_SQL)


async def one_request(http: httpx.AsyncClient, bases: Sequence[str], i: int, req: Request) -> None:
    """POST (retrying 503s and refused connections), then read the stream to its answer."""
    # distinct (client, ms) per request: nothing coalesces, every 202 is its own job
    tok = _bearer(mint_token(JWT_SECRET, client=f"c{i // 100}", sub="u1", staff=True))
    body: dict[str, Any] | None = None
    with trio.move_on_after(GIVE_UP):
        while body is None:
            sent = time.monotonic()
            try:
                resp = await http.post(
                    f"{random.choice(bases)}/api/probe/q",
                    json={"operation": "sleep", "params": {"ms": 20 + i % 100}},
                    headers=tok,
                )
            except httpx.TransportError:
                req.dropped += 1  # a refused or cut connection: retried, counted
            else:
                if time.monotonic() - sent > req.longest_post:
                    req.longest_post, req.longest_post_at = time.monotonic() - sent, sent
                if resp.status_code == 202:
                    body = resp.json()
                    break
                if resp.status_code == 503:
                    req.refused += 1
                    req.refused_at.append(time.monotonic())
                    req.no_retry_after += "Retry-After" not in resp.headers
                    await trio.sleep(_retry_after(resp))
                    continue
                else:
                    req.unexpected.append(f"POST {resp.status_code}: {resp.text[:200]}")
            await trio.sleep(RETRY_DELAY)
    if body is None:
        req.unexpected.append("POST never accepted")
        return
    req.job_id, req.accepted = body["jobId"], time.monotonic()
    with trio.move_on_after(GIVE_UP):
        await _answer(http, bases, body, req)
    if req.answered is None:
        req.unexpected.append("never answered")


def _bearer(tok: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tok}"}


async def last_event(http: httpx.AsyncClient, url: str) -> tuple[int, dict[str, str]]:
    """GET an event stream to its ``done`` or ``error`` (or its close): the status and the
    last event's fields (``event``, ``data``; empty when none came)."""
    last: dict[str, str] = {}
    async with http.stream("GET", url) as resp:
        if resp.status_code != 200:
            await resp.aread()
            return resp.status_code, last
        event: dict[str, str] = {}
        async for line in resp.aiter_lines():
            if line == "" and event:
                last, event = event, {}
                if last.get("event") in ("done", "error"):
                    break
            elif line and not line.startswith(":"):
                key, _, value = line.partition(":")
                event[key] = value.removeprefix(" ")
        return resp.status_code, last


def _retry_after(resp: httpx.Response) -> float:
    """The pause a well-behaved client takes after a 503: its Retry-After, capped."""
    try:
        return min(max(float(resp.headers.get("Retry-After", "")), RETRY_DELAY), 2.0)
    except ValueError:
        return RETRY_DELAY


async def _answer(
    http: httpx.AsyncClient, bases: Sequence[str], body: dict[str, Any], req: Request
) -> None:
    timed_out = False
    while not timed_out:
        try:
            status, last = await last_event(http, random.choice(bases) + body["streamUrl"])
        except httpx.TransportError:
            status, last = 0, {}
        if status == 200 and last.get("event") == "done":
            req.answered, req.result = "done", json.loads(last["data"])
            req.answered_at = time.monotonic()
            return
        data = str(last.get("data") or "")
        if status == 200 and last.get("event") == "error" and "POISON" in data:
            req.answered, req.answered_at = "poison", time.monotonic()
            return
        timed_out = status == 200 and "TIMEOUT" in data
        if status not in (0, 200, 503):
            req.unexpected.append(f"stream {status}")
        if not timed_out:
            req.reconnects += 1
            await trio.sleep(RETRY_DELAY)  # a cut or refused stream: reconnect, as EventSource
    while True:
        try:
            resp = await http.get(random.choice(bases) + body["pollUrl"])
            if resp.status_code == 200:
                req.answered, req.result = "timeout-then-poll", resp.json()
                req.answered_at = time.monotonic()
                return
        except httpx.TransportError:
            pass
        await trio.sleep(RETRY_DELAY)


async def steady_load(bases: Sequence[str], rate: float, duration: float, drill: Drill) -> None:
    """Open loop: one new request every 1/rate s for ``duration`` s, each to its answer."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=200)
    async with (
        httpx.AsyncClient(timeout=httpx.Timeout(GIVE_UP, connect=5), limits=limits) as http,
        trio.open_nursery() as nursery,
    ):
        start = time.monotonic()
        for i in range(int(rate * duration)):
            await trio.sleep_until(_trio_at(start + i / rate))
            req = Request(started=time.monotonic())
            drill.requests.append(req)
            nursery.start_soon(one_request, http, bases, i, req)


def _trio_at(monotonic_at: float) -> float:
    return trio.current_time() + (monotonic_at - time.monotonic())


async def write_probe(dsn: str, drill: Drill) -> None:
    """Insert a row through a fresh connection every PROBE_EVERY s (until cancelled)."""

    def once() -> bool:
        try:
            # No statement_timeout: a commit waiting for the synchronous standby is
            # part of the outage (a cancelled wait would still report success).
            with psycopg.connect(dsn, autocommit=True, connect_timeout=1) as conn:
                conn.execute("INSERT INTO ha_probe DEFAULT VALUES")
            return True
        except psycopg.Error:
            return False

    while True:
        if await trio.to_thread.run_sync(once, abandon_on_cancel=True):
            drill.probe_ok.append(time.monotonic())
        await trio.sleep(PROBE_EVERY)


async def watch_ready(bff: Hypercorn, seen: Readiness) -> None:
    async with httpx.AsyncClient(base_url=base(bff), timeout=1) as http:
        since: float | None = None
        while True:
            try:
                ok = (await http.get("/readyz")).status_code == 200
            except httpx.HTTPError:
                ok = False
            now = time.monotonic()
            if not ok and since is None:
                since = now
            elif ok and since is not None:
                seen.unready.append((since, now))
                since = None
            await trio.sleep(PROBE_EVERY)


async def run_drill(
    stack: HAStack,
    fault: str,
    apply_fault: Callable[[], Awaitable[None]],
    *,
    rate: float,
    duration: float,
    fault_at: float,
) -> Drill:
    """Load, fault at ``fault_at`` s, load to its end, every request answered; then read
    the rows and the audit log."""
    drill = Drill(fault)
    bases = [base(bff) for bff in stack.bffs]
    drill.readiness = [Readiness(str(b.child.log_path)) for b in stack.bffs]
    async with trio.open_nursery() as watchers:
        watchers.start_soon(write_probe, stack.cluster.multihost_dsn(DB_NAME), drill)
        for bff, seen in zip(stack.bffs, drill.readiness, strict=True):
            watchers.start_soon(watch_ready, bff, seen)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(steady_load, bases, rate, duration, drill)
            await trio.sleep(fault_at)
            drill.fault_at = time.monotonic()
            await apply_fault()
            drill.fault_done = time.monotonic()
        await trio.sleep(1)  # the watchers see the end of every unready span
        watchers.cancel_scope.cancel()
    drill.rows, drill.done_log = read_rows(stack.cluster.multihost_dsn(DB_NAME))
    return drill


def read_rows(dsn: str) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        rows = {
            str(r[0]): {"status": r[1], "result": r[2], "dequeue_count": r[3], "last_error": r[4]}
            for r in conn.execute(
                "SELECT id, status, result, dequeue_count, last_error FROM maestro_queues"
            )
        }
        log = {
            str(r[0]): int(r[1])
            for r in conn.execute("SELECT id, count(*) FROM ha_done_log GROUP BY id")
        }
    return rows, log


def broken_promises(drill: Drill) -> list[str]:
    """Every way the drill broke a promise, one line each (empty: all held)."""
    broken: list[str] = []
    for r in drill.requests:
        broken += [f"request {r.job_id}: {u}" for u in r.unexpected]
        if r.no_retry_after:
            broken.append(f"request {r.job_id}: {r.no_retry_after} 503(s) without Retry-After")
        if r.job_id is None:
            continue
        row = drill.rows.get(r.job_id)
        if row is None:
            broken.append(f"job {r.job_id}: accepted (202), row lost")
            continue
        if r.answered == "done" and row["status"] != "done":
            broken.append(f"job {r.job_id}: answered done, row {row['status']}")
        stored = (row["result"] or {}).get("data")
        if r.answered == "done" and r.result.get("result") != stored:
            broken.append(f"job {r.job_id}: answer {r.result} differs from row {stored}")
        if r.answered == "poison":
            broken.append(f"job {r.job_id}: POISON ({row['last_error']}): a fault is not poison")
        writes = drill.done_log.get(r.job_id, 0)
        if row["status"] == "done" and writes != 1:
            broken.append(f"job {r.job_id}: written done {writes} times")
    return broken


def summary(drill: Drill) -> str:
    spans = "; ".join(
        f"{Path(r.name).stem} unready "
        + ", ".join(f"{a - drill.fault_at:+.1f}..{b - drill.fault_at:+.1f}s" for a, b in r.unready)
        for r in drill.readiness
    )
    slow = max(
        (r for r in drill.requests if r.answered_at is not None),
        key=lambda r: r.answered_at - r.started,  # type: ignore[operator]
        default=None,
    )
    if slow is not None and slow.answered_at is not None:
        at = drill.fault_at
        spans += (
            f"; slowest: started {slow.started - at:+.1f}s accepted "
            f"{(slow.accepted or at) - at:+.1f}s answered {slow.answered_at - at:+.1f}s "
            f"({slow.answered}, {slow.refused} 503s, {slow.reconnects} stream reconnects)"
        )
    post = max(drill.requests, key=lambda r: r.longest_post, default=None)
    if post is not None:
        spans += f"; slowest POST sent {post.longest_post_at - drill.fault_at:+.1f}s"
    return " ".join(f"{k}={v}" for k, v in drill.figures().items()) + f" ({spans})"
