"""``dataplane worker``: boot checks, then one :class:`Worker` until a signal.

Refuses to boot — non-zero exit, one line saying why — when the queue DB or
the queue type is not configured, the surface is unknown, the surface needs a
client DB and ``DATAPLANE_CLIENT_DB_URL`` is unset, that credential can write or its sessions
cannot be pinned (:mod:`dataplane.worker.readonly`), the queue DB is reached
through transaction pooling (LISTEN would never hear a notify), or its role is a
superuser or the schema's owner (:func:`~dataplane.queue.roles.refuse_owner`).
SIGTERM/SIGINT stop it gracefully (exit 0); a second signal skips the grace.
"""

from __future__ import annotations

import logging
import signal
from contextlib import AsyncExitStack

import trio

from dataplane.compat import install_process
from dataplane.core.errors import ConfigError, DatabaseUnavailable
from dataplane.core.runtime import WORKER_YOUNG_THRESHOLD, freeze_startup_heap, thaw_heap
from dataplane.db import Database, DatabaseConfig, open_bridge, open_database
from dataplane.db.session import require_session_pooling
from dataplane.queue import QueueClient, QueueType, queue_database
from dataplane.queue.roles import refuse_owner
from dataplane.queue.types import SUFFIXES
from dataplane.surfaces import surface_for_queue_type
from dataplane.surfaces.manifest import Surface
from dataplane.worker.claims.claimer import flow_bounds
from dataplane.worker.config import WorkerProcessConfig
from dataplane.worker.health import WorkerHealth, serve_health
from dataplane.worker.readonly import open_client_database
from dataplane.worker.report import Reporter
from dataplane.worker.sender import CapcomSender
from dataplane.worker.service import Worker
from telemetry.metrics import initialise
from telemetry.otel import setup_telemetry

log = logging.getLogger(__name__)

BOOT_CONNECT_ATTEMPTS = 5  # tries to reach the queue DB at boot
BOOT_CONNECT_DELAY = 2.0  # seconds between them


async def serve_worker(config: WorkerProcessConfig, *, reporter: Reporter | None = None) -> int:
    """Boot checks, telemetry, then the worker until a signal stops it."""
    install_process()  # psycopg, OpenTelemetry (dataplane.compat): never at import
    surface, queue_type = surface_for_queue_type(config.worker.queue_type, config.surfaces)
    telemetry = setup_telemetry(
        "dataplane-worker", attributes={"dataplane.surface": queue_type.surface}
    )
    ops = surface.operations.values()
    initialise(
        "worker",
        {queue_type.name: [op.name for op in ops]},
        cacheable=[(queue_type.name, op.name) for op in ops if op.cacheable],
        bounded=[(queue_type.name, name) for name in flow_bounds(surface)],
        maintained=[
            QueueType(surface_id, suffix).name
            for surface_id in config.surfaces.registry().surfaces
            for suffix in SUFFIXES
        ],
    )
    try:
        return await _serve_worker(config, surface, reporter, telemetry.prometheus)
    finally:
        telemetry.shutdown()


async def _serve_worker(
    config: WorkerProcessConfig, surface: Surface, reporter: Reporter | None, prometheus: bool
) -> int:
    worker_config = config.worker
    if surface.needs_client_db and config.client_db_url is None:
        raise ConfigError(
            f"DATAPLANE_CLIENT_DB_URL is not set; surface {surface.id!r} needs its read-only"
            " client DB"
        )
    queue_cfg = queue_database(
        worker_config.queue.url, "worker", pool_size=worker_config.queue_pool_size
    )
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(open_bridge())
        queue_db = await stack.enter_async_context(open_database(queue_cfg))
        await _wait_reachable(queue_db)
        await require_session_pooling(queue_cfg)  # LISTEN works: no transaction pooling
        await refuse_owner(queue_db, "worker")  # surface code never holds the owner's keys
        client_db = None
        if surface.needs_client_db:
            assert config.client_db_url is not None
            client_cfg = DatabaseConfig(
                config.client_db_url,
                pool_size=worker_config.concurrency,
                application_name=f"dataplane-worker-{surface.id}",
                read_only=True,
                trace_query_text=True,
            )
            client_db = await stack.enter_async_context(open_client_database(client_cfg))
        if reporter is None and config.capcom_url:
            reporter = CapcomSender(config.capcom_url, config.capcom_token)
        worker = Worker(
            worker_config,
            surface,
            QueueClient(queue_db, worker_config.queue),
            client_db=client_db,
            reporter=reporter,
        )
        # Booted: full collections skip what lives on; young ones are spaced out.
        freeze_startup_heap("worker", young_threshold=WORKER_YOUNG_THRESHOLD)
        health = WorkerHealth(prometheus=prometheus, metrics_token=config.metrics_token)
        health.worker, health.queue_db = worker, queue_db
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_watch_signals, worker, health)
                if config.metrics_port:
                    await nursery.start(
                        serve_health, health, config.metrics_host, config.metrics_port
                    )
                await worker.run(task_status=health)  # health.started(): claiming
                nursery.cancel_scope.cancel()
        finally:
            thaw_heap()
    return 0


async def _wait_reachable(db: Database) -> None:
    for attempt in range(1, BOOT_CONNECT_ATTEMPTS + 1):
        try:
            await db.ping()
            return
        except DatabaseUnavailable as exc:
            if attempt == BOOT_CONNECT_ATTEMPTS:
                raise ConfigError(f"queue DB unreachable: {exc}") from None
            log.warning("queue DB unreachable (%s); retrying in %gs", exc, BOOT_CONNECT_DELAY)
            await trio.sleep(BOOT_CONNECT_DELAY)


async def _watch_signals(worker: Worker, health: WorkerHealth) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        count = 0
        async for signum in signals:
            count += 1
            log.info("received %s", signal.Signals(signum).name)
            health.claiming = False
            worker.stop(force=count > 1)
