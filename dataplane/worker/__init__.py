"""The data worker, ``dataplane worker``: one process per queue type.

* :mod:`~dataplane.worker.main`: boot checks and the process's lifetime;
* :mod:`~dataplane.worker.config`: its configuration;
* :mod:`~dataplane.worker.service`: :class:`Worker`, the services of one worker;
* :mod:`~dataplane.worker.claims.claimer`: claims, never more than the free slots;
* :mod:`~dataplane.worker.claims.leases`: the lease keeper (heartbeat);
* :mod:`~dataplane.worker.claims.liveness`: the worker's liveness row, whose beat
  rescues a dead worker's claims;
* :mod:`~dataplane.worker.pipeline.executor`: one job's pipeline, claim to row write;
* :mod:`~dataplane.worker.claims.completer`: batched, retried completion;
* :mod:`~dataplane.worker.claims.held`: the claims held;
* :mod:`~dataplane.worker.pipeline.cache`: the TTL cache and single-flight;
* :mod:`~dataplane.worker.report`, :mod:`~dataplane.worker.sender`: job reports, and
  their fire-and-forget post to capcom;
* :mod:`~dataplane.worker.readonly`: the boot proof that the client DB is read-only.

The worker never imports the BFF.
"""

from dataplane.worker.config import WorkerConfig
from dataplane.worker.report import Reporter
from dataplane.worker.service import Worker, WorkerStatistics
from telemetry.report import JobReport

__all__ = ["JobReport", "Reporter", "Worker", "WorkerConfig", "WorkerStatistics"]
