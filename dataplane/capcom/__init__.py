"""capcom, the plane's telemetry receiver: ``dataplane capcom`` (ASGI app
``dataplane.capcom.app:app``).

It takes the job reports the workers post to ``/worker/job-finished`` and writes them
to ``worker_runs``, which the wallboard reads. A process of the plane beside the BFF
and the worker, built on the same floors (the DB bridge, the HTTP kit, the job
report's one declaration in :mod:`telemetry.report`); it imports neither of them.
"""
