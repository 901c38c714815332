"""Instrumentation every process of the plane shares.

* :mod:`~dataplane.observability.otel`: OpenTelemetry setup per process (traces and
  metrics; OTLP and Prometheus exporters only when configured);
* :mod:`~dataplane.observability.tracing`: the tracer, W3C traceparent helpers,
  messaging and database span attributes;
* :mod:`~dataplane.observability.metrics`: every metric instrument, in one place;
* :mod:`~dataplane.observability.report`: the job report a worker sends to capcom
  (``worker_runs``), declared once.

A foundation layer: it imports only :mod:`dataplane.config` and
:mod:`dataplane.errors` of the plane, so every other layer may use it.
"""
