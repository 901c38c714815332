"""The surface BFF: ``hypercorn -k trio dataplane.app:app``.

:func:`create_app` builds the Quart-Trio app: the routes of
:mod:`dataplane.bff.routes` and :mod:`dataplane.bff.site`, the shared error handling
of :mod:`dataplane.http`,
and a lifespan that reads :class:`~dataplane.bff.config.BffConfig` and starts the
plane (:func:`~dataplane.bff.plane.serve_plane`) in a task of the app's nursery:
the pump has executed LISTEN before the server accepts streams (or, with the DB
down, after a bounded wait; ``/readyz`` tells). Without ``MAESTRO_QUEUES_URL`` or
a JWT key, every plane route answers 503 saying what is missing, and ``/healthz``
still answers.
"""

from __future__ import annotations

import logging

import trio
from quart import request
from quart_trio import QuartTrio

from dataplane.auth.verifier import JwtVerifier
from dataplane.bff.auth.tokens import StreamTokens
from dataplane.bff.config import BffConfig
from dataplane.bff.invalidate import invalidation
from dataplane.bff.plane import UNHEALTHY_AFTER, BffState, serve_plane
from dataplane.bff.routes import MAX_BODY_BYTES, routes
from dataplane.bff.site import site
from dataplane.compat import install_edge, install_process
from dataplane.core.runtime import BFF_YOUNG_THRESHOLD, freeze_startup_heap, thaw_heap
from dataplane.core.settings import from_env
from dataplane.http import RequireTrio, install_error_handlers
from telemetry.logs import configure_logging
from telemetry.otel import setup_telemetry

log = logging.getLogger(__name__)

BODY_TIMEOUT = 10  # seconds a client may take to send its body
STARTUP_WAIT = 10.0  # seconds to wait for LISTEN before serving anyway
REQUIRE_TRIO = (
    "dataplane.app must be served under Trio: run `dataplane bff` (or "
    "`hypercorn -k trio dataplane.app:app`; Hypercorn's asyncio worker cannot run "
    "the Trio-based data plane)"
)


def create_app() -> QuartTrio:
    app = QuartTrio(__name__, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.config["BODY_TIMEOUT"] = BODY_TIMEOUT
    app.config["JSON_SORT_KEYS"] = False
    state = BffState()
    app.extensions["dataplane"] = state  # the plane, for operators' tools and tests
    install_error_handlers(app, max_body_bytes=MAX_BODY_BYTES)
    app.register_blueprint(routes)
    app.register_blueprint(site)
    app.register_blueprint(invalidation)

    @app.before_serving
    async def install_replacements() -> None:  # first: before Hypercorn takes a connection
        install_process()  # psycopg, OpenTelemetry: before the plane and its telemetry
        install_edge(app)

    @app.before_serving
    async def start_plane() -> None:
        configure_logging()  # Hypercorn's error log joins it (dataplane.http.serve.EdgeLogger)
        if state.telemetry is None:
            state.telemetry = setup_telemetry("dataplane-bff")
        try:
            await _start_plane(app, state)
        except Exception as exc:  # Hypercorn would log a bare "lifespan error" and serve on
            state.services = None
            state.failures = UNHEALTHY_AFTER  # nothing will retry it: not healthy either
            state.why = f"the BFF could not start: {type(exc).__name__}: {exc}"
            log.error("%s; plane routes, /readyz and /healthz answer 503", state.why, exc_info=exc)

    @app.before_serving
    async def freeze_heap() -> None:  # after start_plane: the app and its plane are built
        freeze_startup_heap("BFF", young_threshold=BFF_YOUNG_THRESHOLD)

    @app.before_request
    async def fetch_signing_keys() -> None:
        # JWT verification never does I/O; with a JWKS, a key it will need is fetched
        # here first (rate-limited: see dataplane.auth.jwks.JwksKeys).
        if state.services is not None:
            await state.services.verifier.prepare(request.headers.get("Authorization", ""))

    @app.after_serving
    async def thaw() -> None:
        thaw_heap()

    @app.after_serving
    async def flush_telemetry() -> None:
        if state.telemetry is not None:
            state.telemetry.shutdown()

    return app


async def _start_plane(app: QuartTrio, state: BffState) -> None:
    """Read the configuration and start the plane in a task of the app's nursery: the
    pump has executed LISTEN before this returns (or a bounded wait has passed)."""
    config = state.config = from_env(BffConfig)
    if state.telemetry is not None and state.telemetry.prometheus and not config.metrics_token:
        log.warning(
            "GET /metrics is served to anyone who reaches this port: "
            "set DATAPLANE_METRICS_TOKEN to require it as a bearer token"
        )
    missing = config.missing()
    if missing:
        state.why = "the data plane is not configured: set " + " and ".join(missing)
        log.warning("%s; plane routes answer 503", state.why)
        return
    config.surfaces.registry()  # a bad surface fails here, with its reason, not later
    jwt = config.jwt
    verifier = JwtVerifier.from_settings(
        secret=jwt.secret,
        public_key=jwt.public_key,
        audience=jwt.audience,
        issuer=jwt.issuer,
        jwks_url=jwt.jwks_url,
        jwks_refresh_seconds=jwt.jwks_refresh_seconds,
        jwks_max_age_seconds=jwt.jwks_max_age_seconds,
        jwks_timeout_seconds=jwt.jwks_timeout_seconds,
    )
    if verifier.jwks is not None:
        await verifier.jwks.refresh()  # bounded; a failure is retried on demand
    tokens = StreamTokens.from_settings(jwt.stream_secret, jwt.secret)
    ready = trio.Event()
    app.nursery.start_soon(serve_plane, config, verifier, tokens, state, ready)
    with trio.move_on_after(STARTUP_WAIT):
        await ready.wait()
    if not ready.is_set():
        log.warning("the reply pump is not listening yet (queue DB down?); serving anyway")


quart_app = create_app()
app = RequireTrio(quart_app, REQUIRE_TRIO)
