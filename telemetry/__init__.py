"""Telemetry for the data plane.

* :mod:`telemetry.otel` — OpenTelemetry setup per process (traces and metrics,
  OTLP and Prometheus exporters only when configured);
* :mod:`telemetry.tracing` — tracer, W3C traceparent helpers, messaging attributes;
* :mod:`telemetry.metrics` — every metric instrument, declared in one place;
* :mod:`telemetry.sender` — the worker's fire-and-forget capcom reporter;
* :mod:`telemetry.capcom` — the receiver (``hypercorn -k trio telemetry.capcom:app``)
  that writes ``worker_runs``.
"""
