"""``dataplane worker``: boot checks, then one :class:`Worker` until a signal.

Refuses to boot — non-zero exit, one line saying why — when the queue DB or
the queue type is not configured, the surface is unknown, the surface needs a
client DB and ``CLIENT_DB_URL`` is unset, that credential can write or its sessions
cannot be pinned (:mod:`dataplane.worker.readonly`), or the queue DB is reached
through transaction pooling (LISTEN would never hear a notify).
SIGTERM/SIGINT stop it gracefully (exit 0); a second signal skips the grace.
"""

from __future__ import annotations

import logging
import signal
from contextlib import AsyncExitStack

import trio

from dataplane.db import Database, DatabaseConfig, open_bridge, open_database, q
from dataplane.db.session import require_session_pooling
from dataplane.errors import ConfigError, DatabaseUnavailable
from dataplane.observability.metrics import initialise
from dataplane.observability.otel import prometheus_text, setup_telemetry
from dataplane.queue import QueueClient, QueueType
from dataplane.queue.types import SUFFIXES
from dataplane.runtime import WORKER_YOUNG_THRESHOLD, freeze_startup_heap, thaw_heap
from dataplane.surfaces import surface_for_queue_type
from dataplane.surfaces.manifest import Surface
from dataplane.worker.config import WorkerProcessConfig
from dataplane.worker.readonly import open_client_database
from dataplane.worker.report import Reporter
from dataplane.worker.sender import CapcomSender
from dataplane.worker.service import Worker

log = logging.getLogger(__name__)

BOOT_CONNECT_ATTEMPTS = 5  # tries to reach the queue DB at boot
BOOT_CONNECT_DELAY = 2.0  # seconds between them


async def serve_worker(config: WorkerProcessConfig, *, reporter: Reporter | None = None) -> int:
    """Boot checks, telemetry, then the worker until a signal stops it."""
    surface, queue_type = surface_for_queue_type(config.worker.queue_type, config.surfaces)
    telemetry = setup_telemetry(
        "dataplane-worker", attributes={"dataplane.surface": queue_type.surface}
    )
    ops = surface.operations.values()
    initialise(
        "worker",
        {queue_type.name: [op.name for op in ops]},
        cacheable=[(queue_type.name, op.name) for op in ops if op.cacheable],
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
    queues_url = worker_config.queue.require_url()
    if surface.needs_client_db and config.client_db_url is None:
        raise ConfigError(
            f"CLIENT_DB_URL is not set; surface {surface.id!r} needs its read-only client DB"
        )
    queue_cfg = DatabaseConfig(
        queues_url, pool_size=worker_config.queue_pool_size, application_name="dataplane-worker"
    )
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(open_bridge())
        queue_db = await stack.enter_async_context(open_database(queue_cfg))
        await _wait_reachable(queue_db)
        await require_session_pooling(queue_cfg)  # LISTEN works: no transaction pooling
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
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_watch_signals, worker)
                if prometheus and config.metrics_port:
                    await nursery.start(_serve_metrics, config.metrics_port)
                await worker.run()
                nursery.cancel_scope.cancel()
        finally:
            thaw_heap()
    return 0


async def _wait_reachable(db: Database) -> None:
    for attempt in range(1, BOOT_CONNECT_ATTEMPTS + 1):
        try:
            await db.fetchone(q("ping"))
            return
        except DatabaseUnavailable as exc:
            if attempt == BOOT_CONNECT_ATTEMPTS:
                raise ConfigError(f"queue DB unreachable: {exc}") from None
            log.warning("queue DB unreachable (%s); retrying in %gs", exc, BOOT_CONNECT_DELAY)
            await trio.sleep(BOOT_CONNECT_DELAY)


METRICS_READ_TIMEOUT = 5.0  # seconds a scraper may take to send its request


async def _serve_metrics(port: int, *, task_status: trio.TaskStatus[None]) -> None:
    """A minimal HTTP endpoint for Prometheus: any GET gets the metrics text."""

    async def handle(stream: trio.SocketStream) -> None:
        with trio.move_on_after(METRICS_READ_TIMEOUT):
            request = b""
            while b"\r\n\r\n" not in request and len(request) < 8192:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    return
                request += chunk
            body = prometheus_text()
            head = (
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            await stream.send_all(head.encode() + body)
        await stream.aclose()

    listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
    log.info("worker metrics on http://127.0.0.1:%d/metrics", port)
    task_status.started()
    await trio.serve_listeners(handle, listeners)


async def _watch_signals(worker: Worker) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        count = 0
        async for signum in signals:
            count += 1
            log.info("received %s", signal.Signals(signum).name)
            worker.stop(force=count > 1)
