"""OpenTelemetry setup, one call per process, from the standard ``OTEL_*`` environment.

:func:`setup_telemetry` installs a tracer provider and a meter provider whose
resource names the process (``dataplane-bff``, ``dataplane-worker`` with the
surface as ``dataplane.surface``, ``dataplane-capcom``; ``OTEL_SERVICE_NAME``
wins), its ``service.version`` (the package's) and ``service.instance.id``, its
host and its pid. Exporters are attached only when asked for:

* OTLP, when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the per-signal
  ``..._TRACES_ENDPOINT`` / ``..._METRICS_ENDPOINT``) is set, over
  ``OTEL_EXPORTER_OTLP_PROTOCOL`` (``http/protobuf``, the default, or ``grpc``);
* a Prometheus reader, when ``DATAPLANE_METRICS=1``: the BFF and capcom serve it
  on ``GET /metrics``, a worker on ``DATAPLANE_METRICS_PORT``.

With none of these, nothing is installed: the API's no-op tracer and meter are
used, so instrumented code costs next to nothing and exports nothing.
:meth:`Telemetry.shutdown` flushes what is pending.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, entry_points, version
from typing import Any

from opentelemetry import metrics, trace

from dataplane.core.settings import from_env, setting

log = logging.getLogger(__name__)

FLUSH_TIMEOUT_MS = 5000
METRIC_EXPORT_INTERVAL_MS = 10_000


@dataclass(frozen=True, slots=True)
class TelemetryConfig:
    """Which exporters a process gets (the SDK reads the rest of ``OTEL_*`` itself)."""

    service_name: str | None = setting("OTEL_SERVICE_NAME", None)
    traces_endpoint: str | None = setting(
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"), None
    )
    metrics_endpoint: str | None = setting(
        ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"), None
    )
    protocol: str = setting("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    metric_export_interval_ms: int = setting(
        "OTEL_METRIC_EXPORT_INTERVAL", METRIC_EXPORT_INTERVAL_MS, minimum=1
    )
    prometheus: bool = setting("DATAPLANE_METRICS", False)


@dataclass
class Telemetry:
    service_name: str
    tracing: bool = False
    otlp_metrics: bool = False
    prometheus: bool = False
    _providers: list[Any] = field(default_factory=list)

    def shutdown(self) -> None:
        """Flush and stop exporters (idempotent)."""
        providers, self._providers = self._providers, []
        if self.tracing and providers:
            from telemetry import spans

            spans.uninstall()  # spans after this are the SDK's, which drops them too
        for provider in providers:
            try:
                if hasattr(provider, "force_flush"):
                    provider.force_flush(FLUSH_TIMEOUT_MS)
                provider.shutdown()
            except Exception:  # a collector that is down must not break shutdown
                log.warning("telemetry: flush on shutdown failed", exc_info=True)


def setup_telemetry(
    default_service: str,
    *,
    attributes: Mapping[str, str] | None = None,
    config: TelemetryConfig | None = None,
) -> Telemetry:
    """Install providers for this process; see the module docstring."""
    config = config if config is not None else from_env(TelemetryConfig)
    service = config.service_name or default_service
    traces_endpoint = config.traces_endpoint
    metrics_endpoint = config.metrics_endpoint
    prometheus = config.prometheus
    telemetry = Telemetry(service)
    if not (traces_endpoint or metrics_endpoint or prometheus):
        return telemetry  # the API's no-op providers: nothing exported, nearly free

    resource = _resource(service, attributes)
    grpc = config.protocol == "grpc"

    if traces_endpoint:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from telemetry import spans
        from telemetry.tracing import TRACER_NAME

        tracer_provider = TracerProvider(resource=resource)
        processor = BatchSpanProcessor(_span_exporter(grpc))
        tracer_provider.add_span_processor(processor)
        trace.set_tracer_provider(tracer_provider)
        spans.install(tracer_provider, processor, TRACER_NAME)
        telemetry.tracing = True
        telemetry._providers.append(tracer_provider)

    readers: list[Any] = []
    if metrics_endpoint:
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        if grpc:
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # type: ignore[assignment]
                OTLPMetricExporter,
            )
        interval = config.metric_export_interval_ms
        readers.append(
            PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=interval)
        )
        telemetry.otlp_metrics = True
    if prometheus:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader

        readers.append(PrometheusMetricReader())
        telemetry.prometheus = True
    if readers:
        from opentelemetry.sdk.metrics import MeterProvider

        meter_provider = MeterProvider(resource=resource, metric_readers=readers)
        metrics.set_meter_provider(meter_provider)
        telemetry._providers.append(meter_provider)
    log.info(
        "telemetry: %s (traces %s, OTLP metrics %s, Prometheus %s)",
        service,
        "on" if telemetry.tracing else "off",
        "on" if telemetry.otlp_metrics else "off",
        "on" if telemetry.prometheus else "off",
    )
    return telemetry


# Hooks of dataplane.compat.opentelemetry (installed by the entry points): the class of
# the OTLP/HTTP span exporter, and what wraps the process's resource. None: the SDK's.
_http_span_exporter: Callable[[], Any] | None = None
_resource_wrapper: Callable[[Any], Any] | None = None


def use_http_span_exporter(factory: Callable[[], Any] | None) -> None:
    """OTLP/HTTP span exporters made from now on come from ``factory`` (None: the SDK's)."""
    global _http_span_exporter
    _http_span_exporter = factory


def use_resource_wrapper(wrap: Callable[[Any], Any] | None) -> None:
    """Resources made from now on are ``wrap(resource)`` (None: the SDK's as built)."""
    global _resource_wrapper
    _resource_wrapper = wrap


def _span_exporter(grpc: bool) -> Any:
    if grpc:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if _http_span_exporter is not None:
        return _http_span_exporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[assignment]
        OTLPSpanExporter,
    )

    return OTLPSpanExporter()


def _resource(service: str, attributes: Mapping[str, str] | None) -> Any:
    """The process's resource: its service (name, version, instance id), host and pid.

    The SDK's detectors find the host (``host.name``, ``host.arch``), the process
    (``process.pid``, its runtime and command) and a random ``service.instance.id``;
    ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME`` still win over them.
    """
    from opentelemetry.sdk.resources import (
        ProcessResourceDetector,
        Resource,
        ServiceInstanceIdResourceDetector,
        get_aggregated_resources,
    )

    detectors: list[Any] = [ProcessResourceDetector(), ServiceInstanceIdResourceDetector()]
    host = entry_points(group="opentelemetry_resource_detector", name="host")
    for ep in host:  # the SDK's host detector, published only by its entry point name
        detectors.append(ep.load()())
    detected = get_aggregated_resources(detectors, Resource.get_empty())
    ours = {"service.name": service, "service.version": _version(), **(attributes or {})}
    merged = detected.merge(Resource.create(ours))
    return merged if _resource_wrapper is None else _resource_wrapper(merged)


def _version() -> str:
    try:
        return version("dataplane")
    except PackageNotFoundError:
        return "unknown"


def prometheus_text() -> bytes:
    """The current metrics in Prometheus' text format (for ``GET /metrics``)."""
    from prometheus_client import generate_latest

    return generate_latest()
