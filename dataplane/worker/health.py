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
* ``GET /metrics``: the Prometheus text (with ``DATAPLANE_METRICS=1``; 404 without),
  given ``Authorization: Bearer <DATAPLANE_METRICS_TOKEN>`` when that is set (401
  otherwise).

The server binds ``DATAPLANE_METRICS_HOST`` (loopback by default; ``0.0.0.0`` in a
container, where the kubelet probes from outside).
"""

from __future__ import annotations

import hmac
import json
import logging
from http import HTTPStatus

import h11
import trio

from dataplane.core.errors import DatabaseError
from dataplane.db import Database
from dataplane.worker.service import Worker
from telemetry.otel import prometheus_text

log = logging.getLogger(__name__)

READ_TIMEOUT = 5.0  # seconds a prober may take to send its request
PING_TIMEOUT = 2.0  # seconds the queue DB has to answer /readyz's ping
STALL_SECONDS = 30.0  # a loop that has not ticked for longer (beyond its cadence) is stuck
MAX_REQUEST = 8192  # bytes of request head read at most
MAX_CONNECTIONS = 64  # exchanges served at once; beyond, a connection is closed unanswered


class WorkerHealth:
    """What the probes look at: the worker once built, its queue DB."""

    def __init__(self, *, prometheus: bool, metrics_token: str | None = None) -> None:
        self.prometheus = prometheus
        self.metrics_token = metrics_token  # a scraper sends it as a bearer token
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
                await self.queue_db.ping()
            except DatabaseError as exc:
                return f"queue DB unreachable: {exc}"
        if scope.cancelled_caught:
            return f"queue DB did not answer within {PING_TIMEOUT:g}s"
        return None


Answer = tuple[int, str, bytes]  # status, content type, body


def _probe(reason: str | None) -> Answer:
    if reason is None:
        return 200, "application/json", b'{"status":"ok"}'
    body = json.dumps({"status": "unavailable", "reason": reason}).encode()
    return 503, "application/json", body


def _text(status: int, body: str) -> Answer:
    return status, "application/json", json.dumps({"error": body}).encode()


async def _answer(health: WorkerHealth, request: h11.Request) -> Answer:
    if request.method not in (b"GET", b"HEAD"):
        return _text(405, "only GET and HEAD are served here")
    path = request.target.split(b"?", 1)[0]
    if path == b"/healthz":
        return _probe(health.live())
    if path == b"/readyz":
        return _probe(await health.ready())
    if path == b"/metrics" and health.prometheus:
        if health.metrics_token is not None and not _bearer_is(request, health.metrics_token):
            return _text(401, "send Authorization: Bearer <DATAPLANE_METRICS_TOKEN>")
        return 200, "text/plain; version=0.0.4", prometheus_text()
    return _text(404, "not found: /healthz, /readyz and /metrics are served here")


def _bearer_is(request: h11.Request, token: str) -> bool:
    given = [v for k, v in request.headers if k == b"authorization"]
    if len(given) != 1:
        return False
    scheme, _, value = given[0].partition(b" ")
    return scheme.lower() == b"bearer" and hmac.compare_digest(value.strip(), token.encode())


async def _exchange(health: WorkerHealth, stream: trio.abc.Stream) -> None:
    """One request, one answer, then close: parsed by h11 (bounded head, strict
    framing), so no byte sequence a client sends does more than end its exchange."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST)
    event: object = h11.NEED_DATA
    try:
        while event is h11.NEED_DATA:
            conn.receive_data(bytes(await stream.receive_some(4096)))
            event = conn.next_event()
    except h11.RemoteProtocolError as exc:
        answer, head_only = _text(exc.error_status_hint, "bad request"), False
    else:
        if not isinstance(event, h11.Request):
            return  # the prober hung up before a whole request head
        answer, head_only = await _answer(health, event), event.method == b"HEAD"
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return  # h11 lets a server answer a malformed request (IDLE) or a request
    status, content_type, body = answer
    headers = [
        ("Content-Type", content_type),
        ("Content-Length", str(len(body))),
        ("Connection", "close"),
    ]
    out = (
        conn.send(
            h11.Response(status_code=status, headers=headers, reason=HTTPStatus(status).phrase)
        )
        or b""
    )
    if not head_only:
        out += conn.send(h11.Data(data=body)) or b""
    out += conn.send(h11.EndOfMessage()) or b""
    await stream.send_all(out)


async def serve_health(
    health: WorkerHealth, host: str, port: int, *, task_status: trio.TaskStatus[None]
) -> None:
    """Serve the probes and metrics on ``host:port`` until cancelled.

    Whatever one connection does (a reset mid-request, bytes that are not HTTP, a
    stall) ends that connection only: its errors are its own, each exchange has a
    deadline, and at most :data:`MAX_CONNECTIONS` are served at once (the rest are
    closed unanswered)."""
    slots = trio.CapacityLimiter(MAX_CONNECTIONS)

    async def handle(stream: trio.SocketStream) -> None:
        try:
            slots.acquire_nowait()
        except trio.WouldBlock:
            await stream.aclose()
            return
        try:
            with trio.move_on_after(READ_TIMEOUT + PING_TIMEOUT):
                await _exchange(health, stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the prober reset or hung up: its connection only
        except Exception:
            log.exception("worker health: one exchange failed (the server goes on)")
        finally:
            slots.release()
            with trio.move_on_after(1) as closing:
                closing.shield = True
                await stream.aclose()

    listeners = await trio.open_tcp_listeners(port, host=host)
    log.info("worker health on http://%s:%d/healthz, /readyz, /metrics", host, port)
    task_status.started()
    await trio.serve_listeners(handle, listeners)
