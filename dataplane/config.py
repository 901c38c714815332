"""Configuration, read from the environment in this one place.

Every setting of DESIGN.md's table, with its default as a named constant and
its unit; :meth:`Settings.from_env` validates and raises :class:`ConfigError`
naming the variable that is wrong.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from dataplane import queue, reaper
from dataplane.errors import ConfigError

IDLE_MS = 2000  # poll backoff ceiling, milliseconds
POLL_START_MS = 100  # first poll backoff, milliseconds
CONCURRENCY = 8  # jobs a worker runs at once
INLINE_MAX_BYTES = 262_144  # larger results go to surface_result_blobs
RENEW_SECONDS = 60.0  # heartbeat cadence
SSE_DEADLINE_SECONDS = 60.0  # per-waiter deadline
SWEEP_SECONDS = 5.0  # reply pump sweep cadence
SHUTDOWN_GRACE_SECONDS = 30.0  # in-flight jobs may finish within this on SIGTERM


def _get(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def _float(env: Mapping[str, str], name: str, default: float, *, minimum: float = 0.0) -> float:
    raw = _get(env, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if value < minimum or value != value:
        raise ConfigError(f"{name} must be >= {minimum:g}, got {raw!r}")
    return value


def _int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 0) -> int:
    raw = _get(env, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {raw!r}")
    return value


@dataclass(frozen=True, slots=True)
class Settings:
    queues_url: str | None
    queue_type: str | None
    queue_suffix: str
    client_db_url: str | None
    jwt_secret: str | None
    jwt_public_key: str | None
    jwt_audience: str | None
    jwt_issuer: str | None
    stream_secret: str | None
    capcom_url: str | None
    lease_seconds: float
    renew_seconds: float
    idle_ms: int
    concurrency: int
    inline_max_bytes: int
    fail_backoff_seconds: float
    max_dequeues: int
    sse_deadline_seconds: float
    sweep_seconds: float
    probe_enabled: bool
    shutdown_grace_seconds: float

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        suffix = _get(env, "DATAPLANE_QUEUE_SUFFIX") or ""
        if suffix not in ("", "-dev"):
            raise ConfigError(f"DATAPLANE_QUEUE_SUFFIX must be '' or '-dev', got {suffix!r}")
        lease = _float(env, "MAESTRO_LEASE_SECONDS", queue.LEASE_SECONDS, minimum=0.001)
        renew = _float(env, "MAESTRO_RENEW_SECONDS", RENEW_SECONDS, minimum=0.001)
        if renew >= lease:
            raise ConfigError(
                f"MAESTRO_RENEW_SECONDS ({renew:g}) must be shorter than "
                f"MAESTRO_LEASE_SECONDS ({lease:g}), or leases lapse between heartbeats"
            )
        probe = _get(env, "DATAPLANE_PROBE") or "0"
        if probe not in ("0", "1"):
            raise ConfigError(f"DATAPLANE_PROBE must be 0 or 1, got {probe!r}")
        return cls(
            queues_url=_get(env, "MAESTRO_QUEUES_URL"),
            queue_type=_get(env, "SURFACE_QUEUE_TYPE"),
            queue_suffix=suffix,
            client_db_url=_get(env, "CLIENT_DB_URL"),
            jwt_secret=_get(env, "DATAPLANE_JWT_SECRET"),
            jwt_public_key=_get(env, "DATAPLANE_JWT_PUBLIC_KEY"),
            jwt_audience=_get(env, "DATAPLANE_JWT_AUDIENCE"),
            jwt_issuer=_get(env, "DATAPLANE_JWT_ISSUER"),
            stream_secret=_get(env, "DATAPLANE_STREAM_SECRET"),
            capcom_url=_get(env, "CAPCOM_URL"),
            lease_seconds=lease,
            renew_seconds=renew,
            idle_ms=_int(env, "DATAPLANE_IDLE_MS", IDLE_MS, minimum=POLL_START_MS),
            concurrency=_int(env, "DATAPLANE_CONCURRENCY", CONCURRENCY, minimum=1),
            inline_max_bytes=_int(env, "DATAPLANE_INLINE_MAX_BYTES", INLINE_MAX_BYTES, minimum=1),
            fail_backoff_seconds=_float(
                env, "DATAPLANE_FAIL_BACKOFF_SECONDS", queue.FAIL_BACKOFF_SECONDS
            ),
            max_dequeues=_int(env, "DATAPLANE_MAX_DEQUEUES", queue.MAX_DEQUEUES, minimum=1),
            sse_deadline_seconds=_float(
                env, "DATAPLANE_SSE_DEADLINE_SECONDS", SSE_DEADLINE_SECONDS, minimum=0.001
            ),
            sweep_seconds=_float(env, "DATAPLANE_SWEEP_SECONDS", SWEEP_SECONDS, minimum=0.001),
            probe_enabled=probe == "1",
            shutdown_grace_seconds=_float(
                env, "DATAPLANE_SHUTDOWN_GRACE_SECONDS", SHUTDOWN_GRACE_SECONDS
            ),
        )

    def queue_config(self) -> queue.QueueConfig:
        return queue.QueueConfig(
            lease_seconds=self.lease_seconds,
            fail_backoff_seconds=self.fail_backoff_seconds,
            max_dequeues=self.max_dequeues,
        )

    def retention(self) -> reaper.RetentionConfig:
        return reaper.RetentionConfig()

    def require_queues_url(self) -> str:
        if self.queues_url is None:
            raise ConfigError("MAESTRO_QUEUES_URL is not set (the queue database DSN)")
        return self.queues_url
