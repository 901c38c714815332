"""Every attempt of a request in its one trace, failures visible, statements traced:
real BFF, worker and capcom processes exporting to a real OTLP/HTTP receiver (the
protobuf decoded with opentelemetry-proto)."""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from prometheus_client.parser import text_string_to_metric_families
from psycopg.conninfo import conninfo_to_dict

from dataplane.db import Database
from dataplane.dev.embedded import free_port
from dataplane.surfaces import probe
from tests.conftest import wait_until
from tests.helpers import BffProcess, WorkerProcess, bearer, capcom_process, read_sse, token
from tests.otlp import Received, attrs, otlp

__all__ = ["otlp"]  # the fixture, imported to be found

DATAPLANE_CAPCOM_TOKEN = "capcom-test-token"
OTEL = {"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_METRIC_EXPORT_INTERVAL": "60000"}
QUEUE = {
    "DATAPLANE_FAIL_BACKOFF_SECONDS": "0.2",
    "DATAPLANE_MAX_DEQUEUES": "2",
    "DATAPLANE_MAX_HANDLER_SECONDS": "0.5",
}
CLIENT = Span.SpanKind.SPAN_KIND_CLIENT
SERVER = Span.SpanKind.SPAN_KIND_SERVER
CONSUMER = Span.SpanKind.SPAN_KIND_CONSUMER
ERROR = Status.StatusCode.STATUS_CODE_ERROR
SLACK_NS = 2_000_000  # clocks: the database's now() against the processes' (one host)
STAFF = token(staff=True)


@dataclass
class Stack:
    bff: BffProcess
    worker: WorkerProcess
    capcom: BffProcess
    worker_env: dict[str, str]
    spawn: Callable[..., Any]  # another worker, as the first (environment overrides)


