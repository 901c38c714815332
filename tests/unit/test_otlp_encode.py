"""The span encoder writes what the SDK's protobuf encoder writes, and the exporter uses it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as sdk_encode
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    set_span_in_context,
)

from dataplane.compat.opentelemetry import otlp
from telemetry import otel


def finished(provider: TracerProvider, exporter: InMemorySpanExporter) -> Sequence[ReadableSpan]:
    provider.force_flush()
    return exporter.get_finished_spans()


def assorted_spans() -> Sequence[ReadableSpan]:
    """Spans that use every field the encoder writes, from two resources and scopes."""
    out: list[ReadableSpan] = []
    for resource in (
        otel._resource("dataplane-worker", {"dataplane.surface": "surface-probe"}),
        Resource({"service.name": "other", "n": 3}, "https://opentelemetry.io/schemas/1.30"),
    ):
        exporter = InMemorySpanExporter()
        provider = TracerProvider(
            resource=resource, span_limits=SpanLimits(max_span_attributes=12, max_events=2)
        )
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        plain = provider.get_tracer("dataplane")
        versioned = provider.get_tracer("dataplane.x", "1.2.3", "https://example.test/schema")
        remote = SpanContext(
            0x0123456789ABCDEF0123456789ABCDEF,
            0x1122334455667788,
            is_remote=True,
            trace_flags=TraceFlags(1),
            trace_state=TraceState([("vendor", "v1"), ("other", "x")]),
        )
        parent = set_span_in_context(NonRecordingSpan(remote))
        with plain.start_as_current_span("POST /api/{surface}/q", kind=SpanKind.SERVER) as root:
            root.set_attributes(
                {
                    "http.request.method": "POST",
                    "http.response.status_code": 202,
                    "negative": -7,
                    "big": 2**62,
                    "ratio": 0.25,
                    "flag": True,
                    "off": False,
                    "names": ("a", "b", "ü"),
                    "numbers": (1, -2, 3),
                    "floats": (0.5, 1.5),
                    "bools": (True, False),
                    "empty": "",
                    "dropped": "over the limit of 12",
                }
            )
            root.add_event("first", {"dataplane.attempt": 1, "error.type": "TIMEOUT"}, 1234)
            root.add_event("second")
            root.add_event("third (dropped)")
            root.set_status(Status(StatusCode.ERROR, "it failed — ünïcode"))
        span = versioned.start_span(
            "process surface-probe",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes={"messaging.message.id": "0190abcd-1234-7000-8000-" + "0" * 12},
            links=[
                Link(remote, {"dataplane.coalesced": True}),
                Link(root.get_span_context()),
            ],
            start_time=1_700_000_000_000_000_000,
        )
        span.set_status(Status(StatusCode.OK))
        span.end(end_time=1_700_000_000_123_456_789)
        for kind in (SpanKind.CLIENT, SpanKind.PRODUCER, SpanKind.INTERNAL):
            plain.start_span(f"k{kind.name}", kind=kind, attributes={"long": "x" * 500}).end()
        out += finished(provider, exporter)
    return out


def test_the_encoding_decodes_to_the_sdks_message() -> None:
    spans = assorted_spans()
    assert spans[0].dropped_attributes == 1 and spans[0].dropped_events == 1  # it is covered
    ours = ExportTraceServiceRequest.FromString(otlp.encode_spans(spans))
    assert ours == sdk_encode(spans)
    assert len(ours.resource_spans) == 2
    assert [len(r.scope_spans) for r in ours.resource_spans] == [2, 2]


def test_repeated_pairs_come_from_the_cache_and_encode_the_same() -> None:
    spans = assorted_spans()
    first = otlp.encode_spans(spans)
    assert otlp._pairs  # scalar pairs were kept
    assert not any(isinstance(k[2], str) and len(k[2]) > otlp.MAX_CACHED_TEXT for k in otlp._pairs)
    assert otlp.encode_spans(spans) == first
    otlp._pairs.clear()
    assert otlp.encode_spans(spans) == first


def test_an_empty_batch_is_an_empty_request() -> None:
    assert otlp.encode_spans([]) == b""
    assert ExportTraceServiceRequest.FromString(b"") == sdk_encode([])


def test_the_exporter_sends_our_encoding_through_the_sdks_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exporter = otlp.SpanExporter(endpoint="http://127.0.0.1:9/v1/traces")
    client = exporter.sdk_client()
    assert client is not None, "the installed SDK has no _client.export: the fast path is off"
    sent: list[bytes] = []

    class Result:
        success = True

    def export(data: bytes) -> Result:
        sent.append(data)
        return Result()

    monkeypatch.setattr(client, "export", export)
    spans = assorted_spans()
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    assert sent == [otlp.encode_spans(spans)]
    exporter.shutdown()
    assert exporter.sdk_client() is None  # shut down: the SDK's export refuses the batch
    assert exporter.export(spans) is SpanExportResult.FAILURE
