"""The telemetry receiver (``dataplane.capcom.app``) over real HTTP (in-process Hypercorn)
and Postgres, and the capcom sender against it, a closed port and a hanging listener."""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any, cast

import httpx
import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from dataplane.db import Database
from dataplane.dev.embedded import free_port
from dataplane.http import RequireTrio
from dataplane.worker import JobReport
from dataplane.worker.sender import CapcomSender
from tests.conftest import wait_until

TOKEN = "capcom-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def report(**overrides: Any) -> JobReport:
    base = JobReport(
        job_id=str(uuid.uuid4()),
        type="surface-probe",
        operation="echo",
        outcome="done",
        wall_ms=1.25,
        cpu_ms=0.75,
        rss_bytes=52_428_800,
        queue_wait_ms=0.9,
        cache="bypass",
        coalesced=False,
        dequeue_count=1,
        worker_id="surface-probe@host:123:abcdef",
        finished_at=time.time(),
    )
    return replace(base, **overrides)


def report_json(**overrides: Any) -> dict[str, Any]:
    r = report()
    body = {name: getattr(r, name) for name in r.__dataclass_fields__}
    body.update(overrides)
    return body


@dataclass
class Capcom:
    base: str
    app: Any
    shutdown: trio.Event


async def start_capcom(nursery: trio.Nursery) -> Capcom:
    """Serve a fresh capcom app on a free port (environment read at startup)."""
    from dataplane.capcom.app import REQUIRE_TRIO, create_app

    quart_app = create_app()
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    shutdown = trio.Event()
    binds = await nursery.start(
        functools.partial(
            serve,
            cast(Any, RequireTrio(quart_app, REQUIRE_TRIO)),
            config,
            shutdown_trigger=shutdown.wait,
        )
    )
    return Capcom(binds[0], quart_app, shutdown)


@dataclass
class HangingListener:
    """Accepts TCP connections and never answers (nor reads)."""

    port: int
    accepted: list[trio.SocketStream] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


async def open_hanging_listener(nursery: trio.Nursery) -> HangingListener:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    hanging = HangingListener(listeners[0].socket.getsockname()[1])

    async def hold(stream: trio.SocketStream) -> None:
        hanging.accepted.append(stream)
        await trio.sleep_forever()

    nursery.start_soon(trio.serve_listeners, hold, listeners)
    return hanging


@pytest.fixture
def capcom_env(queue_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATAPLANE_CAPCOM_TOKEN", TOKEN)
    monkeypatch.setenv("DATAPLANE_CAPCOM_DB_URL", queue_dsn)
    monkeypatch.delenv("DATAPLANE_METRICS", raising=False)


@pytest.fixture
async def capcom(capcom_env: None, nursery: trio.Nursery) -> AsyncIterator[Capcom]:
    server = await start_capcom(nursery)
    yield server
    server.shutdown.set()


@pytest.fixture
async def http(capcom: Capcom) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=capcom.base, timeout=10) as client:
        yield client


async def runs(db: Database) -> int:
    row = await db.fetchone("SELECT count(*) AS n FROM worker_runs")
    assert row is not None
    return int(row["n"])


# -- the receiver -------------------------------------------------------------


async def test_a_valid_report_is_one_worker_runs_row(http: httpx.AsyncClient, db: Database) -> None:
    body = report_json(outcome="poison", cache="miss", coalesced=True, dequeue_count=5)
    resp = await http.post("/worker/job-finished", json=body, headers=AUTH)
    assert resp.status_code == 204, resp.text
    row = await db.fetchone("SELECT *, extract(epoch FROM finished_at) AS unix FROM worker_runs")
    assert row is not None
    assert str(row["job_id"]) == body["job_id"]
    for name in ("type", "operation", "outcome", "wall_ms", "cpu_ms", "rss_bytes"):
        assert row[name] == body[name], name
    for name in ("queue_wait_ms", "cache", "coalesced", "dequeue_count", "worker_id"):
        assert row[name] == body[name], name
    assert abs(float(row["unix"]) - body["finished_at"]) < 1e-3
    assert row["trace_id"] is None  # sent without one


