"""The tracer the plane's spans come from, and the hook that can replace it.

:func:`~telemetry.otel.setup_telemetry` builds the SDK's tracer provider
and asks :func:`install` for a tracer over it: the tracer factory set with
:func:`use_tracer_factory` (:mod:`dataplane.compat.opentelemetry`'s lean tracer,
installed by the entry points), else none, and
:func:`~telemetry.tracing.tracer` is the SDK's. Without telemetry it is
:data:`NO_TRACER`: the API's no-op tracer whose current-span context manager costs no
generator frames.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.util import types

# (provider, its only span processor, tracer name) -> a tracer
TracerFactory = Callable[[Any, Any, str], trace.Tracer]


class Current:
    """``trace.use_span`` as a class: one object, no generator frames."""

    __slots__ = ("end_on_exit", "record_exception", "set_status", "span", "token")

    def __init__(
        self, span: trace.Span, end_on_exit: bool, record_exception: bool, set_status: bool
    ) -> None:
        self.span = span
        self.end_on_exit = end_on_exit
        self.record_exception = record_exception
        self.set_status = set_status
        self.token: object = None

    def __enter__(self) -> trace.Span:
        self.token = otel_context.attach(trace.set_span_in_context(self.span))
        return self.span

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            # Only an Exception (not Cancelled, KeyboardInterrupt...), as use_span.
            if isinstance(exc, Exception) and self.span.is_recording():
                if self.record_exception:
                    self.span.record_exception(exc)
                if self.set_status:
                    self.span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        finally:
            otel_context.detach(self.token)  # type: ignore[arg-type]
            if self.end_on_exit:
                self.span.end()


class _Same:
    """The current span stays current: nothing to attach."""

    __slots__ = ("span",)

    def __init__(self, span: trace.Span) -> None:
        self.span = span

    def __enter__(self) -> trace.Span:
        return self.span

    def __exit__(self, *exc: object) -> None:
        return None


class NoTracer(trace.NoOpTracer):
    """The API's no-op tracer (spans that record nothing but carry the parent's
    context) with a current-span context manager that costs no generator frames, and
    nothing at all when the span it would make current already is."""

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
    ) -> Current | _Same:
        span = self.start_span(name, context)
        if context is None and span is trace.get_current_span():
            return _Same(span)
        return Current(span, end_on_exit, False, False)


NO_TRACER = NoTracer()
_factory: TracerFactory | None = None
_installed: trace.Tracer | None = None


def use_tracer_factory(factory: TracerFactory | None) -> None:
    """The hook of :mod:`dataplane.compat.opentelemetry`: tracers that
    :func:`install` makes from now on (None: none, the SDK's own)."""
    global _factory
    _factory = factory


def install(provider: Any, processor: Any, name: str) -> trace.Tracer | None:
    """Make :func:`installed` the factory's tracer over ``provider`` and its only
    ``processor`` (None without a factory: the SDK's tracer serves)."""
    global _installed
    _installed = _factory(provider, processor, name) if _factory is not None else None
    return _installed


def uninstall() -> None:
    global _installed
    _installed = None


def installed() -> trace.Tracer | None:
    return _installed
