"""OTLP/HTTP span export with a cheaper encoder.

The SDK's OTLP exporter builds a protobuf message object for every span, every
attribute and every attribute value, then serialises the tree, on the exporter thread
while it holds the GIL, so the request threads wait for it. Most of what a data-plane
span says repeats from span to span (``messaging.system``, the queue, the database's
address), and the OTLP wire format is plain protobuf, so :func:`encode_spans` writes the bytes of
``ExportTraceServiceRequest`` directly and keeps the encoding of each repeated
key/value pair (the figures: ``docs/perf/code-figures.md``).

:class:`SpanExporter` is the SDK's OTLP/HTTP exporter (its endpoint, headers,
compression, timeout, retries and TLS settings from ``OTEL_*``) with only the
encoding replaced. It sends through the SDK's own HTTP client when the installed
SDK has one (``_client.export``, OpenTelemetry Python 1.39 and later); otherwise
it leaves the whole export to the SDK, so an SDK upgrade can make export slower,
never wrong. ``tests/unit/test_otlp_encode.py`` decodes what :func:`encode_spans`
writes with the protobuf classes and compares it to the SDK's encoding of the same
spans, and checks that the fast path is the one taken with the SDK installed.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as _SdkSpanExporter,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanContext, SpanKind

log = logging.getLogger(__name__)

MAX_CACHED_PAIRS = 8192  # key/value encodings kept; the cache starts over when full
MAX_CACHED_TEXT = 96  # characters: a longer string value is never cached

# Span.SpanKind in trace.proto
_KIND = {
    SpanKind.INTERNAL: 1,
    SpanKind.SERVER: 2,
    SpanKind.CLIENT: 3,
    SpanKind.PRODUCER: 4,
    SpanKind.CONSUMER: 5,
}
# SpanFlags in trace.proto: the parent's (or link's) remoteness is known, and set
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200
_FIXED64 = struct.Struct("<Q")
_FIXED32 = struct.Struct("<I")
_DOUBLE = struct.Struct("<d")


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _tag(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def _field(field: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _tag(field, 2) + _varint(len(payload)) + payload


def _text(field: int, value: str) -> bytes:
    return _field(field, value.encode("utf-8", "surrogatepass"))


def _any_value(value: Any) -> bytes:
    """An ``AnyValue`` message body."""
    if value is None:
        return b""
    if isinstance(value, str):
        return _text(1, value)
    if isinstance(value, bool):  # before int: a bool is an int
        return _tag(2, 0) + _varint(int(value))
    if isinstance(value, int):
        return _tag(3, 0) + _varint(value & 0xFFFF_FFFF_FFFF_FFFF)  # int64, two's complement
    if isinstance(value, float):
        return _tag(4, 1) + _DOUBLE.pack(value)
    if isinstance(value, bytes):
        return _field(7, value)
    if isinstance(value, Mapping):
        return _field(6, b"".join(_field(1, _key_value(str(k), v)) for k, v in value.items()))
    if isinstance(value, Sequence):
        return _field(5, b"".join(_field(1, _any_value(v)) for v in value))
    raise TypeError(f"an attribute value of type {type(value).__name__}")


def _key_value(key: str, value: Any) -> bytes:
    """A ``KeyValue`` message body."""
    return _text(1, key) + _field(2, _any_value(value))


_pairs: dict[tuple[int, str, Any, type], bytes] = {}
_SCALARS = (str, bool, int, float)


def _attribute(field: int, key: str, value: Any) -> bytes:
    """One ``KeyValue`` as repeated field ``field``; a scalar pair's bytes are kept."""
    if not isinstance(value, _SCALARS) or (isinstance(value, str) and len(value) > MAX_CACHED_TEXT):
        return _field(field, _key_value(key, value))
    cache_key = (field, key, value, type(value))
    encoded = _pairs.get(cache_key)
    if encoded is None:
        encoded = _field(field, _key_value(key, value))
        if len(_pairs) >= MAX_CACHED_PAIRS:
            _pairs.clear()
        _pairs[cache_key] = encoded
    return encoded


def _attributes(field: int, attributes: Mapping[str, Any] | None) -> bytes:
    if not attributes:
        return b""
    out = []
    for key, value in attributes.items():
        try:
            out.append(_attribute(field, key, value))
        except TypeError as exc:  # as the SDK's encoder: drop the pair, keep the span
            log.warning("attribute %s not exported: %s", key, exc)
    return b"".join(out)


def _flags(context: SpanContext | None) -> bytes:
    """``flags`` (fixed32, field 16 of a span) as the SDK sets them."""
    flags = _HAS_IS_REMOTE | (_IS_REMOTE if context is not None and context.is_remote else 0)
    return b"\x85\x01" + _FIXED32.pack(flags)


def _trace_state(field: int, context: SpanContext) -> bytes:
    state = context.trace_state
    if not state:
        return b""
    return _text(field, ",".join(f"{k}={v}" for k, v in state.items()))


