"""The BFF's HTTP edge in traces, from real BFF and worker processes to a real OTLP/HTTP
receiver: server spans as the OTel HTTP conventions say (4xx UNSET, 5xx ERROR with
``error.type``), a stream's server span ending with the stream, the notify span, and
the TIMEOUT and POISON events of a stream."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from dataplane.dev.embedded import free_port
from tests.conftest import wait_until
from tests.helpers import BffProcess, WorkerProcess, bearer, read_sse, token
from tests.otlp import Received, attrs, otlp

__all__ = ["otlp"]  # the fixture, imported to be found

OTEL = {"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_METRIC_EXPORT_INTERVAL": "500"}
POST = "POST /api/{surface}/q"
STREAM = "GET /api/{surface}/q/{jobId}/stream"
POLL = "GET /api/{surface}/q/{jobId}"
UNSET, ERROR = Status.StatusCode.STATUS_CODE_UNSET, Status.StatusCode.STATUS_CODE_ERROR


@pytest.fixture
def stack(bff_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Start a BFF and a probe worker sending spans to ``endpoint``, with ``extra`` env."""
    started: list[Any] = []

    async def start(endpoint: str, *, worker: bool = True, **extra: str) -> BffProcess:
        env = {**bff_env, **OTEL, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, **extra}
        bff = BffProcess(env, str(tmp_path / "bff.log"), port=free_port(), args=("-k", "trio"))
        started.append(bff)
        if worker:
            probe = WorkerProcess(
                {**env, "SURFACE_QUEUE_TYPE": "surface-probe"}, str(tmp_path / "worker.log")
            )
            started.append(probe)
            await probe.wait_ready()
        await bff.wait_ready()
        return bff

    yield start
    for proc in started:
        if isinstance(proc, BffProcess):
            # Killed: what the test reads it received while the test ran. By now the OTLP
            # receiver (in the test's nursery) is gone, and a SIGTERM waited out the
            # exporter's 10 s retry of the last export in each BFF and capcom.
            proc.kill()
        proc.stop()


def server_spans(received: Received, name: str) -> list[Span]:
    kind = Span.SpanKind.SPAN_KIND_SERVER
    return [s for svc, s in received.named(name) if svc == "dataplane-bff" and s.kind == kind]


async def post(http: httpx.AsyncClient, operation: str, params: dict[str, Any]) -> Any:
    resp = await http.post(
        "/api/probe/q",
        json={"operation": operation, "params": params},
        headers=bearer(token(staff=True)),
    )
    assert resp.status_code == 202, resp.text
    return resp.json()


async def test_server_spans_follow_the_http_conventions(
    otlp: tuple[str, Received], stack: Callable[..., Any]
) -> None:
    endpoint, received = otlp
    bff = await stack(endpoint)
    async with httpx.AsyncClient(base_url=bff.base, timeout=30) as http:
        job = await post(http, "echo", {"value": "conventions"})
        no_token = await http.post("/api/probe/q", json={"operation": "echo", "params": {}})
        assert no_token.status_code == 401
        unknown = await http.post(
            "/api/probe/q",
            json={"operation": "nope", "params": {}},
            headers=bearer(token(staff=True)),
        )
        assert unknown.status_code == 404

    await wait_until(lambda: len(server_spans(received, POST)) >= 3, within=20)
    by_status = {attrs(s)["http.response.status_code"]: s for s in server_spans(received, POST)}
    accepted = by_status[202]
    a = attrs(accepted)
    assert a["http.request.method"] == "POST"
    assert a["http.route"] == "/api/{surface}/q"
    assert a["url.path"] == "/api/probe/q"
    assert a["url.scheme"] == "http"
    assert a["server.address"] == "127.0.0.1" and a["server.port"] == bff.port
    assert a["messaging.message.id"] == job["jobId"]
    assert accepted.status.code == UNSET and "error.type" not in a
    for status in (401, 404):  # the client's error: the server span stays UNSET
        refused = by_status[status]
        assert refused.status.code == UNSET, status
        assert "error.type" not in attrs(refused)
        assert not any(e.name == "exception" for e in refused.events)


async def test_a_5xx_is_an_error_with_its_type(
    otlp: tuple[str, Received], bff_env: dict[str, str], tmp_path: Path
) -> None:
    endpoint, received = otlp
    env = {k: v for k, v in bff_env.items() if k != "MAESTRO_QUEUES_URL"}
    env = {**env, **OTEL, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "MAESTRO_QUEUES_URL": ""}
    bff = BffProcess(env, str(tmp_path / "bff.log"), port=free_port(), args=("-k", "trio"))
    try:
        async with httpx.AsyncClient(base_url=bff.base, timeout=5) as http:

            async def answers() -> bool:
                try:
                    return (await http.get("/healthz")).status_code == 200
                except httpx.HTTPError:
                    return False

            with trio.fail_after(30):
                while not await answers():
                    assert bff.proc.poll() is None, bff.output()
                    await trio.sleep(0.1)
            resp = await http.post("/api/probe/q", json={"operation": "echo", "params": {}})
            assert resp.status_code == 503  # not configured
        await wait_until(lambda: bool(server_spans(received, POST)), within=20)
    finally:
        # In a thread: the BFF's last export on its way out goes to the receiver served by
        # this event loop (stopped from it, the stop waited out the exporter's 10 s).
        await trio.to_thread.run_sync(bff.stop)
    (span,) = server_spans(received, POST)
    assert span.status.code == ERROR
    a = attrs(span)
    assert a["http.response.status_code"] == 503 and a["error.type"] == "503"


