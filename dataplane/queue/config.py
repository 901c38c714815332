"""The queue's configuration: lease, failure backoff, poison cutoff, blob retention;
and the one opener of a queue-DB connection set (:func:`open_queue_database`)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from dataplane.core.errors import ConfigError, InvalidArgument
from dataplane.core.settings import setting
from dataplane.db import Database, DatabaseConfig, open_database
from dataplane.db.connection import ACQUIRE_TIMEOUT, CALL_TIMEOUT, CONNECT_TIMEOUT
from dataplane.queue.notices.seal import parse_secrets

LEASE_SECONDS = 120.0  # claim lease
FAIL_BACKOFF_SECONDS = 30.0  # a failed job is claimable again after this
MAX_DEQUEUES = 5  # poison cutoff written into new rows
BLOB_TTL_SECONDS = 24 * 3600.0  # blob retention
MAX_LIVE = 10_000  # live (pending, in_progress) rows one queue type may hold
MAX_LIVE_PER_CLIENT = 2_000  # of which one client may hold


def check_positive(name: str, value: float) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        raise InvalidArgument(f"{name} must be a positive number, got {value!r}")
    return float(value)


def check_non_negative(name: str, value: float) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise InvalidArgument(f"{name} must be a number >= 0, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """Where the queue DB is and the semantics every queue client applies."""

    url: str | None = setting("MAESTRO_QUEUES_URL", None)
    lease_seconds: float = setting("MAESTRO_LEASE_SECONDS", LEASE_SECONDS, minimum=0.001)
    fail_backoff_seconds: float = setting("DATAPLANE_FAIL_BACKOFF_SECONDS", FAIL_BACKOFF_SECONDS)
    max_dequeues: int = setting("DATAPLANE_MAX_DEQUEUES", MAX_DEQUEUES, minimum=1)
    blob_ttl_seconds: float = BLOB_TTL_SECONDS
    max_live: int = setting("DATAPLANE_MAX_LIVE_JOBS", MAX_LIVE, minimum=1)
    max_live_per_client: int = setting(
        "DATAPLANE_MAX_LIVE_PER_CLIENT", MAX_LIVE_PER_CLIENT, minimum=1
    )
    # Workers seal small answers into their done notifies with the first secret (comma
    # separated: a rotation), BFFs open them with any; unset, every notify names its
    # job alone and the BFF reads the row (dataplane.queue.notices.seal).
    notify_secret: str | None = setting("DATAPLANE_NOTIFY_SECRET", None)

    def __post_init__(self) -> None:
        check_positive("lease_seconds", self.lease_seconds)
        check_non_negative("fail_backoff_seconds", self.fail_backoff_seconds)
        check_positive("blob_ttl_seconds", self.blob_ttl_seconds)
        if self.max_live < 1 or self.max_live_per_client < 1:
            raise InvalidArgument("max_live and max_live_per_client must be >= 1")
        if not isinstance(self.max_dequeues, int) or self.max_dequeues < 1:
            raise InvalidArgument(f"max_dequeues must be an integer >= 1, got {self.max_dequeues}")
        parse_secrets(self.notify_secret)


def queue_database(
    url: str | None,
    process: str,
    *,
    pool_size: int = 1,
    acquire_timeout: float = ACQUIRE_TIMEOUT,
    connect_timeout: float = CONNECT_TIMEOUT,
    call_timeout: float = CALL_TIMEOUT,
) -> DatabaseConfig:
    """How ``process`` reaches the queue DB at ``url`` (a setting: ``MAESTRO_QUEUES_URL``,
    or the process's own): its connections are named ``dataplane-<process>`` in
    ``pg_stat_activity``. Every process and command opens the queue DB through here."""
    if url is None:
        raise ConfigError("MAESTRO_QUEUES_URL is not set (the queue database DSN)")
    return DatabaseConfig(
        url,
        pool_size=pool_size,
        acquire_timeout=acquire_timeout,
        connect_timeout=connect_timeout,
        call_timeout=call_timeout,
        application_name=f"dataplane-{process}",
    )


def open_queue_database(
    url: str | None, process: str, *, pool_size: int = 1
) -> AbstractAsyncContextManager[Database]:
    """A pool of :func:`queue_database`'s connections, for ``async with``."""
    return open_database(queue_database(url, process, pool_size=pool_size))