async def test_a_report_keeps_its_trace_id_and_may_omit_it(
    http: httpx.AsyncClient, db: Database
) -> None:
    trace_id = uuid.uuid4().hex
    batch = [report_json(trace_id=trace_id), report_json(trace_id=None), report_json()]
    del batch[2]["trace_id"]  # an older sender: the field is optional
    resp = await http.post("/worker/job-finished", json=batch, headers=AUTH)
    assert resp.status_code == 204, resp.text
    rows = await db.fetchall("SELECT trace_id FROM worker_runs ORDER BY id")
    assert [r["trace_id"] for r in rows] == [trace_id, None, None]


async def test_a_batch_is_stored_whole_or_not_at_all(http: httpx.AsyncClient, db: Database) -> None:
    batch = [report_json() for _ in range(5)]
    resp = await http.post("/worker/job-finished", json=batch, headers=AUTH)
    assert resp.status_code == 204, resp.text
    assert await runs(db) == 5

    batch = [report_json(), report_json(outcome="exploded"), report_json()]
    resp = await http.post("/worker/job-finished", json=batch, headers=AUTH)
    assert resp.status_code == 400
    assert "reports[1].outcome" in resp.json()["error"]["message"]
    assert (await http.post("/worker/job-finished", json=[], headers=AUTH)).status_code == 400
    assert await runs(db) == 5


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": "Bearer"},
        {"Authorization": f"Bearer {TOKEN}x"},
    ],
    ids=["missing", "wrong", "basic", "empty", "longer"],
)
async def test_a_missing_or_wrong_token_is_401_and_writes_nothing(
    http: httpx.AsyncClient, db: Database, headers: dict[str, str]
) -> None:
    resp = await http.post("/worker/job-finished", json=report_json(), headers=headers)
    assert resp.status_code == 401
    assert resp.json()["error"]["code"] == "UNAUTHORIZED"
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    assert await runs(db) == 0


BAD_FIELDS: list[tuple[str, Any]] = [
    ("job_id", "not-a-uuid"),
    ("job_id", 42),
    ("type", ""),
    ("type", None),
    ("type", "a\x00b"),
    ("type", "\ud800"),
    ("type", "x" * 513),
    ("operation", ["echo"]),
    ("outcome", "exploded"),
    ("outcome", "DONE"),
    ("wall_ms", "1.5"),
    ("wall_ms", -1),
    ("wall_ms", True),
    ("cpu_ms", None),
    ("rss_bytes", 1.5),
    ("rss_bytes", -1),
    ("rss_bytes", 2**63),
    ("rss_bytes", False),
    ("queue_wait_ms", {}),
    ("cache", "warm"),
    ("cache", None),
    ("coalesced", 1),
    ("coalesced", "true"),
    ("dequeue_count", 2**31),
    ("dequeue_count", 1.0),
    ("worker_id", 7),
    ("finished_at", "2026-01-01T00:00:00Z"),
    ("finished_at", -5),
    ("finished_at", 1e20),
    ("trace_id", "0af7651916cd43dd8448eb211c80319"),  # 31 digits
    ("trace_id", "0AF7651916CD43DD8448EB211C80319C"),  # upper case
    ("trace_id", "0" * 32),  # the invalid trace id
    ("trace_id", 7),
]


@pytest.mark.parametrize(
    ("name", "value"), BAD_FIELDS, ids=[f"{n}={v!r}"[:40] for n, v in BAD_FIELDS]
)
async def test_a_wrong_field_is_400_naming_it_and_writes_nothing(
    http: httpx.AsyncClient, db: Database, name: str, value: Any
) -> None:
    body = json.dumps(report_json(**{name: value}))
    resp = await http.post(
        "/worker/job-finished",
        content=body,
        headers={**AUTH, "Content-Type": "application/json"},
    )
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["code"] == "BAD_REQUEST" and name in error["message"]
    assert await runs(db) == 0