async def test_a_stream_has_a_server_span_that_ends_with_it(
    otlp: tuple[str, Received], stack: Callable[..., Any]
) -> None:
    endpoint, received = otlp
    bff = await stack(endpoint)
    async with httpx.AsyncClient(base_url=bff.base, timeout=30) as http:
        job = await post(http, "sleep", {"ms": 300})
        _, _, events = await read_sse(http, job["streamUrl"])
        assert [e.name for e in events] == ["queued", "done"]
        poll = await http.get(job["pollUrl"])
        assert poll.status_code == 200
    job_id = job["jobId"]

    await wait_until(
        lambda: (
            bool(server_spans(received, STREAM) and server_spans(received, POLL))
            and bool(received.named("SSE done") and received.named("notify surface-probe"))
        ),
        within=20,
    )
    (stream,) = server_spans(received, STREAM)
    (send,) = (s for _, s in received.named("send surface-probe"))
    (done,) = (s for _, s in received.named("SSE done"))
    (notify,) = (s for _, s in received.named("notify surface-probe"))
    a = attrs(stream)
    assert a["messaging.message.id"] == job_id
    assert a["http.route"] == "/api/{surface}/q/{jobId}/stream"
    assert a["http.response.status_code"] == 200 and a["dataplane.outcome"] == "done"
    assert "token" not in a["url.path"] and "url.query" not in a
    # In the job's trace, beside SSE done; it lasted until the stream ended.
    assert stream.trace_id == send.trace_id and stream.parent_span_id == send.span_id
    assert done.parent_span_id == send.span_id
    assert stream.end_time_unix_nano >= done.end_time_unix_nano
    assert stream.end_time_unix_nano >= notify.end_time_unix_nano
    assert stream.end_time_unix_nano - stream.start_time_unix_nano >= 300 * 1_000_000 * 0.9

    # The done notify: a CLIENT receive, as the messaging conventions name it.
    assert notify.kind == Span.SpanKind.SPAN_KIND_CLIENT
    n = attrs(notify)
    assert n["messaging.operation.type"] == "receive"
    assert n["messaging.operation.name"] == "notify"
    assert n["messaging.message.id"] == job_id

    # The poll is its own trace, tagged with the job and linked to the job's trace.
    (poll_span,) = server_spans(received, POLL)
    assert attrs(poll_span)["messaging.message.id"] == job_id
    assert poll_span.trace_id != send.trace_id
    assert [link.trace_id for link in poll_span.links] == [send.trace_id]


async def test_a_stream_timeout_is_an_event_on_its_span(
    otlp: tuple[str, Received], stack: Callable[..., Any]
) -> None:
    endpoint, received = otlp
    bff = await stack(endpoint, DATAPLANE_SSE_DEADLINE_SECONDS="0.3")
    async with httpx.AsyncClient(base_url=bff.base, timeout=30) as http:
        job = await post(http, "sleep", {"ms": 3000})
        _, _, events = await read_sse(http, job["streamUrl"])
    assert events[-1].name == "error" and events[-1].json["code"] == "TIMEOUT"

    await wait_until(lambda: bool(server_spans(received, STREAM)), within=20)
    (stream,) = server_spans(received, STREAM)
    assert attrs(stream)["dataplane.outcome"] == "TIMEOUT"
    (timeout,) = (e for e in stream.events if e.name == "TIMEOUT")
    assert {kv.key: kv.value.string_value for kv in timeout.attributes}[
        "messaging.message.id"
    ] == job["jobId"]
    assert stream.status.code == UNSET  # the job keeps running: not a server error
    assert "TIMEOUT" in bff.output()


async def test_a_poisoned_job_ends_its_stream_with_a_poison_event(
    otlp: tuple[str, Received], stack: Callable[..., Any]
) -> None:
    endpoint, received = otlp
    bff = await stack(endpoint, DATAPLANE_MAX_DEQUEUES="1")
    async with httpx.AsyncClient(base_url=bff.base, timeout=30) as http:
        job = await post(http, "fail", {"times": 1})
        _, _, events = await read_sse(http, job["streamUrl"])
    assert events[-1].name == "error" and events[-1].json["code"] == "POISON"

    await wait_until(lambda: bool(server_spans(received, STREAM)), within=20)
    (stream,) = server_spans(received, STREAM)
    assert attrs(stream)["dataplane.outcome"] == "poison"
    assert [e.name for e in stream.events] == ["POISON"]
    assert "stream POISON" in bff.output()


async def test_a_cancelled_job_ends_its_stream_with_a_cancelled_event(
    otlp: tuple[str, Received], stack: Callable[..., Any]
) -> None:
    endpoint, received = otlp
    bff = await stack(endpoint, worker=False)  # the job stays pending until cancelled
    async with httpx.AsyncClient(base_url=bff.base, timeout=30) as http:
        job = await post(http, "echo", {"value": "cancel me"})
        finals: list[Any] = []

        async def listen() -> None:
            _, _, events = await read_sse(http, job["streamUrl"])
            finals.append(events[-1])

        async with trio.open_nursery() as streams:
            streams.start_soon(listen)
            cancelled = await http.delete(job["pollUrl"])
            assert cancelled.status_code == 200
    assert finals[0].json["code"] == "CANCELLED"

    await wait_until(lambda: bool(server_spans(received, STREAM)), within=20)
    (stream,) = server_spans(received, STREAM)
    assert attrs(stream)["dataplane.outcome"] == "cancelled"
    assert [e.name for e in stream.events] == ["CANCELLED"]
    (delete,) = server_spans(received, "DELETE /api/{surface}/q/{jobId}")
    assert attrs(delete)["messaging.message.id"] == job["jobId"]
