"""Tracing helpers: the tracer, W3C traceparent in and out, messaging and database
attributes, spans recorded after the fact.

One trace per request: the BFF's server span -> ``send <type>`` (producer, whose
context is stored in the envelope's ``traceparent``) -> per attempt, a
``wait <type>`` span (from when the row became claimable to its claim, recorded at
claim time from the row's timestamps), the ``job_claim`` statement and the
worker's ``process <type>`` (consumer), every attempt a child of the producer
context, retries and re-drives included -> handler and SQL spans ->
``complete <type>`` (settle, a client span) and its ``job_complete`` statement ->
the BFF's ``notify <type>`` and the stream's ``done`` span, both parented on the
envelope's context. Attributes follow the OpenTelemetry messaging and database
conventions plus ``dataplane.*``.

A job poisoned on its last attempt shows it there: that attempt's ``process`` span
is ERROR and carries the ``POISON`` event. A job whose last attempt's worker died
(its lease lapsed) is poisoned by the next claim of its type or by a maintenance
pass, with no attempt left to tell: whoever parked it records a short
``poison <type>`` span (:func:`poison_span`) in the request's trace, ERROR with
``error.type`` ``POISON`` and the same ``POISON`` event.

Database statements get a client span only inside a trace: when the current span
is recording (a handler's query, the BFF's enqueue), or when the caller names the
traces a statement served (a claim's rows, a batch of completions) — then one span
per trace is recorded after the statement with its measured start and end. A
statement outside any trace (boot checks, idle claims, lease renewals) makes no
span, so no one-span root traces; with the API's no-op tracer nothing is recorded
and a statement pays one context lookup.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import cache, lru_cache
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from telemetry import spans

TRACER_NAME = "dataplane"
_PROPAGATOR = TraceContextTextMapPropagator()
MESSAGING_SYSTEM = "postgresql"
DB_SYSTEM = "postgresql"
MAX_QUERY_TEXT = 2000  # characters of db.query.text kept


def tracer() -> Tracer:
    """The data plane's tracer: the lean one :func:`~telemetry.otel.setup_telemetry`
    installs; else, with a provider someone else set, the API's; else a no-op one
    that carries context as the API's does, cheaper."""
    lean = spans.installed()
    if lean is not None:
        return lean
    return _api_tracer() if tracing_on() else spans.NO_TRACER


@cache
def _api_tracer() -> Tracer:
    return trace.get_tracer(TRACER_NAME)


def tracing_on() -> bool:
    """Whether a real tracer provider is installed (not the API's no-op)."""
    return not isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider
    )


def in_trace() -> bool:
    """Whether the current span is being recorded (cheap: one context lookup)."""
    return trace.get_current_span().is_recording()


def current_traceparent() -> str | None:
    """The W3C traceparent of the current span, if it is being recorded."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


def inject_headers(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` plus the current context's ``traceparent`` (when there is one)."""
    _PROPAGATOR.inject(headers)
    return headers


def context_from(traceparent: object) -> otel_context.Context | None:
    """A context whose parent is ``traceparent`` (None when absent or invalid: it comes
    from stored rows and headers, so anything but a string of a sane length is None)."""
    if not traceparent or type(traceparent) is not str or len(traceparent) > MAX_TRACEPARENT:
        return None
    return _context_from(traceparent)


MAX_TRACEPARENT = 512  # characters: a W3C traceparent is 55


@lru_cache(maxsize=1024)  # a job's traceparent is parsed for each of its spans: once
def _context_from(traceparent: str) -> otel_context.Context | None:
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


def context_of(span: Span) -> otel_context.Context:
    """A context whose parent is ``span`` (for spans recorded later, elsewhere)."""
    return trace.set_span_in_context(span)


def trace_id_hex(span: Span) -> str | None:
    """The span's trace id as 32 lowercase hex digits (None for the no-op span)."""
    sc = span.get_span_context()
    return format(sc.trace_id, "032x") if sc.is_valid else None


def messaging(
    operation_type: str,
    queue_type: str,
    job_id: str | None = None,
    *,
    operation_name: str | None = None,
    **extra: Any,
) -> Mapping[str, Any]:
    """Messaging semantic-convention attributes plus ``dataplane.*`` ones.

    ``messaging.operation.name`` is ``operation_name``, by default the type's name.
    """
    attrs: dict[str, Any] = {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.operation.type": operation_type,
        "messaging.operation.name": operation_name or operation_type,
        "messaging.destination.name": queue_type,
    }
    if job_id is not None:
        attrs["messaging.message.id"] = job_id
    for key, value in extra.items():
        if value is not None:
            attrs[f"dataplane.{key}"] = value
    return attrs


def failed(span: Span, error_type: str, description: str = "") -> None:
    """Mark ``span`` failed: ERROR status and ``error.type``."""
    if span.is_recording():
        span.set_status(Status(StatusCode.ERROR, description or error_type))
        span.set_attribute("error.type", error_type)


def record_span(
    name: str,
    parent: otel_context.Context | None,
    start: datetime | int,
    end: datetime | int,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, Any] | None = None,
) -> None:
    """A span that already happened, ``start`` to ``end`` (datetimes or epoch ns)."""
    span = tracer().start_span(
        name, context=parent, kind=kind, attributes=attributes, start_time=_ns(start)
    )
    span.end(end_time=_ns(end))