@pytest.mark.parametrize(
    ("content", "content_type", "status"),
    [
        (b"{not json", "application/json", 400),
        (b"", "application/json", 400),
        (b'"a string"', "application/json", 400),
        (b"\xff\xfe\x00", "application/json", 400),
        (b'{"wall_ms": NaN}', "application/json", 400),
        (json.dumps(report_json()).encode(), "text/plain", 415),
        (json.dumps(report_json()).encode(), "", 415),
        (b"[" * 10_000, "application/json", 400),
        (b"[" * 20_000, "application/json", 413),
        (json.dumps([report_json()] * 60).encode(), "application/json", 413),
    ],
    ids=[
        "bad-json",
        "empty",
        "string",
        "not-utf8",
        "nan",
        "text",
        "no-type",
        "deep",
        "long",
        "big",
    ],
)
async def test_a_malformed_body_is_4xx_and_writes_nothing(
    http: httpx.AsyncClient, db: Database, content: bytes, content_type: str, status: int
) -> None:
    headers = {**AUTH, "Content-Type": content_type} if content_type else AUTH
    resp = await http.post("/worker/job-finished", content=content, headers=headers)
    assert resp.status_code == status, resp.text
    assert resp.json()["error"]["status"] == status
    assert await runs(db) == 0


async def test_unknown_and_missing_fields_are_400(http: httpx.AsyncClient, db: Database) -> None:
    resp = await http.post(
        "/worker/job-finished", json=report_json(extra="x", surface="probe"), headers=AUTH
    )
    assert resp.status_code == 400 and "unknown field(s): extra, surface" in resp.text
    body = report_json()
    del body["cache"], body["wall_ms"]
    resp = await http.post("/worker/job-finished", json=body, headers=AUTH)
    assert resp.status_code == 400 and "missing field(s): wall_ms, cache" in resp.text
    assert await runs(db) == 0


async def test_the_other_routes(http: httpx.AsyncClient) -> None:
    assert (await http.get("/healthz")).json() == {"status": "ok"}
    ready = await http.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"] == {"token": True, "db": True}
    assert (await http.get("/metrics")).status_code == 404  # DATAPLANE_METRICS is off
    assert (await http.get("/worker/job-finished")).status_code == 405
    assert (await http.get("/nowhere")).status_code == 404


async def test_metrics_when_enabled(
    capcom_env: None, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in for setup_telemetry: the real one would install global providers.
    from dataplane.capcom import app as capcom_module
    from telemetry.otel import Telemetry

    monkeypatch.setattr(
        capcom_module, "setup_telemetry", lambda name: Telemetry(name, prometheus=True)
    )
    monkeypatch.setattr(capcom_module, "prometheus_text", lambda: b"# HELP x y\nx 1.0\n")
    server = await start_capcom(nursery)
    async with httpx.AsyncClient(base_url=server.base) as client:
        resp = await client.get("/metrics")
    server.shutdown.set()
    assert resp.status_code == 200 and resp.text.endswith("x 1.0\n")
    assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")


async def test_no_token_on_the_server_is_503(
    capcom_env: None, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, db: Database
) -> None:
    monkeypatch.delenv("DATAPLANE_CAPCOM_TOKEN")
    server = await start_capcom(nursery)
    async with httpx.AsyncClient(base_url=server.base) as client:
        resp = await client.post("/worker/job-finished", json=report_json(), headers=AUTH)
        ready = await client.get("/readyz")
    server.shutdown.set()
    assert resp.status_code == 503 and resp.json()["error"]["code"] == "NOT_CONFIGURED"
    assert "DATAPLANE_CAPCOM_TOKEN" in resp.json()["error"]["message"]
    assert ready.status_code == 503
    assert await runs(db) == 0


async def test_database_down_is_503_and_no_database_is_503(
    capcom_env: None, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "DATAPLANE_CAPCOM_DB_URL", f"postgresql://nobody@127.0.0.1:{free_port()}/none"
    )
    down = await start_capcom(nursery)
    monkeypatch.delenv("DATAPLANE_CAPCOM_DB_URL")
    monkeypatch.delenv("MAESTRO_QUEUES_URL", raising=False)
    unset = await start_capcom(nursery)
    async with httpx.AsyncClient(timeout=30) as client:
        resp = await client.post(
            f"{down.base}/worker/job-finished", json=report_json(), headers=AUTH
        )
        assert resp.status_code == 503, resp.text
        assert resp.headers["Retry-After"] and "unreachable" in resp.json()["error"]["message"]
        resp = await client.post(
            f"{unset.base}/worker/job-finished", json=report_json(), headers=AUTH
        )
        assert (
            resp.status_code == 503 and "DATAPLANE_CAPCOM_DB_URL" in resp.json()["error"]["message"]
        )
        # The token is still checked first: a stranger learns nothing about the set-up.
        resp = await client.post(f"{unset.base}/worker/job-finished", json=report_json())
        assert resp.status_code == 401
    down.shutdown.set()
    unset.shutdown.set()


def test_served_under_asyncio_it_fails_at_startup_naming_k_trio() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "hypercorn",
            "-b",
            f"127.0.0.1:{free_port()}",
            "dataplane.capcom.app:app",
        ],
        env={**os.environ, "DATAPLANE_CAPCOM_TOKEN": TOKEN},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    output = result.stdout + result.stderr
    assert "-k trio" in output and "dataplane.capcom.app" in output
    assert result.returncode == -signal.SIGKILL, output  # not Hypercorn's 0: known issue 5


