"""The plane: everything a plane route needs, built once per BFF process.

:func:`serve_plane` is its lifetime, a task of the app's lifespan nursery: the
bridge loop, the queue DB pool, the enqueuer (:mod:`dataplane.queue.batching`), the
reply pump, the backpressure gauge and the tables' growth watch
(:mod:`dataplane.queue.growth`), until the app shuts down.
:class:`BffState` is the app's typed state (``app.extensions["dataplane"]``): the
plane once it is up, or why it is not.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio

from dataplane.bff.auth import JwtVerifier
from dataplane.bff.backpressure import LiveLoad
from dataplane.bff.config import BffConfig
from dataplane.bff.pump import ReplyPump
from dataplane.bff.tokens import StreamTokens
from dataplane.db import Database, DatabaseConfig, open_bridge, open_database
from dataplane.db.session import wait_session_pooling
from dataplane.errors import ConfigError
from dataplane.observability.metrics import initialise
from dataplane.observability.otel import Telemetry
from dataplane.queue import QueueClient, QueueType
from dataplane.queue.batching import Enqueuer
from dataplane.queue.growth import GrowthWatch
from dataplane.surfaces.manifest import Surface

log = logging.getLogger(__name__)


@dataclass
class Plane:
    """The queue DB, the enqueuer, the reply pump and the verifiers of one BFF process."""

    config: BffConfig
    surfaces: dict[str, Surface]
    db: Database
    queue: QueueClient
    enqueuer: Enqueuer  # enqueues that arrive together share one statement
    pump: ReplyPump
    load: LiveLoad
    verifier: JwtVerifier
    tokens: StreamTokens

    def queue_type(self, surface: Surface) -> QueueType:
        return surface.queue_type(self.config.queue_suffix)


@dataclass
class BffState:
    """The app's state: the plane once it serves, else why the plane routes answer 503."""

    plane: Plane | None = None
    why: str = "the data plane is starting"
    config: BffConfig | None = None
    telemetry: Telemetry | None = None


async def serve_plane(
    config: BffConfig,
    verifier: JwtVerifier,
    tokens: StreamTokens,
    state: BffState,
    ready: trio.Event,
) -> None:
    """The plane's lifetime: bridge loop, pool and pump, until the app shuts down."""
    url = config.queue.require_url()
    surfaces = config.surfaces.registry().surfaces
    db_config = DatabaseConfig(url, pool_size=config.pool_size, application_name="dataplane-bff")
    async with open_bridge(), open_database(db_config) as db:
        try:  # LISTEN needs real sessions: behind transaction pooling, answer 503 saying so
            await wait_session_pooling(db_config)
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
        pump = ReplyPump(queue, channels, sweep_seconds=config.sweep_seconds)
        load = LiveLoad(queue, config.queue)
        enqueuer = Enqueuer(queue)
        state.plane = Plane(config, surfaces, db, queue, enqueuer, pump, load, verifier, tokens)
        async with trio.open_nursery() as nursery:
            await nursery.start(enqueuer.run)
            nursery.start_soon(pump.run)
            nursery.start_soon(load.run)
            nursery.start_soon(GrowthWatch(db).run)  # plans made on a small queue, made again
            await pump.listener.wait_connected()
            ready.set()
            log.info(
                "BFF ready: %d surface(s), listening on %s", len(surfaces), ", ".join(channels)
            )
