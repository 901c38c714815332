"""capcom's telemetry receiver: ``hypercorn -k trio telemetry.capcom:app``.

:mod:`telemetry.capcom` takes the job reports the workers post to
``/worker/job-finished`` and writes them to ``worker_runs``, which the wallboard
reads. It is built on the plane's foundations (the DB bridge, the HTTP edge, the
job report's one declaration in :mod:`dataplane.observability.report`) and the
dependency runs one way only: ``telemetry`` imports ``dataplane``, never the reverse.
The instrumentation every process shares (OpenTelemetry setup, spans, metrics) is
:mod:`dataplane.observability`.
"""
