"""The OpenTelemetry SDK 1.39-1.45: what we replace, and why (all of it for speed).

* ``lean_spans``: :class:`~dataplane.compat.opentelemetry.spans.LeanTracer`, the
  tracer :func:`~telemetry.otel.setup_telemetry` installs over the SDK's
  provider (reads its ``sampler``, ``id_generator`` and ``resource``; builds
  ``ReadableSpan`` itself).
* ``lean_otlp``: :class:`~dataplane.compat.opentelemetry.otlp.SpanExporter`, the SDK's
  OTLP/HTTP exporter with its encoder replaced, sending through the exporter's private
  ``_client``.
* ``hashed_resource``: :func:`hashed_resource`, the process's resource with its hash
  worked out once (the SDK's ``Resource.__hash__`` JSON-encodes every attribute on
  each call, and its OTLP encoder hashes the resource once per span exported).

And one correctness name (always on): ``proxy_meter``, :func:`proxy_delegate` lets
:func:`~telemetry.metrics.metrics_on` see through the API's proxy meter to the meter
it delegates to (its private ``_real_meter``), so a worker whose metrics are off builds
no job's metric attributes; without it a proxy counts as recording.

The figures against the stock path, alternated: ``docs/perf/compat-ab.md``; per span
(``bench/micro/test_spans.py``): ``docs/perf/code-figures.md``.
Tested with opentelemetry-sdk 1.39 to 1.45 (pyproject.toml caps it below 1.46).
Installed by :func:`install` from the entry points (:func:`dataplane.compat.install_process`),
never at import; in effect for the providers
:func:`~telemetry.otel.setup_telemetry` builds from then on.
"""

from __future__ import annotations

from collections.abc import Collection
from functools import cache
from typing import Any

from dataplane.compat.opentelemetry.otlp import SpanExporter
from dataplane.compat.opentelemetry.spans import LeanTracer
from telemetry import metrics, otel, spans

DISTRIBUTION = "opentelemetry-sdk"
TESTED = tuple((1, minor) for minor in range(39, 46))
CORRECTNESS = ("proxy_meter",)
SPEED = ("lean_spans", "lean_otlp", "hashed_resource")
# The private (or internal) names of the SDK this package reads or replaces
# (tests/unit/test_compat.py checks each exists with the shape used).
REACHES = (
    "opentelemetry.sdk.trace.ReadableSpan",  # built directly: its constructor's keywords
    "opentelemetry.sdk.trace.Event",
    "opentelemetry.sdk.trace.TracerProvider",  # its instances' sampler, id_generator, resource
    "opentelemetry.sdk.util.instrumentation.InstrumentationScope",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter.OTLPSpanExporter",  # ._client
    "opentelemetry.sdk.resources.Resource.__hash__",
    "opentelemetry.metrics._internal._ProxyMeter",  # its instances' _real_meter
)


def proxy_delegate(meter: Any) -> object:
    """The meter a proxy meter delegates to (None while no provider is set); any other
    meter is itself."""
    return getattr(meter, "_real_meter", meter)


def hashed_resource(resource: Any) -> Any:
    """``resource`` as a :class:`Resource` whose hash is worked out once, when made.

    The SDK's ``Resource.__hash__`` JSON-encodes every attribute on each call, and the
    OTLP encoders key a dict by the resource once per span exported, on the exporter
    thread that shares the GIL with the event loop. A resource is immutable, so one
    hash holds for its life."""
    return _hashed_resource_type()(resource.attributes, resource.schema_url)


@cache
def _hashed_resource_type() -> type:
    from opentelemetry.sdk.resources import Resource

    class HashedResource(Resource):
        def __init__(self, attributes: Any, schema_url: str | None = None) -> None:
            super().__init__(attributes, schema_url)
            self._hash = super().__hash__()

        def __hash__(self) -> int:
            return self._hash

    return HashedResource


def install(stock: Collection[str], *, tested: bool = True) -> list[str]:
    """Install the replacements not named in ``stock``, put back the SDK's for those
    that are (and, for an untested SDK, ``proxy_meter`` too); return the names
    installed."""
    metrics.use_meter_delegate(proxy_delegate if tested else None)
    installed = ["proxy_meter"] if tested else []
    lean = "lean_spans" not in stock
    spans.use_tracer_factory(LeanTracer if lean else None)
    if lean:
        installed.append("lean_spans")
    otlp = "lean_otlp" not in stock
    otel.use_http_span_exporter(SpanExporter if otlp else None)
    if otlp:
        installed.append("lean_otlp")
    hashed = "hashed_resource" not in stock
    otel.use_resource_wrapper(hashed_resource if hashed else None)
    if hashed:
        installed.append("hashed_resource")
    return installed