# -- the sender ---------------------------------------------------------------


class FakeInstruments:
    def __init__(self) -> None:
        self.dropped: Counter[str] = Counter()
        self.capcom_dropped = self

    def add(self, amount: int, attributes: dict[str, str]) -> None:
        self.dropped[attributes["dataplane.reason"]] += amount


@pytest.fixture
def fake_metrics(monkeypatch: pytest.MonkeyPatch) -> FakeInstruments:
    import dataplane.worker.sender

    fake = FakeInstruments()
    monkeypatch.setattr(dataplane.worker.sender, "instruments", lambda: fake)
    return fake


async def test_reports_arrive_one_by_one_and_in_batches(
    capcom: Capcom, db: Database, nursery: trio.Nursery, fake_metrics: FakeInstruments
) -> None:
    sender = CapcomSender(capcom.base, TOKEN)
    await nursery.start(sender.run)
    first = report(outcome="failed", cache="hit", coalesced=True)
    sender.report(first)
    await wait_until(lambda: sender.statistics().sent == 1)
    row = await db.fetchone("SELECT * FROM worker_runs")
    assert row is not None and str(row["job_id"]) == first.job_id and row["outcome"] == "failed"

    for _ in range(300):  # all at once: they go in batches
        sender.report(report())
    await wait_until(lambda: sender.statistics().sent == 301)
    stats = sender.statistics()
    assert stats.dropped_total == 0 and stats.queued == 0
    assert stats.posts < 100, stats
    assert await runs(db) == 301
    assert not fake_metrics.dropped


async def test_a_wrong_token_is_counted_as_rejected(
    capcom: Capcom, db: Database, nursery: trio.Nursery, fake_metrics: FakeInstruments
) -> None:
    sender = CapcomSender(capcom.base, "not-the-token", retry_start=0.01)
    await nursery.start(sender.run)
    sender.report(report())
    await wait_until(lambda: sender.statistics().dropped_total == 1)
    assert sender.statistics().dropped == {"rejected": 1}
    assert fake_metrics.dropped == {"rejected": 1}
    assert await runs(db) == 0


async def _flood(sender: CapcomSender, n: int = 1000) -> tuple[float, float]:
    """``n`` report() calls, yielding to the sender every 100 as jobs would;
    returns (time spent inside report() in all, longest single call), in seconds."""
    total = longest = 0.0
    jobs = [report() for _ in range(n)]
    for i, job in enumerate(jobs, 1):
        started = time.perf_counter()
        sender.report(job)
        spent = time.perf_counter() - started
        total += spent
        longest = max(longest, spent)
        if i % 100 == 0:
            await trio.lowlevel.checkpoint()
    return total, longest


