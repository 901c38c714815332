"""Tracing helpers: the tracer, W3C traceparent in and out, messaging and database
attributes.

One trace per request: the BFF's server span -> ``send <type>`` (producer, whose
context is stored in the envelope's ``traceparent``) -> the worker's
``process <type>`` (consumer; child of that context on the first attempt, linked
to it on retries; the queue wait is its ``dataplane.queue_wait_ms`` attribute) ->
handler and SQL spans -> ``complete <type>`` -> the BFF's
``notify <type>`` and the stream's ``done`` span, both parented on the envelope's
context. Attributes follow the OpenTelemetry messaging conventions plus
``dataplane.*``.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, SpanKind, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()
MESSAGING_SYSTEM = "postgresql"


@cache
def tracer() -> Tracer:
    """The data plane's tracer (a proxy until a provider is set; it follows it then)."""
    return trace.get_tracer("dataplane")


def current_traceparent() -> str | None:
    """The W3C traceparent of the current span, if it is being recorded."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


def context_from(traceparent: str | None) -> otel_context.Context | None:
    """A context whose parent is ``traceparent`` (None when absent or invalid)."""
    if not traceparent:
        return None
    ctx = _PROPAGATOR.extract({"traceparent": traceparent})
    span_context = trace.get_current_span(ctx).get_span_context()
    return ctx if span_context.is_valid else None


def span_context_from(traceparent: str | None) -> SpanContext | None:
    ctx = context_from(traceparent)
    if ctx is None:
        return None
    return trace.get_current_span(ctx).get_span_context()


def links_to(*traceparents: str | None) -> list[Link]:
    out = []
    for tp in traceparents:
        sc = span_context_from(tp)
        if sc is not None:
            out.append(Link(sc))
    return out


def messaging(
    operation_type: str,
    queue_type: str,
    job_id: str | None = None,
    **extra: Any,
) -> Mapping[str, Any]:
    """Messaging semantic-convention attributes plus ``dataplane.*`` ones."""
    attrs: dict[str, Any] = {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.operation.type": operation_type,
        "messaging.destination.name": queue_type,
    }
    if job_id is not None:
        attrs["messaging.message.id"] = job_id
    for key, value in extra.items():
        if value is not None:
            attrs[f"dataplane.{key}"] = value
    return attrs


def statement_span(query: object) -> Any:
    """A client span for one SQL statement (the client DB's queries)."""
    text = query if isinstance(query, str) else repr(query)
    verb = text.lstrip().split(None, 1)[0].upper() if text.strip() else "SQL"
    return tracer().start_as_current_span(
        f"db {verb}",
        kind=SpanKind.CLIENT,
        attributes={"db.system.name": "postgresql", "db.query.text": text[:2000]},
    )
