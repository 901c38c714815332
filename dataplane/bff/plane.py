"""The plane: everything a plane route needs, built once per BFF process.

:func:`serve_plane` is its lifetime, a task of the app's lifespan nursery: the
bridge loop, the queue DB pool, the enqueuer (:mod:`dataplane.queue.batching`), the
reply pump and the backpressure gauge, until the app shuts down.
:class:`BffState` is the app's typed state (``app.extensions["dataplane"]``): the
plane once it is up, or why it is not.

The plane supervises itself: when one of its tasks fails (a bug: the queue DB going
away is not a failure, its pool and listener reconnect), the whole plane is torn down
and built again after a backoff (:data:`RESTART_DELAYS`), its streams end without a
final event (their EventSource reconnects to the new plane) and, meanwhile, every plane
route and ``/readyz`` answer 503 saying why. A plane that fails
:data:`UNHEALTHY_AFTER` times in a row, each time within :data:`STEADY_SECONDS` of its
start, makes ``/healthz`` answer 503 too: the process cannot recover by itself.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import trio

from dataplane.auth.verifier import JwtVerifier
from dataplane.bff.auth.tokens import StreamTokens
from dataplane.bff.backpressure import LiveLoad
from dataplane.bff.config import BffConfig
from dataplane.bff.reply.pump import ReplyPump
from dataplane.core.errors import ConfigError
from dataplane.db import Database, open_bridge, open_database
from dataplane.db.session import wait_session_pooling
from dataplane.queue import QueueClient, QueueType, queue_database
from dataplane.queue.batching import Enqueuer
from dataplane.queue.roles import refuse_owner
from dataplane.surfaces.manifest import Surface
from telemetry.metrics import initialise
from telemetry.otel import Telemetry

log = logging.getLogger(__name__)

RESTART_DELAYS = (1.0, 2.0, 5.0, 10.0, 30.0)  # seconds before a failed plane is rebuilt
STEADY_SECONDS = 60.0  # a plane up this long before failing starts the count over
UNHEALTHY_AFTER = 3  # failures in a row after which /healthz answers 503


@dataclass
class BffServices:
    """What every plane route is served by, built once per plane of a BFF process: the
    queue DB and its client, the enqueuer, the reply pump, the backpressure gauge and
    the verifiers. A route asks for it (``current_services()``) and passes it on to
    what it calls; none keeps it."""

    config: BffConfig
    surfaces: dict[str, Surface]
    db: Database
    queue: QueueClient
    enqueuer: Enqueuer  # enqueues that arrive together share one statement
    pump: ReplyPump
    load: LiveLoad
    verifier: JwtVerifier
    tokens: StreamTokens
    migrated: bool = False  # /readyz saw every migration of this release applied
    schema_checked_at: float = float("-inf")  # when /readyz last read the migrations
    schema_missing: list[str] = field(default_factory=list)  # what that read lacked
    # DATAPLANE_READY_NEEDS_WORKERS: the queue types /readyz has seen a worker serve
    workers_seen: set[str] = field(default_factory=set)

    def queue_type(self, surface: Surface) -> QueueType:
        return surface.queue_type(self.config.queue_suffix)


@dataclass
class BffState:
    """The app's state: the plane's services once it serves, else why the plane routes
    answer 503."""

    services: BffServices | None = None
    why: str = "the data plane is starting"
    config: BffConfig | None = None
    telemetry: Telemetry | None = None
    failures: int = 0  # the plane's failures in a row (see the module docstring)

    @property
    def healthy(self) -> bool:
        """False while the plane is down after failing again and again: restarting the
        process may help."""
        return self.services is not None or self.failures < UNHEALTHY_AFTER


async def serve_plane(
    config: BffConfig,
    verifier: JwtVerifier,
    tokens: StreamTokens,
    state: BffState,
    ready: trio.Event,
) -> None:
    """The plane's lifetime, until the app shuts down: built, served, and built again
    after a backoff whenever it fails (see the module docstring). ``ready`` is set once
    the first plane listens, or has failed."""
    while True:
        started = trio.current_time()
        try:
            await _serve_plane(config, verifier, tokens, state, ready)
            return  # refused for good (state.why says why)
        except Exception as exc:
            state.services = None
            if trio.current_time() - started >= STEADY_SECONDS:
                state.failures = 0
            delay = RESTART_DELAYS[min(state.failures, len(RESTART_DELAYS) - 1)]
            state.failures += 1
            state.why = (
                f"the data plane failed ({_reason(exc)}); it restarts in {delay:g}s"
                f" (failure {state.failures} in a row)"
            )
            log.error("%s", state.why, exc_info=exc)
            ready.set()
        await trio.sleep(delay)


def _reason(exc: BaseException) -> str:
    """What failed, in one line: the first leaf of an exception group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def _serve_plane(
    config: BffConfig,
    verifier: JwtVerifier,
    tokens: StreamTokens,
    state: BffState,
    ready: trio.Event,
) -> None:
    """One plane, from its bridge loop to its pump, until the app shuts down or it fails."""
    surfaces = config.surfaces.registry().surfaces
    db_config = queue_database(config.queue.url, "bff", pool_size=config.pool_size)
    async with open_bridge(), open_database(db_config) as db:
        try:  # LISTEN needs real sessions: behind transaction pooling, answer 503 saying so
            await wait_session_pooling(db_config)
            await refuse_owner(db, "bff")  # never the owner's or a superuser's credential
        except ConfigError as exc:
            state.why = str(exc)
            log.error("%s; plane routes answer 503", state.why)
            ready.set()
            return
        queue = QueueClient(db, config.queue)
        channels = [s.queue_type(config.queue_suffix).done_channel for s in surfaces.values()]
        initialise(
            "bff",
            {s.queue_type(config.queue_suffix).name: list(s.operations) for s in surfaces.values()},
        )
        types = [s.queue_type(config.queue_suffix) for s in surfaces.values()]
        pump = ReplyPump(
            queue,
            channels,
            sweep_seconds=config.sweep_seconds,
            progress_channels=[t.progress_channel for t in types],
            retry_channels=[t.retry_channel for t in types],
        )
        load = LiveLoad(queue, config.queue)
        enqueuer = Enqueuer(queue)
        state.services = BffServices(
            config, surfaces, db, queue, enqueuer, pump, load, verifier, tokens
        )
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(enqueuer.run)
                nursery.start_soon(pump.run)
                nursery.start_soon(load.run)
                await pump.listener.wait_connected()
                if state.failures:
                    log.info("the data plane is back after %d failure(s)", state.failures)
                ready.set()
                log.info(
                    "BFF ready: %d surface(s), listening on %s",
                    len(surfaces),
                    ", ".join(channels),
                )
        except Exception as exc:  # said at once: tearing the plane down takes a while
            state.why = f"the data plane failed ({_reason(exc)}); it restarts"
            raise
        finally:
            state.services = None