async def _assert_drops_without_blocking(
    sender: CapcomSender,
    fake: FakeInstruments,
    caplog: pytest.LogCaptureFixture,
    reason: str,
) -> None:
    elapsed, longest = await _flood(sender)
    assert elapsed < 0.05, f"1,000 report() calls took {elapsed * 1000:.1f} ms"
    assert longest < 0.01, f"one report() call took {longest * 1000:.1f} ms"
    await wait_until(lambda: sender.statistics().dropped_total == 1000, within=30)
    stats = sender.statistics()
    assert stats.sent == 0 and stats.queued == 0
    assert stats.dropped[reason] >= 1 and stats.dropped["queue_full"] >= 1, stats
    assert set(stats.dropped) <= {reason, "queue_full"}
    assert fake.dropped == stats.dropped
    await wait_until(lambda: "capcom: dropped" in caplog.text)
    assert reason in caplog.text


async def test_capcom_down_report_never_blocks_and_drops_are_counted(
    nursery: trio.Nursery, fake_metrics: FakeInstruments, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="dataplane.worker.sender")
    sender = CapcomSender(
        f"http://127.0.0.1:{free_port()}",
        TOKEN,
        queue_size=100,
        timeout=0.5,
        log_every=0.2,
        retry_start=0.01,
        retry_max=0.05,
    )
    await nursery.start(sender.run)
    await _assert_drops_without_blocking(sender, fake_metrics, caplog, "refused")


async def test_capcom_hanging_report_never_blocks_and_drops_are_counted(
    nursery: trio.Nursery, fake_metrics: FakeInstruments, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="dataplane.worker.sender")
    hanging = await open_hanging_listener(nursery)
    sender = CapcomSender(
        hanging.url,
        TOKEN,
        queue_size=100,
        timeout=0.2,
        log_every=0.2,
        retry_start=0.01,
        retry_max=0.02,
        max_batch=50,
    )
    await nursery.start(sender.run)
    await _assert_drops_without_blocking(sender, fake_metrics, caplog, "timeout")
    assert hanging.accepted, "the sender never connected"


async def test_shutdown_flushes_what_is_queued(capcom: Capcom, db: Database) -> None:
    sender = CapcomSender(capcom.base, TOKEN)
    async with trio.open_nursery() as inner:
        await inner.start(sender.run)
        for _ in range(10):
            sender.report(report())
        inner.cancel_scope.cancel()
    stats = sender.statistics()
    assert stats.sent == 10 and stats.dropped_total == 0, stats
    assert await runs(db) == 10


async def test_shutdown_while_capcom_hangs_is_bounded(nursery: trio.Nursery) -> None:
    hanging = await open_hanging_listener(nursery)
    sender = CapcomSender(hanging.url, TOKEN, timeout=30)
    async with trio.open_nursery() as inner:
        await inner.start(sender.run)
        sender.report(report())
        await wait_until(lambda: hanging.accepted)
        for _ in range(5):
            sender.report(report())
        started = time.perf_counter()
        inner.cancel_scope.cancel()
    assert time.perf_counter() - started < 3.0
    stats = sender.statistics()
    assert stats.sent == 0 and stats.dropped == {"shutdown": 6}, stats


def test_the_constructor_refuses_what_cannot_work() -> None:
    from dataplane.core.errors import InvalidArgument

    for url in ("", "capcom:8080", "ftp://capcom", "http://", "http://capcom:port"):
        with pytest.raises(InvalidArgument):
            CapcomSender(url, TOKEN)
    with pytest.raises(InvalidArgument):
        CapcomSender("http://capcom", TOKEN, queue_size=0)
    with pytest.raises(InvalidArgument):
        CapcomSender("http://capcom", TOKEN, timeout=0)
