"""The worker's HTTP endpoint on ``DATAPLANE_METRICS_PORT``: probes and metrics.

* ``GET /healthz`` (liveness): 200 while the process's loops tick — the claimer
  ran a claim within :data:`STALL_SECONDS` (or it waits, every slot taken, for one
  to free) and the lease keeper woke within twice its cadence plus
  :data:`STALL_SECONDS`. During boot and shutdown it answers 200: a restart would
  not help there. 503 with a JSON ``reason`` otherwise.
* ``GET /readyz`` (readiness): 200 once the worker claims (boot checks passed,
  the read-only proof among them) and the queue DB answers a ping within
  :data:`PING_TIMEOUT`; 503 with a JSON ``reason`` while booting, stopping or
  while the queue DB does not answer.
* ``GET /metrics``: the Prometheus text (with ``DATAPLANE_METRICS=1``; 404 without).

The server binds ``DATAPLANE_METRICS_HOST`` (loopback by default; ``0.0.0.0`` in a
container, where the kubelet probes from outside).
"""

from __future__ import annotations

import json
import logging

import trio

from dataplane.core.errors import DatabaseError
from dataplane.db import Database, q
from dataplane.worker.service import Worker
from telemetry.otel import prometheus_text

log = logging.getLogger(__name__)

READ_TIMEOUT = 5.0  # seconds a prober may take to send its request
PING_TIMEOUT = 2.0  # seconds the queue DB has to answer /readyz's ping
STALL_SECONDS = 30.0  # a loop that has not ticked for longer (beyond its cadence) is stuck
MAX_REQUEST = 8192  # bytes of request head read at most


class WorkerHealth:
    """What the probes look at: the worker once built, its queue DB."""

    def __init__(self, *, prometheus: bool) -> None:
        self.prometheus = prometheus
        self.worker: Worker | None = None
        self.queue_db: Database | None = None
        self.claiming = False  # set once the worker serves, cleared when it stops

    def started(self, value: None = None) -> None:
        """The worker's ``task_status``: it serves (claims) from now on."""
        self.claiming = True

    def live(self) -> str | None:
        """``None`` when alive, else why not."""
        worker = self.worker
        if worker is None or not self.claiming:
            return None  # booting or stopping: let it finish, a restart would not help
        now = trio.current_time()
        claimer = worker.claimer
        full = worker.held.free_slots(worker.config.concurrency) <= 0
        if (
            not full
            and claimer.last_tick
            and now - claimer.last_tick > STALL_SECONDS + worker.config.idle_ms / 1000
        ):
            return f"claimer has not run a claim for {now - claimer.last_tick:.0f}s"
        lease_budget = 2 * worker.config.renew_seconds + STALL_SECONDS
        if now - worker.leases.last_tick > lease_budget:
            return f"lease keeper has not ticked for {now - worker.leases.last_tick:.0f}s"
        return None

    async def ready(self) -> str | None:
        """``None`` when ready, else why not."""
        if self.worker is None or self.queue_db is None:
            return "booting"
        if self.worker.stopping:
            return "stopping"
        if not self.claiming:
            return "booting"
        with trio.move_on_after(PING_TIMEOUT) as scope:
            try:
                await self.queue_db.fetchone(q("ping"))
            except DatabaseError as exc:
                return f"queue DB unreachable: {exc}"
        if scope.cancelled_caught:
            return f"queue DB did not answer within {PING_TIMEOUT:g}s"
        return None


def _response(status: str, content_type: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def _probe(reason: str | None) -> bytes:
    if reason is None:
        return _response("200 OK", "application/json", b'{"status":"ok"}')
    body = json.dumps({"status": "unavailable", "reason": reason}).encode()
    return _response("503 Service Unavailable", "application/json", body)


async def _answer(health: WorkerHealth, path: str) -> bytes:
    if path == "/healthz":
        return _probe(health.live())
    if path == "/readyz":
        return _probe(await health.ready())
    if path == "/metrics" and health.prometheus:
        return _response("200 OK", "text/plain; version=0.0.4", prometheus_text())
    return _response("404 Not Found", "text/plain", b"not found\n")


async def serve_health(
    health: WorkerHealth, host: str, port: int, *, task_status: trio.TaskStatus[None]
) -> None:
    """Serve the probes and metrics on ``host:port`` until cancelled."""

    async def handle(stream: trio.SocketStream) -> None:
        with trio.move_on_after(READ_TIMEOUT + PING_TIMEOUT):
            request = b""
            while b"\r\n\r\n" not in request and len(request) < MAX_REQUEST:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                request += chunk
            parts = request.split(b"\r\n", 1)[0].split()
            if len(parts) >= 2 and parts[0] in (b"GET", b"HEAD"):
                path = parts[1].decode(errors="replace").split("?", 1)[0]
                answer = await _answer(health, path)
            else:
                answer = _response("400 Bad Request", "text/plain", b"bad request\n")
            try:
                await stream.send_all(answer)
            except trio.BrokenResourceError:
                pass  # the prober hung up
        await stream.aclose()

    listeners = await trio.open_tcp_listeners(port, host=host)
    log.info("worker health on http://%s:%d/healthz, /readyz, /metrics", host, port)
    task_status.started()
    await trio.serve_listeners(handle, listeners)
