"""``dataplane worker``: boot checks, then one :class:`Worker` until a signal.

Refuses to boot — non-zero exit, one line saying why — when the queue DB or
the queue type is not configured, the surface is unknown, the surface needs a
client DB and ``CLIENT_DB_URL`` is unset, or that credential can write.
SIGTERM/SIGINT stop it gracefully (exit 0); a second signal skips the grace.
"""

from __future__ import annotations

import logging
import os
import signal
from contextlib import AsyncExitStack

import trio

from dataplane.clientdb import prove_read_only
from dataplane.config import Settings
from dataplane.db import Database, DatabaseConfig, open_bridge, open_database
from dataplane.errors import ConfigError, DatabaseUnavailable
from dataplane.queue import QueueClient
from dataplane.sql import q
from dataplane.surfaces import surface_for_queue_type
from dataplane.worker import Reporter, Worker, WorkerConfig, default_worker_id

log = logging.getLogger(__name__)

BOOT_CONNECT_ATTEMPTS = 5  # tries to reach the queue DB at boot
BOOT_CONNECT_DELAY = 2.0  # seconds between them


async def serve_worker(settings: Settings, *, reporter: Reporter | None = None) -> int:
    """Boot checks, telemetry, then the worker until a signal stops it."""
    from telemetry.otel import setup_telemetry

    surface_id = (settings.queue_type or "").removeprefix("surface-").removesuffix("-dev")
    telemetry = setup_telemetry("dataplane-worker", attributes={"dataplane.surface": surface_id})
    try:
        return await _serve_worker(settings, reporter=reporter, prometheus=telemetry.prometheus)
    finally:
        telemetry.shutdown()


async def _serve_worker(settings: Settings, *, reporter: Reporter | None, prometheus: bool) -> int:
    if settings.queue_type is None:
        raise ConfigError("SURFACE_QUEUE_TYPE is not set (surface-<id> or surface-<id>-dev)")
    queues_url = settings.require_queues_url()
    surface, _suffix = surface_for_queue_type(
        settings.queue_type, probe_enabled=settings.probe_enabled
    )
    if surface.needs_client_db and settings.client_db_url is None:
        raise ConfigError(
            f"CLIENT_DB_URL is not set; surface {surface.id!r} needs its read-only client DB"
        )
    config = WorkerConfig(
        queue_type=settings.queue_type,
        worker_id=default_worker_id(settings.queue_type),
        concurrency=settings.concurrency,
        lease_seconds=settings.lease_seconds,
        renew_seconds=settings.renew_seconds,
        idle_ms=settings.idle_ms,
        inline_max_bytes=settings.inline_max_bytes,
        fail_backoff_seconds=settings.fail_backoff_seconds,
        shutdown_grace_seconds=settings.shutdown_grace_seconds,
    )
    queue_cfg = DatabaseConfig(
        queues_url, pool_size=settings.concurrency + 4, application_name="dataplane-worker"
    )
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(open_bridge())
        queue_db = await stack.enter_async_context(open_database(queue_cfg))
        await _wait_reachable(queue_db)
        client_db = None
        if surface.needs_client_db:
            assert settings.client_db_url is not None
            client_cfg = DatabaseConfig(
                settings.client_db_url,
                pool_size=settings.concurrency,
                application_name=f"dataplane-worker-{surface.id}",
                read_only=True,
                trace_statements=True,
            )
            client_db = await stack.enter_async_context(open_database(client_cfg))
            await prove_read_only(client_db)
        if reporter is None and settings.capcom_url:
            from telemetry.sender import CapcomSender

            reporter = CapcomSender(settings.capcom_url, os.environ.get("CAPCOM_TOKEN", ""))
        worker = Worker(
            config,
            surface,
            QueueClient(queue_db, settings.queue_config()),
            client_db=client_db,
            reporter=reporter,
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch_signals, worker)
            port = os.environ.get("DATAPLANE_METRICS_PORT")
            if prometheus and port:
                await nursery.start(_serve_metrics, int(port))
            await worker.run()
            nursery.cancel_scope.cancel()
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
    from telemetry.otel import prometheus_text

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