@pytest.fixture
def stack(bff_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., Any]]:
    started: list[Any] = []

    async def start(
        endpoint: str,
        queue_type: str = "surface-probe",
        *,
        every: Mapping[str, str] | None = None,  # for every process (e.g. the poison cutoff)
        **worker: str,
    ) -> Stack:
        env = {**bff_env, **OTEL, **QUEUE, **(every or {}), "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
        capcom = capcom_process(env, str(tmp_path / "capcom.log"), DATAPLANE_CAPCOM_TOKEN)
        started.append(capcom)
        bff = BffProcess(env, str(tmp_path / "bff.log"), port=free_port(), args=("-k", "trio"))
        started.append(bff)
        await capcom.wait_ready()
        worker_env = {
            **env,
            "SURFACE_QUEUE_TYPE": queue_type,
            "DATAPLANE_CAPCOM_URL": capcom.base,
            "DATAPLANE_CAPCOM_TOKEN": DATAPLANE_CAPCOM_TOKEN,
            **worker,
        }

        async def spawn(**extra: str) -> WorkerProcess:
            proc = WorkerProcess(
                {**worker_env, **extra}, str(tmp_path / f"worker-{len(started)}.log")
            )
            started.append(proc)
            await proc.wait_ready()
            return proc

        await bff.wait_ready()
        return Stack(bff, await spawn(), capcom, worker_env, spawn)

    yield start
    for proc in started:
        if isinstance(proc, BffProcess):
            # Killed: what the test reads it received while the test ran. By now the OTLP
            # receiver (in the test's nursery) is gone, and a SIGTERM waited out the
            # exporter's 10 s retry of the last export in each BFF and capcom.
            proc.kill()
        proc.stop()


async def _request(stack: Stack, surface: str, operation: str, params: dict[str, Any]) -> Any:
    """POST, then the stream to its end; returns (job id, last event)."""
    async with httpx.AsyncClient(base_url=stack.bff.base, timeout=30) as http:
        resp = await http.post(
            f"/api/{surface}/q",
            json={"operation": operation, "params": params},
            headers=bearer(STAFF),
        )
        assert resp.status_code == 202, resp.text
        _, _, events = await read_sse(http, resp.json()["streamUrl"])
    return resp.json()["jobId"], events[-1]


def _of_job(received: Received, job_id: str, name: str) -> list[tuple[str, Span]]:
    found = [
        (svc, s)
        for svc, s in received.named(name)
        if attrs(s).get("messaging.message.id") == job_id
    ]
    return sorted(found, key=lambda item: item[1].start_time_unix_nano)


def _attempts(received: Received, job_id: str) -> list[Span]:
    spans = [s for _, s in _of_job(received, job_id, "process surface-probe")]
    return sorted(spans, key=lambda s: attrs(s)["dataplane.attempt"])


def _in_trace(received: Received, trace_id: bytes) -> list[tuple[str, Span]]:
    return [(svc, s) for svc, s in received.spans if s.trace_id == trace_id]


def _events(span: Span) -> dict[str, dict[str, Any]]:
    return {e.name: {kv.key: _value(kv.value) for kv in e.attributes} for e in span.events}


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


async def _assert_no_stray_roots(received: Received) -> None:
    """Every root span is the server span of a client's HTTP request to the BFF: no
    boot check, idle claim, renewal or report makes a trace of its own.

    The BFF exports on its own schedule, so a worker's spans can be in before the
    request's root: wait for one root from the BFF first."""
    await wait_until(
        lambda: any(svc == "dataplane-bff" and not x.parent_span_id for svc, x in received.spans),
        within=10,
    )
    roots = [(svc, s) for svc, s in received.spans if not s.parent_span_id]
    assert roots, "no request trace at all"
    strays = [(svc, s.name) for svc, s in roots if svc != "dataplane-bff" or s.kind != SERVER]
    assert not strays, strays


def _assert_db_span(span: Span, dbname: str, summary: str) -> None:
    a = attrs(span)
    assert span.kind == CLIENT, span.name
    assert span.name == summary == a["db.query.summary"]
    assert a["db.system.name"] == "postgresql"
    assert a["db.namespace"] == dbname
    assert a["db.operation.name"] in ("SELECT", "INSERT", "UPDATE", "DELETE")
    assert a["server.address"] and a["server.port"] > 0


async def test_a_retried_job_is_one_trace_holding_both_attempts(
    otlp: tuple[str, Received], stack: Callable[..., Any], db: Database, queue_dsn: str
) -> None:
    endpoint, received = otlp
    s = await stack(endpoint)
    job_id, last = await _request(s, "probe", "fail", {"times": 1})
    assert last.name == "done", last
    dbname = conninfo_to_dict(queue_dsn)["dbname"]

    def complete() -> bool:
        return (
            len(_attempts(received, job_id)) == 2
            and len(_of_job(received, job_id, "wait surface-probe")) == 2
            and any(s.name == "worker_run_insert" for _, s in received.spans)
            and len([n for n in received.named("job_claim")]) >= 2
            and bool(received.named("job_complete"))
        )

    await wait_until(complete, within=20)
    (_, send), *_ = _of_job(received, job_id, "send surface-probe")
    trace_id = send.trace_id
    first, second = _attempts(received, job_id)

    # One trace: both attempts are children of the producer span.
    for attempt, span in enumerate((first, second), start=1):
        a = attrs(span)
        assert span.trace_id == trace_id and span.parent_span_id == send.span_id
        assert span.kind == CONSUMER and not span.links
        assert a["dataplane.attempt"] == attempt
        assert a["messaging.message.delivery_count"] == attempt
        assert a["messaging.operation.name"] == "process"
        assert a["dataplane.queue_wait_ms"] >= 0  # the ready wait is on the wait span
    assert first.status.code == ERROR and attrs(first)["error.type"] == "ProbeFailure"
    assert "exception" in _events(first)
    assert second.status.code != ERROR and "error.type" not in attrs(second)
    assert attrs(second)["dataplane.outcome"] == "done"
    for _svc, span in received.spans:
        if attrs(span).get("messaging.message.id") == job_id:
            assert span.trace_id == trace_id, span.name

    # The queue wait of each attempt, between the producer and its process span.
    waits = [w for _, w in _of_job(received, job_id, "wait surface-probe")]
    for wait, process in zip(waits, (first, second), strict=True):
        a = attrs(wait)
        assert wait.parent_span_id == send.span_id
        assert a["messaging.operation.name"] == "wait"
        assert a["dataplane.attempt"] == attrs(process)["dataplane.attempt"]
        assert wait.start_time_unix_nano <= wait.end_time_unix_nano
        assert wait.end_time_unix_nano <= process.start_time_unix_nano + SLACK_NS
        duration_ms = (wait.end_time_unix_nano - wait.start_time_unix_nano) / 1e6
        assert duration_ms == pytest.approx(a["dataplane.ready_wait_ms"], abs=0.01)
        assert a["dataplane.queue_wait_ms"] >= a["dataplane.ready_wait_ms"] >= 0
    assert waits[0].start_time_unix_nano >= send.start_time_unix_nano - SLACK_NS
    # The second wait starts once the backoff after the failure is over.
    assert waits[1].start_time_unix_nano >= first.start_time_unix_nano + 150_000_000

    # Settling is a client span; the queue statements are client spans in the trace.
    in_trace = _in_trace(received, trace_id)
    (_, settle), *more = [(v, x) for v, x in in_trace if x.name == "complete surface-probe"]
    assert not more and settle.kind == CLIENT and settle.parent_span_id == second.span_id
    assert attrs(settle)["messaging.operation.name"] == "complete"
    assert attrs(settle)["messaging.operation.type"] == "settle"
    for _svc, span in in_trace:
        if "messaging.system" in attrs(span):
            assert attrs(span)["messaging.operation.name"], span.name
    by_name: dict[str, list[tuple[str, Span]]] = {}
    for svc, span in in_trace:
        by_name.setdefault(span.name, []).append((svc, span))
    ((svc, enqueue),) = by_name["job_enqueue"]
    assert svc == "dataplane-bff" and enqueue.parent_span_id == send.span_id
    claims = by_name["job_claim"]
    assert len(claims) == 2 and all(c.parent_span_id == send.span_id for _, c in claims)
    ((_, fail),) = by_name["job_fail"]
    assert fail.parent_span_id == first.span_id
    ((_, done),) = by_name["job_complete"]
    assert done.parent_span_id == settle.span_id
    for _svc, span in [(svc, enqueue), *claims, (svc, fail), (svc, done)]:
        _assert_db_span(span, dbname, span.name)

    # The reports to capcom: a client span per POST, capcom's server span under it.
    posts = [(v, x) for v, x in in_trace if x.name == "POST /worker/job-finished"]
    sent = [x for v, x in posts if v == "dataplane-worker"]
    served = [x for v, x in posts if v == "dataplane-capcom"]
    assert sent and all(x.kind == CLIENT for x in sent)
    assert served and all(x.kind == SERVER for x in served)
    assert {x.parent_span_id for x in served} <= {x.span_id for x in sent}
    inserts = [x for v, x in in_trace if x.name == "worker_run_insert"]
    assert inserts and {x.parent_span_id for x in inserts} <= {x.span_id for x in served}
    rows = await db.fetchall(
        "SELECT outcome, trace_id FROM worker_runs WHERE job_id = %(id)s ORDER BY id",
        {"id": job_id},
    )
    assert [r["outcome"] for r in rows] == ["failed", "done"]
    assert {r["trace_id"] for r in rows} == {trace_id.hex()}

    await _assert_no_stray_roots(received)


async def test_a_poisoned_job_shows_every_attempt_and_the_poison(
    otlp: tuple[str, Received], stack: Callable[..., Any]
) -> None:
    endpoint, received = otlp
    s = await stack(endpoint)
    failing, failing_last = await _request(s, "probe", "fail", {"times": 5})
    slow, slow_last = await _request(s, "probe", "sleep", {"ms": 5000})  # past the 0.5 s cap
    for last in (failing_last, slow_last):
        assert last.name == "error" and last.json["code"] == "POISON", last

    def complete() -> bool:
        return all(len(_attempts(received, j)) == 2 for j in (failing, slow))

    await wait_until(complete, within=20)
    for job_id, error_type in ((failing, "ProbeFailure"), (slow, "TIMEOUT")):
        (_, send), *_ = _of_job(received, job_id, "send surface-probe")
        first, second = _attempts(received, job_id)
        for span in (first, second):
            assert span.trace_id == send.trace_id and span.parent_span_id == send.span_id
            assert span.status.code == ERROR and attrs(span)["error.type"] == error_type
        assert "POISON" not in _events(first)
        poison = _events(second)["POISON"]
        assert poison["dataplane.attempt"] == 2 and poison["error.type"] == error_type
        assert attrs(second)["dataplane.outcome"] == "poison"
        log = s.worker.output()
        assert f"job {job_id} (surface-probe, attempt 2/2): poisoned" in log
        # Each attempt's exception event: the qualified type, the bounded traceback with
        # the surface's frames marked, and where in the surface's code (a timeout's:
        # where the handler was when its deadline cancelled it).
        function, text = ("fail", "raise") if job_id == failing else ("sleep", "trio.sleep")
        line = _line_of(getattr(probe, function), text)
        for span in (first, second):
            exception = _events(span)["exception"]
            assert (
                exception["exception.type"]
                == {
                    "ProbeFailure": "dataplane.surfaces.probe.ProbeFailure",
                    "TIMEOUT": "dataplane.worker.pipeline.handler.HandlerTimeout",
                }[error_type]
            )
            assert exception["code.file.path"] == probe.__file__
            assert exception["code.function.name"] == function
            assert exception["code.line.number"] == line
            stack = exception["exception.stacktrace"]
            assert f'> File "{probe.__file__}", line {line}, in {function}' in stack
    await _assert_no_stray_roots(received)


def _line_of(function: Any, text: str) -> int:
    lines, start = inspect.getsourcelines(function)
    return start + next(i for i, line in enumerate(lines) if text in line)


async def test_a_client_db_worker_boots_without_a_trace_and_names_its_statements(
    otlp: tuple[str, Received], stack: Callable[..., Any], demo_db: tuple[str, str]
) -> None:
    endpoint, received = otlp
    s = await stack(endpoint, "surface-accounting", DATAPLANE_CLIENT_DB_URL=demo_db[1])
    job_id, last = await _request(s, "accounting", "invoices", {"limit": 3})
    assert last.name == "done", last

    def handled() -> bool:
        return any(
            svc == "dataplane-worker" and x.name == "complete surface-accounting"
            for svc, x in received.spans
        )

    await wait_until(handled, within=20)
    (_, process), *_ = _of_job(received, job_id, "process surface-accounting")
    client_db = conninfo_to_dict(demo_db[1])["dbname"]
    statements = [
        x
        for svc, x in _in_trace(received, process.trace_id)
        if svc == "dataplane-worker" and attrs(x).get("db.namespace") == client_db
    ]
    assert statements
    for span in statements:
        a = attrs(span)
        assert span.kind == CLIENT and not span.name.startswith("db ")
        assert a["db.operation.name"] == "SELECT" and a["db.query.summary"] == span.name
        assert a["server.address"] and a["db.query.text"]
    # The read-only proof and the other boot checks made no trace of their own.
    await _assert_no_stray_roots(received)
    assert not any(x.name == "ro_write_privileges" for _, x in received.spans)


async def test_a_redrive_after_a_crash_is_in_the_request_trace(
    otlp: tuple[str, Received], stack: Callable[..., Any], db: Database
) -> None:
    """The worker running the first attempt dies; the lease lapses, another worker
    claims the row again, and that attempt too is a child of the request's trace."""
    endpoint, received = otlp
    s = await stack(
        endpoint,
        MAESTRO_LEASE_SECONDS="1",
        MAESTRO_RENEW_SECONDS="0.3",
        DATAPLANE_MAX_HANDLER_SECONDS="30",
    )
    async with httpx.AsyncClient(base_url=s.bff.base, timeout=30) as http:
        resp = await http.post(
            "/api/probe/q",
            json={"operation": "sleep", "params": {"ms": 1500}},
            headers=bearer(STAFF),
        )
        assert resp.status_code == 202, resp.text
        job_id = resp.json()["jobId"]

        async def running() -> bool:
            row = await db.fetchone(
                "SELECT status FROM maestro_queues WHERE id = %(id)s", {"id": job_id}
            )
            return row is not None and row["status"] == "in_progress"

        await wait_until(running, within=10)
        s.worker.proc.kill()  # the first attempt's spans die with it
        await trio.to_thread.run_sync(s.worker.proc.wait)
        await s.spawn()
        _, _, events = await read_sse(http, resp.json()["streamUrl"])
        assert events[-1].name == "done", events

    await wait_until(lambda: len(_attempts(received, job_id)) == 1, within=20)
    (_, send), *_ = _of_job(received, job_id, "send surface-probe")
    (redrive,) = _attempts(received, job_id)
    assert attrs(redrive)["dataplane.attempt"] == 2
    assert redrive.trace_id == send.trace_id and redrive.parent_span_id == send.span_id
    waits = [w for _, w in _of_job(received, job_id, "wait surface-probe")]
    (wait,) = [w for w in waits if attrs(w)["dataplane.attempt"] == 2]
    assert wait.trace_id == send.trace_id and wait.parent_span_id == send.span_id
    # The second wait began when the first attempt's lease lapsed, a second after it.
    assert attrs(wait)["dataplane.queue_wait_ms"] >= attrs(wait)["dataplane.ready_wait_ms"]
    assert wait.start_time_unix_nano >= send.end_time_unix_nano + 900_000_000
    await _assert_no_stray_roots(received)


# -- poisoned with no attempt left to tell: the last attempt's worker died -----------

# The worker holding the last attempt dies: its lease (1 s, renewed every 0.3 s while
# it lives) lapses, and nothing of it is left to say the job is poison.
LAPSING = {
    "MAESTRO_LEASE_SECONDS": "1",
    "MAESTRO_RENEW_SECONDS": "0.3",
    "DATAPLANE_MAX_HANDLER_SECONDS": "30",
}


async def _last_attempt_dies(
    s: Stack,
    http: httpx.AsyncClient,
    db: Database,
    before_the_kill: Callable[[], Awaitable[None]] | None = None,
) -> tuple[str, str]:
    """POST a slow job with one attempt allowed, SIGKILL the worker running it;
    returns (job id, stream URL)."""
    resp = await http.post(
        "/api/probe/q",
        json={"operation": "sleep", "params": {"ms": 30_000}},
        headers=bearer(STAFF),
    )
    assert resp.status_code == 202, resp.text
    job_id = resp.json()["jobId"]

    async def running() -> bool:
        row = await db.fetchone(
            "SELECT status FROM maestro_queues WHERE id = %(id)s",
            {"id": job_id},
        )
        return row is not None and row["status"] == "in_progress"

    await wait_until(running, within=10)
    row = await db.fetchone(
        "SELECT max_dequeues FROM maestro_queues WHERE id = %(id)s", {"id": job_id}
    )
    assert row is not None and row["max_dequeues"] == 1
    if before_the_kill is not None:
        await before_the_kill()
    s.worker.proc.kill()
    await trio.to_thread.run_sync(s.worker.proc.wait)
    return job_id, resp.json()["streamUrl"]


async def _poison_counts(port: int) -> dict[tuple[str, str], float]:
    """``dataplane_poison_total`` by (queue type, reason), as a worker serves it."""
    async with httpx.AsyncClient(timeout=10) as http:
        resp = await http.get(f"http://127.0.0.1:{port}/metrics")
    assert resp.status_code == 200, resp.text
    return {
        (x.labels["messaging_destination_name"], x.labels["dataplane_reason"]): x.value
        for family in text_string_to_metric_families(resp.text)
        for x in family.samples
        if x.name == "dataplane_poison_total"
    }


def _assert_poison_span(received: Received, job_id: str) -> None:
    """One ``poison surface-probe`` span, a child of the request's producer span:
    ERROR, ``error.type`` POISON, reason lease_lapsed, and the POISON event."""
    (_, send), *_ = _of_job(received, job_id, "send surface-probe")
    ((svc, poison),) = _of_job(received, job_id, "poison surface-probe")
    assert svc == "dataplane-worker"
    assert poison.trace_id == send.trace_id and poison.parent_span_id == send.span_id
    assert poison.status.code == ERROR
    a = attrs(poison)
    assert a["error.type"] == "POISON"
    assert a["dataplane.reason"] == "lease_lapsed"
    assert a["dataplane.attempt"] == 1 and a["dataplane.max_dequeues"] == 1
    assert a["messaging.destination.name"] == "surface-probe"
    assert a["messaging.operation.name"] == "poison"
    assert a["messaging.system"] == "postgresql"
    event = _events(poison)["POISON"]
    assert event == {
        "dataplane.attempt": 1,
        "dataplane.max_dequeues": 1,
        "error.type": "LEASE_LAPSED",
    }
    for _svc, span in received.spans:  # nothing of the job outside the request's trace
        if attrs(span).get("messaging.message.id") == job_id:
            assert span.trace_id == send.trace_id, span.name


async def test_a_job_whose_last_worker_died_is_poisoned_by_the_next_claim_in_its_trace(
    otlp: tuple[str, Received], stack: Callable[..., Any], db: Database
) -> None:
    endpoint, received = otlp
    s = await stack(endpoint, every={"DATAPLANE_MAX_DEQUEUES": "1"}, **LAPSING)
    port = free_port()
    async with httpx.AsyncClient(base_url=s.bff.base, timeout=30) as http:
        job_id, stream_url = await _last_attempt_dies(s, http, db)
        # The next worker's claim finds the lapsed row (maintenance is an hour away).
        rescuer = await s.spawn(
            DATAPLANE_MAINTENANCE_SECONDS="3600",
            DATAPLANE_METRICS="1",
            DATAPLANE_METRICS_PORT=str(port),
        )
        _, _, events = await read_sse(http, stream_url)
    assert events[-1].name == "error" and events[-1].json["code"] == "POISON", events

    await wait_until(lambda: _of_job(received, job_id, "poison surface-probe"), within=20)
    _assert_poison_span(received, job_id)
    log = rescuer.output()
    (line,) = [x for x in log.splitlines() if f"job {job_id} " in x]
    assert " WARNING dataplane.worker.claims.claimer: " in line
    assert (
        f"job {job_id} (surface-probe, attempt 1/1): poisoned, the lease of its last "
        "attempt lapsed (reason lease_lapsed, found by a claim of surface-probe@"
    ) in line
    # The rescuer's series started at zero (initialise): one lease_lapsed poison.
    counts = await _poison_counts(port)
    assert counts[("surface-probe", "lease_lapsed")] == 1
    assert counts[("surface-probe", "failed")] == 0
    await _assert_no_stray_roots(received)


async def test_a_job_whose_last_worker_died_is_poisoned_by_maintenance_in_its_trace(
    otlp: tuple[str, Received], stack: Callable[..., Any], db: Database
) -> None:
    endpoint, received = otlp
    s = await stack(endpoint, every={"DATAPLANE_MAX_DEQUEUES": "1"}, **LAPSING)
    port = free_port()
    # A worker of the other tier never claims the row; its maintenance pass, elected
    # across the fleet, parks it.
    maintainer = await s.spawn(
        SURFACE_QUEUE_TYPE="surface-probe-dev",
        DATAPLANE_MAINTENANCE_SECONDS="0.2",
        DATAPLANE_METRICS="1",
        DATAPLANE_METRICS_PORT=str(port),
        DATAPLANE_LOG_FORMAT="json",
    )

    async def nothing_poisoned_yet() -> None:
        # The other tier's series too exists at zero before its first event.
        assert (await _poison_counts(port))[("surface-probe", "lease_lapsed")] == 0

    async with httpx.AsyncClient(base_url=s.bff.base, timeout=30) as http:
        job_id, stream_url = await _last_attempt_dies(s, http, db, nothing_poisoned_yet)
        _, _, events = await read_sse(http, stream_url)
    assert events[-1].name == "error" and events[-1].json["code"] == "POISON", events

    await wait_until(lambda: _of_job(received, job_id, "poison surface-probe"), within=20)
    _assert_poison_span(received, job_id)
    # One line, logged inside the poison span: it carries the request's trace id.
    lines = [json.loads(x) for x in maintainer.output().splitlines() if x.startswith("{")]
    (line,) = [x for x in lines if job_id in x["message"]]
    assert line["level"] == "WARNING" and line["logger"] == "dataplane.maintenance.schedule"
    assert line["message"] == (
        f"job {job_id} (surface-probe, attempt 1/1): poisoned, the lease of its last "
        "attempt lapsed (reason lease_lapsed, found by maintenance)"
    )
    (_, send), *_ = _of_job(received, job_id, "send surface-probe")
    assert line["trace_id"] == send.trace_id.hex()
    counts = await _poison_counts(port)
    assert counts[("surface-probe", "lease_lapsed")] == 1
    await _assert_no_stray_roots(received)
