"""One span's cost in process: the SDK's tracer against the plane's lean tracer
(create + end, recorded and live), and the SDK's OTLP encoder against the plane's.

A span like the worker's ``process`` span (eight attributes); ended spans go to a
``BatchSpanProcessor`` whose exporter drops them, so its queueing is in the figure and
no export is. ``python -m pytest bench/micro/test_spans.py``; compare the groups.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as sdk_encode
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from dataplane.compat.opentelemetry import otlp
from dataplane.compat.opentelemetry.spans import LeanTracer

BATCH = 512  # one export's spans
ATTRIBUTES: dict[str, Any] = {
    "messaging.system": "postgresql",
    "messaging.operation.type": "process",
    "messaging.operation.name": "process",
    "messaging.destination.name": "surface-probe",
    "messaging.message.id": str(uuid.uuid4()),
    "dataplane.attempt": 1,
    "dataplane.operation": "echo",
    "dataplane.surface": "probe",
}
Make = Callable[[TracerProvider, Any], trace.Tracer]
TRACERS: dict[str, Make] = {
    "sdk": lambda provider, _: provider.get_tracer("dataplane"),
    "plane": lambda provider, processor: LeanTracer(provider, processor, "dataplane"),
}


class _Drop(SpanExporter):
    def export(self, batch: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


@pytest.fixture(params=sorted(TRACERS))
def tracer(request: pytest.FixtureRequest) -> Iterator[trace.Tracer]:
    provider = TracerProvider()
    processor = BatchSpanProcessor(_Drop(), max_queue_size=4 * BATCH, schedule_delay_millis=50)
    provider.add_span_processor(processor)
    yield TRACERS[request.param](provider, processor)
    provider.shutdown()


@pytest.mark.benchmark(group="span: recorded (start + end with explicit times)")
def test_span_recorded(benchmark: Any, tracer: trace.Tracer) -> None:
    parent = trace.set_span_in_context(tracer.start_span("root"))

    def recorded() -> None:
        span = tracer.start_span(
            "job_claim", context=parent, kind=SpanKind.CLIENT, attributes=ATTRIBUTES, start_time=1
        )
        span.end(end_time=2)

    benchmark(recorded)


@pytest.mark.benchmark(group="span: live (start_as_current_span)")
def test_span_live(benchmark: Any, tracer: trace.Tracer) -> None:
    def live() -> None:
        with tracer.start_as_current_span("process", kind=SpanKind.CONSUMER, attributes=ATTRIBUTES):
            pass

    benchmark(live)


def _batch(make: Make) -> Sequence[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "dataplane-worker"}))
    processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    tracer = make(provider, processor)
    for _ in range(BATCH):
        with tracer.start_as_current_span("process", kind=SpanKind.CONSUMER, attributes=ATTRIBUTES):
            pass
    return exporter.get_finished_spans()


@pytest.mark.benchmark(group=f"OTLP encode, {BATCH} spans")
@pytest.mark.parametrize("encoder", ["sdk", "plane"])
def test_encode(benchmark: Any, encoder: str) -> None:
    batch = _batch(TRACERS[encoder])
    if encoder == "sdk":
        benchmark(lambda: sdk_encode(batch).SerializePartialToString())
    else:
        benchmark(otlp.encode_spans, batch)


@pytest.mark.benchmark(group=f"SDK OTLP encode, {BATCH} spans, the process's resource")
@pytest.mark.parametrize("resource", ["sdk", "hashed"])
def test_encode_resource(benchmark: Any, resource: str) -> None:
    """The SDK's encoder (gRPC, or OTLP/HTTP without ``lean_otlp``) hashes the resource
    once a span: the process's resource (19 attributes here) as built, or hashed once."""
    from dataplane.compat.opentelemetry import hashed_resource
    from telemetry import otel

    built = otel._resource("dataplane-worker", {"dataplane.surface": "surface-probe"})
    own = hashed_resource(built) if resource == "hashed" else built
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=own)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("dataplane")
    for _ in range(BATCH):
        with tracer.start_as_current_span("process", kind=SpanKind.CONSUMER, attributes=ATTRIBUTES):
            pass
    batch = exporter.get_finished_spans()
    benchmark(lambda: sdk_encode(batch).SerializePartialToString())
