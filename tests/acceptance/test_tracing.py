"""Traces and metrics from real BFF and worker processes, received by a real
OTLP/HTTP receiver started here (protobuf decoded with opentelemetry-proto)."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from dataplane.dev.embedded import free_port
from tests.conftest import wait_until
from tests.helpers import BffProcess, WorkerProcess, bearer, read_sse, token
from tests.otlp import Received, attrs, otlp

__all__ = ["otlp"]  # the fixture, imported to be found


@pytest.fixture
def stack(bff_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., Any]]:
    started: list[Any] = []

    async def start(otel: dict[str, str]) -> tuple[BffProcess, WorkerProcess]:
        env = {**bff_env, **otel}
        bff = BffProcess(env, str(tmp_path / "bff.log"), port=free_port(), args=("-k", "trio"))
        started.append(bff)
        worker = WorkerProcess(
            {**env, "SURFACE_QUEUE_TYPE": "surface-probe"}, str(tmp_path / "worker.log")
        )
        started.append(worker)
        await bff.wait_ready()
        await worker.wait_ready()
        return bff, worker

    yield start
    for proc in started:
        if isinstance(proc, BffProcess):
            # Killed: what the test reads it received while the test ran. By now the OTLP
            # receiver (in the test's nursery) is gone, and a SIGTERM waited out the
            # exporter's 10 s retry of the last export in each BFF and capcom.
            proc.kill()
        proc.stop()


OTEL = {"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_METRIC_EXPORT_INTERVAL": "500"}


async def test_one_trace_across_bff_and_worker(
    otlp: tuple[str, Received], stack: Callable[..., Any]
) -> None:
    endpoint, received = otlp
    bff, _ = await stack({**OTEL, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
    tok = token(staff=True)
    async with httpx.AsyncClient(base_url=bff.base, timeout=30) as http:
        first = (
            await http.post(
                "/api/probe/q",
                json={"operation": "sleep", "params": {"ms": 600}},
                headers=bearer(tok),
            )
        ).json()
        second = (
            await http.post(
                "/api/probe/q",
                json={"operation": "sleep", "params": {"ms": 600}},
                headers=bearer(tok),
            )
        ).json()
        assert second["coalesced"] and second["jobId"] == first["jobId"]
        _, _, events = await read_sse(http, first["streamUrl"])
        assert events[-1].name == "done"
    job_id = first["jobId"]

    def has(name: str) -> bool:
        return any(s.name == name for _, s in received.spans)

    await wait_until(
        lambda: all(
            has(n)
            for n in (
                "POST /api/{surface}/q",
                "send surface-probe",
                "process surface-probe",
                "sleep handler",
                "complete surface-probe",
                "notify surface-probe",
                "SSE done",
            )
        ),
        within=20,
    )
    sends = received.named("send surface-probe")
    executing = next(s for _, s in sends if not attrs(s)["dataplane.coalesced"])
    attached = next(s for _, s in sends if attrs(s)["dataplane.coalesced"])
    trace_id = executing.trace_id
    in_trace = [(svc, s) for svc, s in received.spans if s.trace_id == trace_id]
    by_name = {s.name: (svc, s) for svc, s in in_trace}
    services = {svc for svc, _ in in_trace}
    assert services == {"dataplane-bff", "dataplane-worker"}

    post = by_name["POST /api/{surface}/q"][1]
    process_svc, process = by_name["process surface-probe"]
    assert process_svc == "dataplane-worker"
    assert executing.parent_span_id == post.span_id
    assert executing.kind == Span.SpanKind.SPAN_KIND_PRODUCER
    assert post.kind == Span.SpanKind.SPAN_KIND_SERVER
    assert process.parent_span_id == executing.span_id  # child, as every attempt is
    assert process.kind == Span.SpanKind.SPAN_KIND_CONSUMER
    assert by_name["sleep handler"][1].parent_span_id == process.span_id
    settle = by_name["complete surface-probe"][1]
    assert settle.parent_span_id == process.span_id
    assert settle.kind == Span.SpanKind.SPAN_KIND_CLIENT  # settling is a call to the queue
    notify_svc, notify = by_name["notify surface-probe"]
    assert notify_svc == "dataplane-bff" and notify.parent_span_id == executing.span_id
    assert by_name["SSE done"][1].parent_span_id == executing.span_id

    pa = attrs(process)
    assert pa["messaging.system"] == "postgresql"
    assert pa["messaging.operation.type"] == pa["messaging.operation.name"] == "process"
    assert pa["messaging.destination.name"] == "surface-probe"
    assert pa["messaging.message.id"] == job_id
    assert pa["dataplane.surface"] == "probe" and pa["dataplane.operation"] == "sleep"
    assert pa["dataplane.cache"] == "bypass" and pa["dataplane.coalesced"] is False
    assert pa["dataplane.queue_wait_ms"] >= 0
    sa = attrs(executing)
    assert sa["messaging.operation.type"] == "send" and sa["messaging.message.id"] == job_id

    # The coalesced request has its own trace, linked to the executing one.
    assert attached.trace_id != trace_id
    assert [link.trace_id for link in attached.links] == [trace_id]


async def test_without_an_endpoint_nothing_is_exported(
    otlp: tuple[str, Received], stack: Callable[..., Any]
) -> None:
    _endpoint, received = otlp
    bff, worker = await stack(OTEL)  # no OTEL_EXPORTER_OTLP_ENDPOINT
    async with httpx.AsyncClient(base_url=bff.base, timeout=30) as http:
        for i in range(5):
            resp = await http.post(
                "/api/probe/q",
                json={"operation": "echo", "params": {"value": i}},
                headers=bearer(token(staff=True)),
            )
            _, _, events = await read_sse(http, resp.json()["streamUrl"])
            assert events[-1].json["result"]["echo"] == i
    # A clean stop flushes what the exporters hold (Telemetry.shutdown): once both
    # processes have exited cleanly, whatever they would have sent has been sent.
    # (In threads: a flush posts to the receiver served by this very event loop.)
    await trio.to_thread.run_sync(_stop_cleanly, worker)
    await trio.to_thread.run_sync(_stop_cleanly, bff)
    assert received.requests == 0 and received.spans == []


def _stop_cleanly(proc: BffProcess | WorkerProcess) -> None:
    """SIGTERM, and the process exits 0 by itself (its after-serving hooks ran)."""
    proc.proc.send_signal(signal.SIGTERM)
    assert proc.proc.wait(timeout=30) == 0, proc.output()
