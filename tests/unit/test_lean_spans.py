"""The lean tracer's spans say what the SDK tracer's say, and it follows the sampler."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from dataplane.compat.opentelemetry.spans import LeanTracer
from telemetry import spans, tracing

Tracer = trace.Tracer


def pipeline(**kw: object) -> tuple[TracerProvider, SimpleSpanProcessor, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"service.name": "t"}), **kw)  # type: ignore[arg-type]
    processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    return provider, processor, exporter


def scenario(tracer: Tracer) -> None:
    """What the data plane does with spans: live and current, recorded after the fact,
    failed by an exception, links, events, status rules, late calls after the end."""
    remote = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1))
    with tracer.start_as_current_span(
        "POST /api/{surface}/q", kind=SpanKind.SERVER, attributes={"a": 1, "skip": None}
    ) as server:
        server.set_attribute("http.response.status_code", 202)
        server.set_attributes({"b": "x", "c": (1, 2)})
        server.add_event("TIMEOUT", {"dataplane.attempt": 2}, timestamp=5)
        server.update_name("POST /api/{surface}/q (renamed)")
        with tracer.start_as_current_span("send surface-probe", kind=SpanKind.PRODUCER) as send:
            send.set_status(StatusCode.OK)
            send.set_status(Status(StatusCode.ERROR, "ignored: OK is final"))
        with pytest.raises(ValueError), tracer.start_as_current_span("handler"):
            raise ValueError("boom")
        recorded = tracer.start_span(
            "job_claim",
            context=trace.set_span_in_context(server),
            kind=SpanKind.CLIENT,
            attributes={"db.system.name": "postgresql"},
            links=[Link(remote, {"dataplane.coalesced": True})],
            start_time=10,
        )
        recorded.set_status(StatusCode.UNSET)  # ignored
        recorded.set_status(StatusCode.ERROR, "failed")
        recorded.add_link(remote)
        recorded.end(end_time=20)
        recorded.set_attribute("late", 1)  # after the end: nothing
        recorded.end(end_time=30)  # a second end: nothing
    child_of_remote = tracer.start_span(
        "process surface-probe",
        context=trace.set_span_in_context(NonRecordingSpan(remote)),
        kind=SpanKind.CONSUMER,
    )
    child_of_remote.record_exception(RuntimeError("noted"), {"extra": "yes"}, timestamp=7)
    child_of_remote.end()


def normalised(exported: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
    """The OTLP encoding with what differs run to run (ids, times, stack lines) fixed."""
    request = encode_spans(exported)
    ids: dict[bytes, bytes] = {}
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                for field in ("trace_id", "span_id", "parent_span_id"):
                    value = getattr(span, field)
                    if value:
                        setattr(
                            span, field, ids.setdefault(value, bytes([len(ids) + 1]) * len(value))
                        )
                if span.start_time_unix_nano > 1000:
                    span.start_time_unix_nano = 1
                if span.end_time_unix_nano > 1000:
                    span.end_time_unix_nano = 2
                for event in span.events:
                    if event.time_unix_nano > 1000:
                        event.time_unix_nano = 3
                    for kv in event.attributes:
                        if kv.key == "exception.stacktrace":
                            kv.value.string_value = kv.value.string_value.splitlines()[-1]
    return request


def run(make: Callable[[TracerProvider, SimpleSpanProcessor], Tracer]) -> ExportTraceServiceRequest:
    provider, processor, exporter = pipeline()
    scenario(make(provider, processor))
    return normalised(exporter.get_finished_spans())


def test_a_lean_span_exports_as_the_sdk_span_of_the_same_calls() -> None:
    sdk = run(lambda provider, _: provider.get_tracer("dataplane"))
    lean = run(lambda provider, processor: LeanTracer(provider, processor, "dataplane"))
    names = [s.name for s in sdk.resource_spans[0].scope_spans[0].spans]
    assert names == [
        "send surface-probe",
        "handler",
        "job_claim",
        "POST /api/{surface}/q (renamed)",
        "process surface-probe",
    ]
    assert lean == sdk


def test_the_lean_tracer_follows_the_providers_sampler() -> None:
    provider, processor, exporter = pipeline(sampler=ParentBased(ALWAYS_OFF))
    tracer = LeanTracer(provider, processor, "dataplane")
    root = tracer.start_span("root")
    assert not root.is_recording() and root.get_span_context().is_valid
    sampled_parent = SpanContext(1, 2, is_remote=True, trace_flags=TraceFlags(1))
    child = tracer.start_span(
        "child", context=trace.set_span_in_context(NonRecordingSpan(sampled_parent))
    )
    assert child.is_recording()
    root.end()
    child.end()
    assert [s.name for s in exporter.get_finished_spans()] == ["child"]


def test_tracer_is_the_installed_lean_one_until_it_is_uninstalled() -> None:
    provider, processor, _ = pipeline()
    assert not isinstance(tracing.tracer(), LeanTracer)
    spans.use_tracer_factory(LeanTracer)  # as dataplane.compat.opentelemetry installs it
    installed = spans.install(provider, processor, tracing.TRACER_NAME)
    try:
        assert isinstance(installed, LeanTracer) and tracing.tracer() is installed
    finally:
        spans.uninstall()
        spans.use_tracer_factory(None)
    assert not isinstance(tracing.tracer(), LeanTracer)


def test_with_the_default_sampler_the_parent_decides() -> None:
    provider, processor, exporter = pipeline()  # ParentBased(ALWAYS_ON)
    tracer = LeanTracer(provider, processor, "dataplane")
    unsampled = SpanContext(1, 2, is_remote=True, trace_flags=TraceFlags(0))
    dropped = tracer.start_span(
        "dropped", context=trace.set_span_in_context(NonRecordingSpan(unsampled))
    )
    assert not dropped.is_recording()
    assert not dropped.get_span_context().trace_flags.sampled
    with tracer.start_as_current_span("root") as root:
        assert root.get_span_context().trace_flags.sampled
        tracer.start_span("child").end()
    dropped.end()
    assert [s.name for s in exporter.get_finished_spans()] == ["child", "root"]
    (child, _) = exporter.get_finished_spans()
    assert child.parent is not None and child.parent.span_id == root.get_span_context().span_id


def test_with_tracing_off_spans_carry_context_as_the_apis_no_op_tracer_does() -> None:
    assert not tracing.tracing_on()  # unit tests install no global provider
    assert tracing.tracer() is spans.NO_TRACER
    api = trace.NoOpTracer()
    remote = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1))
    parent = trace.set_span_in_context(NonRecordingSpan(remote))
    seen: dict[str, list[SpanContext]] = {}
    for name, tracer in (("api", api), ("ours", spans.NO_TRACER)):
        got = seen.setdefault(name, [])
        with tracer.start_as_current_span("outside") as outside:
            got.append(outside.get_span_context())
            got.append(trace.get_current_span().get_span_context())
        with tracer.start_as_current_span("child", context=parent) as child:
            got.append(child.get_span_context())
            got.append(trace.get_current_span().get_span_context())
            with tracer.start_as_current_span("grandchild") as grandchild:
                got.append(grandchild.get_span_context())
            assert not child.is_recording()
        got.append(trace.get_current_span().get_span_context())
        with pytest.raises(ValueError), tracer.start_as_current_span("fails", context=parent):
            raise ValueError("passes through")
    assert seen["ours"] == seen["api"]
    assert seen["ours"][2] == remote and seen["ours"][4] == remote
