"""The worker's configuration (read by :func:`dataplane.core.settings.from_env` at boot)."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field

from dataplane.core.errors import InvalidArgument
from dataplane.core.settings import nested, setting
from dataplane.maintenance.retention import RetentionConfig
from dataplane.maintenance.sampler import SAMPLE_SECONDS
from dataplane.maintenance.schedule import MAINTENANCE_SECONDS
from dataplane.queue import QueueConfig, QueueType
from dataplane.surfaces import SurfacesConfig
from dataplane.worker.claims.liveness import BEAT_SECONDS, LAPSE_SECONDS, check_liveness

# Jobs a worker runs at once. 64, not DESIGN.md's first 8: a claim, a completion and
# their bridge crossings cost the same for 1 row as for 64, so bigger batches cut the
# worker's CPU per job and raise its drain (32 -> 64: 4,140-4,974 -> 5,230-5,872 jobs/s,
# 161-190 -> 138-153 µs CPU per job, bench/results/worker-drain.md); the price is up
# to 64 client-DB connections per worker, opened only as load needs them.
CONCURRENCY = 64
# Queue-DB connections a worker's statements share: the claimer, the completer, the
# lease keeper and maintenance each run one statement at a time; only failures and
# releases come per job, and they queue for a connection (the acquire timeout bounds
# the wait) rather than open one each: a failure storm at concurrency 64 must not take
# 68 of the server's connections.
QUEUE_POOL_JOBS = 8  # connections for per-job statements (fail, release)
QUEUE_POOL_SERVICES = 4  # claimer, completer, lease keeper, liveness, maintenance, sampler
RENEW_SECONDS = 60.0  # heartbeat cadence
POLL_START_MS = 100  # first idle poll backoff, milliseconds
IDLE_MS = 2000  # idle poll backoff ceiling, milliseconds
INLINE_MAX_BYTES = 262_144  # larger results go to surface_result_blobs
SHUTDOWN_GRACE_SECONDS = 30.0  # in-flight jobs may finish within this on SIGTERM
RESULT_CHECKS = ("off", "count", "enforce")  # DATAPLANE_RESULT_CHECK


def default_worker_id(queue_type: str) -> str:
    return f"{queue_type}@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """One worker: the queue type it claims and how it runs its jobs.

    ``queue`` holds the lease and the failure backoff the worker claims and fails with.
    """

    queue_type: str = setting(
        "SURFACE_QUEUE_TYPE",
        required="SURFACE_QUEUE_TYPE is not set (surface-<id> or surface-<id>-dev)",
    )
    worker_id: str = ""  # default: <type>@<host>:<pid>:<random>
    queue: QueueConfig = nested(QueueConfig)
    concurrency: int = setting("DATAPLANE_CONCURRENCY", CONCURRENCY, minimum=1)
    renew_seconds: float = setting("MAESTRO_RENEW_SECONDS", RENEW_SECONDS, minimum=0.001)
    idle_ms: int = setting("DATAPLANE_IDLE_MS", IDLE_MS, minimum=POLL_START_MS)
    poll_start_ms: int = POLL_START_MS
    inline_max_bytes: int = setting("DATAPLANE_INLINE_MAX_BYTES", INLINE_MAX_BYTES, minimum=1)
    shutdown_grace_seconds: float = setting(
        "DATAPLANE_SHUTDOWN_GRACE_SECONDS", SHUTDOWN_GRACE_SECONDS
    )
    max_handler_seconds: float | None = setting(
        "DATAPLANE_MAX_HANDLER_SECONDS", None, minimum=0.001
    )  # caps every operation's timeout_seconds in this worker
    # Worker liveness (dataplane.worker.claims.liveness): its row renewed every beat; a worker
    # unseen for the lapse has its running claims rescued by another worker's beat.
    beat_seconds: float = setting("DATAPLANE_WORKER_BEAT_SECONDS", BEAT_SECONDS, minimum=0.001)
    lapse_seconds: float = setting("DATAPLANE_WORKER_LAPSE_SECONDS", LAPSE_SECONDS, minimum=0.002)
    maintenance_seconds: float = setting(
        "DATAPLANE_MAINTENANCE_SECONDS", MAINTENANCE_SECONDS, minimum=0.001
    )
    sample_seconds: float = setting(
        "DATAPLANE_QUEUE_SAMPLE_SECONDS", SAMPLE_SECONDS, minimum=0.001
    )  # cadence of the elected queue sampler (depth gauges)
    # What a JSON answer's mismatch with its operation's result schema does: enforce
    # (the job answers RESULT_INVALID), count (dataplane.result.invalid, the answer
    # goes), off (not checked: no cost). dataplane dev and the test kit enforce.
    result_check: str = setting("DATAPLANE_RESULT_CHECK", "off", choices=RESULT_CHECKS)
    retention: RetentionConfig = field(default_factory=RetentionConfig)

    def __post_init__(self) -> None:
        QueueType.parse(self.queue_type)
        if not self.worker_id:
            object.__setattr__(self, "worker_id", default_worker_id(self.queue_type))
        if self.concurrency < 1:
            raise InvalidArgument("concurrency must be >= 1")
        if not 0 < self.renew_seconds < self.queue.lease_seconds:
            raise InvalidArgument(
                f"renew_seconds ({self.renew_seconds:g}) must be > 0 and shorter than "
                f"lease_seconds ({self.queue.lease_seconds:g}), or leases lapse between "
                "heartbeats"
            )
        check_liveness(self.beat_seconds, self.lapse_seconds)
        if not 0 < self.poll_start_ms <= self.idle_ms:
            raise InvalidArgument("poll_start_ms must be > 0 and <= idle_ms")
        if self.inline_max_bytes < 1 or self.shutdown_grace_seconds < 0:
            raise InvalidArgument("inline_max_bytes must be >= 1 and the grace >= 0")

    @property
    def queue_pool_size(self) -> int:
        """Connections of the worker's queue-DB pool (see :data:`QUEUE_POOL_JOBS`)."""
        return min(self.concurrency, QUEUE_POOL_JOBS) + QUEUE_POOL_SERVICES

    @property
    def parsed_type(self) -> QueueType:
        return QueueType.parse(self.queue_type)


@dataclass(frozen=True, slots=True)
class WorkerProcessConfig:
    """``dataplane worker``: the worker, and what its process connects to."""

    worker: WorkerConfig = nested(WorkerConfig)
    surfaces: SurfacesConfig = nested(SurfacesConfig)
    client_db_url: str | None = setting("DATAPLANE_CLIENT_DB_URL", None, old=("CLIENT_DB_URL",))
    capcom_url: str | None = setting("DATAPLANE_CAPCOM_URL", None, old=("CAPCOM_URL",))
    capcom_token: str = setting("DATAPLANE_CAPCOM_TOKEN", "", old=("CAPCOM_TOKEN",))
    metrics_port: int | None = setting("DATAPLANE_METRICS_PORT", None, minimum=1)
    # The address the health/metrics endpoint binds: loopback outside a container,
    # 0.0.0.0 in one (the kubelet probes the pod's IP).
    metrics_host: str = setting("DATAPLANE_METRICS_HOST", "127.0.0.1")
    # The bearer token a scraper of /metrics sends (unset: /metrics is open).
    metrics_token: str | None = setting("DATAPLANE_METRICS_TOKEN", None)