def _span(span: ReadableSpan) -> bytes:
    """A ``Span`` message body."""
    context = span.context
    parent = span.parent
    assert context is not None
    parts = [
        b"\x0a\x10" + context.trace_id.to_bytes(16, "big"),
        b"\x12\x08" + context.span_id.to_bytes(8, "big"),
        _trace_state(3, context),
    ]
    if parent is not None:
        parts.append(b"\x22\x08" + parent.span_id.to_bytes(8, "big"))
    parts += [
        _text(5, span.name),
        b"\x30" + _varint(_KIND[span.kind]),
        b"\x39" + _FIXED64.pack(span.start_time or 0),
        b"\x41" + _FIXED64.pack(span.end_time or 0),
        _attributes(9, span.attributes),
    ]
    if span.dropped_attributes:
        parts.append(b"\x50" + _varint(span.dropped_attributes))
    for event in span.events:
        body = b"\x09" + _FIXED64.pack(event.timestamp) + _text(2, event.name)
        body += _attributes(3, event.attributes)
        if event.dropped_attributes:
            body += b"\x20" + _varint(event.dropped_attributes)
        parts.append(_field(11, body))
    if span.dropped_events:
        parts.append(b"\x60" + _varint(span.dropped_events))
    for link in span.links:
        body = b"\x0a\x10" + link.context.trace_id.to_bytes(16, "big")
        body += b"\x12\x08" + link.context.span_id.to_bytes(8, "big")
        body += _attributes(4, link.attributes)  # no trace_state: the SDK sends none
        if link.dropped_attributes:
            body += b"\x28" + _varint(link.dropped_attributes)
        body += b"\x35" + _FIXED32.pack(
            _HAS_IS_REMOTE | (_IS_REMOTE if link.context.is_remote else 0)
        )
        parts.append(_field(13, body))
    if span.dropped_links:
        parts.append(b"\x70" + _varint(span.dropped_links))
    status = span.status
    status_body = b""
    if status.description:
        status_body += _text(2, status.description)
    if status.status_code.value:
        status_body += b"\x18" + _varint(status.status_code.value)
    parts.append(_field(15, status_body))
    parts.append(_flags(parent))
    return b"".join(parts)


_resources: dict[int, tuple[Any, bytes]] = {}
_scopes: dict[int, tuple[Any, bytes]] = {}


def _resource(resource: Any) -> bytes:
    """A ``Resource`` message body, worked out once per resource object."""
    known = _resources.get(id(resource))
    if known is not None and known[0] is resource:
        return known[1]
    encoded = _attributes(1, resource.attributes)
    if len(_resources) >= 64:
        _resources.clear()
    _resources[id(resource)] = (resource, encoded)
    return encoded


def _scope(scope: Any) -> bytes:
    """An ``InstrumentationScope`` message body, worked out once per scope object."""
    known = _scopes.get(id(scope))
    if known is not None and known[0] is scope:
        return known[1]
    encoded = b""
    if scope is not None:
        encoded = _text(1, scope.name) if scope.name else b""
        if scope.version:
            encoded += _text(2, scope.version)
        encoded += _attributes(3, getattr(scope, "attributes", None))
    if len(_scopes) >= 64:
        _scopes.clear()
    _scopes[id(scope)] = (scope, encoded)
    return encoded


def encode_spans(spans: Sequence[ReadableSpan]) -> bytes:
    """The serialised ``ExportTraceServiceRequest`` for ``spans``, grouped by resource
    and then instrumentation scope in order of first appearance (as the SDK does)."""
    groups: dict[int, tuple[Any, dict[int, tuple[Any, list[bytes]]]]] = {}
    for span in spans:
        resource = span.resource
        scope = span.instrumentation_scope
        by_scope = groups.setdefault(id(resource), (resource, {}))[1]
        by_scope.setdefault(id(scope), (scope, []))[1].append(_field(2, _span(span)))
    out = []
    for resource, by_scope in groups.values():
        body = [_field(1, _resource(resource))]
        for scope, encoded in by_scope.values():
            scope_body = _field(1, _scope(scope)) + b"".join(encoded)
            if scope is not None and scope.schema_url:
                scope_body += _text(3, scope.schema_url)
            body.append(_field(2, scope_body))
        if resource.schema_url:
            body.append(_text(3, resource.schema_url))
        out.append(_field(1, b"".join(body)))
    return b"".join(out)


class SpanExporter(_SdkSpanExporter):
    """The SDK's OTLP/HTTP span exporter with :func:`encode_spans` as its encoder."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        client = self.sdk_client()
        if client is None:
            return super().export(spans)
        try:
            data = encode_spans(spans)
        except Exception:  # never lose a batch to our encoder: the SDK encodes it
            log.exception("OTLP span encoding failed; the SDK's encoder takes this batch")
            return super().export(spans)
        result = client.export(data)
        return SpanExportResult.SUCCESS if result.success else SpanExportResult.FAILURE

    def sdk_client(self) -> Any | None:
        """The SDK's HTTP client (compression, retries), or None when this SDK has none
        or the exporter is shut down (the SDK's export then says so)."""
        client = getattr(self, "_client", None)
        if getattr(self, "_shutdown", True) or not callable(getattr(client, "export", None)):
            return None
        return client