@contextmanager
def poison_span(
    queue_type: str,
    job_id: str,
    traceparent: str | None,
    *,
    attempt: int,
    max_dequeues: int,
    reason: str,
    cause: str,
) -> Iterator[Span]:
    """A short ``poison <type>`` span for a job parked as poison by someone other than
    its attempt's worker (a claim, a maintenance pass), current inside the block: a
    line logged there carries the request's trace id.

    Parented on the request's producer context (``traceparent``); ERROR with
    ``error.type`` ``POISON``; ``dataplane.attempt`` and ``dataplane.reason``; and a
    ``POISON`` event as the fail path's (``dataplane.attempt``,
    ``dataplane.max_dequeues``, ``error.type`` = ``cause``). Nothing is recorded when
    tracing is off or the traceparent is missing or invalid: never an orphan root.
    """
    parent = context_from(traceparent) if tracing_on() else None
    if parent is None:
        yield trace.INVALID_SPAN
        return
    span = tracer().start_span(
        f"poison {queue_type}",
        context=parent,
        kind=SpanKind.CLIENT,
        attributes=messaging(
            "settle",
            queue_type,
            job_id,
            operation_name="poison",
            attempt=attempt,
            max_dequeues=max_dequeues,
            reason=reason,
        ),
    )
    span.add_event(
        "POISON",
        {"dataplane.attempt": attempt, "dataplane.max_dequeues": max_dequeues, "error.type": cause},
    )
    failed(span, "POISON", f"parked as poison: {reason}")
    with trace.use_span(span, end_on_exit=True):
        yield span


def _ns(t: datetime | int) -> int:
    return t if isinstance(t, int) else round(t.timestamp() * 1e9)


# -- database statements ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Statement:
    """What a span says about one SQL text: its name (``db.query.summary``) and verb."""

    summary: str
    operation: str


_VERBS = ("SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "VALUES")
_TOKEN = re.compile(r"\(|\)|'(?:[^']|'')*'|\"[^\"]*\"|[A-Za-z_][A-Za-z0-9_.]*")
_COMMENT = re.compile(r"--[^\n]*")
_TARGET = re.compile(r"\b(?:FROM|INTO|UPDATE|JOIN)\s+([A-Za-z_][A-Za-z0-9_.]*)", re.IGNORECASE)


def describe(text: str, name: str | None = None) -> Statement:
    """The statement's span name and ``db.operation.name``.

    The operation is the verb of the top-level command (after any ``WITH`` list);
    the summary is the statement's registered name (``job_claim``), else
    ``<verb> <first table>``, as the database conventions' ``db.query.summary``.
    """
    text = _COMMENT.sub(" ", text)
    verb = ""
    depth = 0
    for i, token in enumerate(_TOKEN.findall(text)):
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        elif depth == 0 and token[0] not in "'\"":
            word = token.upper()
            if word in _VERBS or (i == 0 and word != "WITH"):
                verb = word  # SET, SHOW, CALL...: the first word is the command
                break
    verb = verb or "SQL"
    if name:
        return Statement(name, verb)
    target = _TARGET.search(text)
    return Statement(f"{verb} {target.group(1)}" if target else verb, verb)


def db_attributes(
    statement: Statement, target: Mapping[str, Any], text: str | None
) -> dict[str, Any]:
    """The database-convention attributes of one statement on ``target``."""
    attrs: dict[str, Any] = {
        **target,
        "db.operation.name": statement.operation,
        "db.query.summary": statement.summary,
    }
    if text is not None:
        attrs["db.query.text"] = text[:MAX_QUERY_TEXT]
    return attrs


def db_target(dbname: str | None, host: str | None, port: int | None) -> dict[str, Any]:
    """``db.system.name``, ``db.namespace``, ``server.address`` and ``server.port``."""
    attrs: dict[str, Any] = {"db.system.name": DB_SYSTEM}
    if dbname:
        attrs["db.namespace"] = dbname
    if host:
        attrs["server.address"] = host
    if port:
        attrs["server.port"] = port
    return attrs


def statement_span(statement: Statement, attributes: Mapping[str, Any]) -> Any:
    """A live client span for one statement, child of the current span."""
    return tracer().start_as_current_span(
        statement.summary, kind=SpanKind.CLIENT, attributes=attributes
    )


def record_statement(
    statement: Statement,
    attributes: Mapping[str, Any],
    parents: Iterable[otel_context.Context | None],
    start_ns: int,
    end_ns: int,
    error: BaseException | None = None,
) -> None:
    """One client span per distinct parent for a statement that already ran."""
    seen: set[tuple[int, int]] = set()
    for parent in parents:
        if parent is None:
            continue
        sc = trace.get_current_span(parent).get_span_context()
        if not sc.is_valid or (sc.trace_id, sc.span_id) in seen:
            continue
        seen.add((sc.trace_id, sc.span_id))
        span = tracer().start_span(
            statement.summary,
            context=parent,
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=start_ns,
        )
        if error is not None:
            failed(span, type(error).__name__, str(error))
        span.end(end_time=end_ns)
