"""The process's OpenTelemetry resource: what it names, and a hash worked out once."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from telemetry import otel


def test_the_resource_names_the_service_its_version_instance_host_and_process() -> None:
    res = otel._resource("dataplane-worker", {"dataplane.surface": "surface-probe"})
    attrs = res.attributes
    assert attrs["service.name"] == "dataplane-worker"
    assert attrs["dataplane.surface"] == "surface-probe"
    for key in ("service.version", "service.instance.id", "host.name", "process.pid"):
        assert attrs.get(key), key


def test_the_resource_hashes_once_and_still_equals_a_plain_resource(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    res = otel._resource("dataplane-bff", None)
    plain = Resource(res.attributes, res.schema_url)
    assert res == plain and hash(res) == hash(plain)
    calls: list[int] = []
    real_dumps = json.dumps

    def counting(*a: Any, **kw: Any) -> str:
        calls.append(1)
        return real_dumps(*a, **kw)

    monkeypatch.setattr("opentelemetry.sdk.resources.dumps", counting)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=res)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    for i in range(50):
        tracer.start_span(f"s{i}").end()
    request = encode_spans(exporter.get_finished_spans())
    # 50 spans of one resource are grouped as one, and its attributes were never
    # JSON-encoded again for it (the SDK's own hash does that per span).
    assert len(request.resource_spans) == 1
    assert len(request.resource_spans[0].scope_spans[0].spans) == 50
    assert calls == []
    hash(plain)
    assert calls == [1]  # the plain resource's hash does encode: the count can fail
