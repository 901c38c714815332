"""A lean tracer: spans that cost a few microseconds, handed to the SDK's span processor.

The SDK's ``Span`` is built for any thread: each one takes locks, wraps its
attributes in a bounded, validated, locked mapping, copies itself into a
``ReadableSpan`` when it ends, and goes through a generator context manager to
become current; a request makes about twelve. The data plane's spans live on one Trio thread and
carry attributes the plane itself chose (strings, numbers, booleans; query text
already cut to :data:`~telemetry.tracing.MAX_QUERY_TEXT`), so
:class:`LeanSpan` keeps plain fields and, when it ends, hands one ``ReadableSpan``
to the batch processor (the figures: ``docs/perf/code-figures.md``).

Everything else is still the SDK's: its sampler decides (``OTEL_TRACES_SAMPLER``),
its id generator makes the ids, its resource names the process, its
``BatchSpanProcessor`` queues and its exporter sends. What it reads of the SDK: the
provider's ``sampler``, ``id_generator`` and ``resource``, and ``ReadableSpan``'s
constructor (its keyword arguments; ``tests/unit/test_compat.py`` pins them).
:mod:`dataplane.compat.opentelemetry` makes :class:`LeanTracer` the tracer factory of
:func:`~telemetry.otel.setup_telemetry` (``lean_spans``); without it
(the kill switch, tests that set up their own provider, or no telemetry at all),
:func:`~telemetry.tracing.tracer` is the SDK's or the API's tracer.

What it does not do: SDK span limits (the plane's attribute sets are small and
bounded by the code that writes them) and ``on_start`` callbacks (the batch
processor has none).
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from time import time_ns
from types import MappingProxyType
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Decision, ParentBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from opentelemetry.util import types

from telemetry.spans import Current

_UNSET = Status(StatusCode.UNSET)
_DEFAULT_SAMPLER = ParentBased(ALWAYS_ON).get_description()  # type: ignore[no-untyped-call]
_NO_ATTRIBUTES: Mapping[str, Any] = MappingProxyType({})
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)


class LeanTracer(trace.Tracer):
    """A tracer whose spans are :class:`LeanSpan`; sampling, ids, resource and the
    processor are the SDK provider's."""

    def __init__(self, provider: TracerProvider, processor: SpanProcessor, name: str) -> None:
        self._sampler = provider.sampler
        # The default sampler's decision is the parent's: taken here without a call.
        self._parent_decides = self._sampler.get_description() == _DEFAULT_SAMPLER
        self._ids = provider.id_generator
        self._resource = provider.resource
        self._processor = processor
        self._scope = InstrumentationScope(name)

    def start_span(
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        """A span (the caller's ``attributes`` mapping is kept, copied only if the span
        writes to it: pass one that is not changed afterwards)."""
        parent: SpanContext | None = trace.get_current_span(context).get_span_context()
        if parent is not None and not parent.is_valid:
            parent = None
        trace_id = parent.trace_id if parent is not None else self._ids.generate_trace_id()
        extra: types.Attributes = None
        if self._parent_decides:
            sampled = parent is None or parent.trace_flags.sampled
            recording = sampled
            state = parent.trace_state if parent is not None else None
        else:
            decision = self._sampler.should_sample(context, trace_id, name, kind, attributes, links)
            sampled = decision.decision is Decision.RECORD_AND_SAMPLE
            recording = decision.decision is not Decision.DROP
            state = decision.trace_state
            extra = decision.attributes
        span_context = SpanContext(
            trace_id,
            self._ids.generate_span_id(),
            is_remote=False,
            trace_flags=_SAMPLED if sampled else _NOT_SAMPLED,
            trace_state=state,
        )
        if not recording:
            return NonRecordingSpan(span_context)
        span = LeanSpan(
            self,
            name,
            span_context,
            parent,
            kind,
            attributes or _NO_ATTRIBUTES,
            list(links) if links else [],
            start_time if start_time is not None else time_ns(),
        )
        if extra:
            span.set_attributes(extra)
        return span

    def start_as_current_span(  # type: ignore[override]  # the API's: its own wrapper type
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Current:
        """The span, current inside the ``with`` block (as ``trace.use_span``: an
        ``Exception`` leaving it is recorded and sets ERROR; the span ends on exit)."""
        span = self.start_span(name, context, kind, attributes, links, start_time)
        return Current(span, end_on_exit, record_exception, set_status_on_exception)

    def finished(self, span: LeanSpan) -> None:
        self._processor.on_end(
            ReadableSpan(
                name=span.name,
                context=span.context,
                parent=span.parent,
                resource=self._resource,
                attributes=span.attributes,
                events=tuple(span.events),
                links=tuple(span.links),
                kind=span.kind,
                status=span.status,
                start_time=span.start_time,
                end_time=span.end_time,
                instrumentation_scope=self._scope,
            )
        )


class LeanSpan(trace.Span):
    """A span of one thread: plain fields, no locks; ended once (later calls do nothing)."""

    __slots__ = (
        "attributes",
        "context",
        "end_time",
        "events",
        "kind",
        "links",
        "name",
        "own_attributes",
        "parent",
        "start_time",
        "status",
        "tracer",
    )

    def __init__(
        self,
        tracer: LeanTracer,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        attributes: Mapping[str, Any],
        links: list[Link],
        start_time: int,
    ) -> None:
        self.tracer = tracer
        self.name = name
        self.context = context
        self.parent = parent
        self.kind = kind
        self.attributes = attributes  # the caller's until the span writes one
        self.own_attributes = False
        self.links = links
        self.events: list[Event] = []
        self.status = _UNSET
        self.start_time = start_time
        self.end_time: int | None = None

    def get_span_context(self) -> SpanContext:
        return self.context

    def is_recording(self) -> bool:
        return self.end_time is None

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        if self.end_time is None and value is not None:
            if not self.own_attributes:
                self.attributes = dict(self.attributes)
                self.own_attributes = True
            self.attributes[key] = value  # type: ignore[index]

    def add_event(
        self, name: str, attributes: types.Attributes = None, timestamp: int | None = None
    ) -> None:
        if self.end_time is None:
            self.events.append(Event(name, attributes, timestamp))

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        if self.end_time is None and context.is_valid:
            self.links.append(Link(context, attributes))

    def update_name(self, name: str) -> None:
        if self.end_time is None:
            self.name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        """As the SDK's: OK is final, UNSET is ignored."""
        if self.end_time is not None or self.status.status_code is StatusCode.OK:
            return
        if isinstance(status, StatusCode):
            status = Status(status, description)
        if status.status_code is not StatusCode.UNSET:
            self.status = status

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """An ``exception`` event with the attributes the SDK gives it."""
        module = type(exception).__module__
        name = type(exception).__qualname__
        attrs: dict[str, Any] = {
            "exception.type": f"{module}.{name}" if module and module != "builtins" else name,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        if attributes:
            attrs.update(attributes)
        self.add_event("exception", attrs, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self.end_time is not None:
            return
        self.end_time = end_time if end_time is not None else time_ns()
        self.tracer.finished(self)
