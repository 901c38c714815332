"""The BFF's configuration (read by :func:`dataplane.core.settings.from_env` at startup)."""

from __future__ import annotations

from dataclasses import dataclass

from dataplane.auth.config import JwtConfig
from dataplane.core.settings import nested, setting
from dataplane.queue import QueueConfig
from dataplane.queue.types import SUFFIXES
from dataplane.surfaces import SurfacesConfig

SSE_DEADLINE_SECONDS = 60.0  # per-stream deadline, then event: error TIMEOUT
SWEEP_SECONDS = 5.0  # reply pump sweep cadence
MAX_PREFER_WAIT_SECONDS = 5  # the most a POST's `Prefer: wait=N` may hold it for its answer
POOL_SIZE = 20  # queue DB connections of one BFF process


@dataclass(frozen=True, slots=True)
class BffConfig:
    queue: QueueConfig = nested(QueueConfig)
    jwt: JwtConfig = nested(JwtConfig)
    surfaces: SurfacesConfig = nested(SurfacesConfig)
    queue_suffix: str = setting("DATAPLANE_QUEUE_SUFFIX", "", choices=SUFFIXES)
    sse_deadline_seconds: float = setting(
        "DATAPLANE_SSE_DEADLINE_SECONDS", SSE_DEADLINE_SECONDS, minimum=0.001
    )
    sweep_seconds: float = setting("DATAPLANE_SWEEP_SECONDS", SWEEP_SECONDS, minimum=0.001)
    # Whole seconds (RFC 7240 `wait` is delta-seconds); 0 ignores `Prefer: wait`.
    max_prefer_wait_seconds: int = setting(
        "DATAPLANE_MAX_PREFER_WAIT_SECONDS", MAX_PREFER_WAIT_SECONDS, minimum=0
    )
    pool_size: int = POOL_SIZE
    # GET /metrics (with DATAPLANE_METRICS=1) requires this as a bearer token when set;
    # unset, it is served to anyone who reaches the BFF's port (keep it off the internet).
    metrics_token: str | None = setting("DATAPLANE_METRICS_TOKEN", None)
    invalidate_token: str | None = setting("DATAPLANE_INVALIDATE_TOKEN", None)
    # /readyz answers 503 until every served surface's queue type has had a running
    # worker (its on-call lock held or waited for), once per plane: compose's proxy.
    ready_needs_workers: bool = setting("DATAPLANE_READY_NEEDS_WORKERS", False)

    def missing(self) -> list[str]:
        """What must still be set before the plane can serve (empty when nothing)."""
        missing = []
        if self.queue.url is None:
            missing.append("MAESTRO_QUEUES_URL (the queue database)")
        if not self.jwt.configured:
            missing.append(
                "DATAPLANE_JWT_SECRET or DATAPLANE_JWT_PUBLIC_KEY or DATAPLANE_JWT_JWKS_URL"
            )
        return missing
