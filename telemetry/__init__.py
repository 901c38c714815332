"""Instrumentation every process of the plane shares.

* :mod:`~telemetry.otel`: OpenTelemetry setup per process (traces and
  metrics; OTLP and Prometheus exporters only when configured);
* :mod:`~telemetry.tracing`: the tracer, W3C traceparent helpers,
  messaging and database span attributes;
* :mod:`~telemetry.metrics`: every metric instrument, in one place;
* :mod:`~telemetry.report`: the job report a worker sends to capcom
  (``worker_runs``), declared once;
* :mod:`~telemetry.failures`: a failed attempt's record, which the worker writes to
  its job row (``errors``) and operators read back, declared once.

A foundation layer: it imports only :mod:`dataplane.core.settings` and
:mod:`dataplane.core.errors` of the plane, so every other layer may use it.
"""
