"""A real OTLP/HTTP receiver for tests: served by Hypercorn in the test's nursery, it
decodes the protobuf export requests (opentelemetry-proto) and keeps every span with
the service that sent it. Tests use the ``otlp`` fixture (import it into the test
module) and :func:`attrs` to read a span's attributes."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from quart import request
from quart_trio import QuartTrio


@dataclass
class Received:
    spans: list[tuple[str, Span]] = field(default_factory=list)  # (service, span)
    requests: int = 0

    def named(self, name: str) -> list[tuple[str, Span]]:
        return [(svc, s) for svc, s in self.spans if s.name == name]


@pytest.fixture
async def otlp(nursery: trio.Nursery) -> AsyncIterator[tuple[str, Received]]:
    received = Received()
    app = QuartTrio("otlp-receiver")

    @app.post("/v1/traces")
    async def traces() -> tuple[bytes, int]:
        received.requests += 1
        msg = ExportTraceServiceRequest()
        msg.ParseFromString(await request.get_data())
        for rs in msg.resource_spans:
            service = next(
                (a.value.string_value for a in rs.resource.attributes if a.key == "service.name"),
                "?",
            )
            for ss in rs.scope_spans:
                received.spans.extend((service, span) for span in ss.spans)
        return b"", 200

    @app.post("/v1/metrics")
    async def metrics() -> tuple[bytes, int]:
        received.requests += 1
        return b"", 200

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    shutdown = trio.Event()
    binds = await nursery.start(
        functools.partial(serve, app, config, shutdown_trigger=shutdown.wait)
    )
    yield binds[0], received
    shutdown.set()


def attrs(span: Span) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        v = kv.value
        out[kv.key] = getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None
    return out
