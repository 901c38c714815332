"""The telemetry receiver, capcom's ``/worker/job-finished``.

Served by ``hypercorn -k trio dataplane.capcom.app:app``. Routes::

    POST /worker/job-finished   one job report (a JSON object) or a batch (a JSON array of
                                at most MAX_BATCH of them) -> 204, one INSERT into worker_runs
    GET  /healthz               liveness
    GET  /readyz                configured and the database answers
    GET  /metrics               Prometheus text, when DATAPLANE_METRICS=1 (404 otherwise);
                                only to the bearer of DATAPLANE_METRICS_TOKEN when it is set

A report POST is an HTTP server span in the sender's trace (its ``traceparent``
header), its INSERT a client span under it.

Configuration (environment, read once at startup): ``DATAPLANE_CAPCOM_TOKEN``, the bearer token
every worker shares; ``DATAPLANE_CAPCOM_DB_URL``, the database holding ``worker_runs``, by
default ``MAESTRO_QUEUES_URL``; ``DATAPLANE_METRICS_TOKEN``, the bearer token a
scraper of ``/metrics`` must send (as at the BFF; unset, ``/metrics`` is open and a
warning at startup says so).

States: *not configured* (no token: every report is answered 503; no database: 503
after the token check) or *serving*. The database pool lives in a task of the app's
lifespan nursery (as in the BFF); it connects lazily, so the receiver starts and
answers ``/healthz`` with the database down.

A report is checked field by field before anything touches the database, by the
checks :class:`~telemetry.report.JobReport` declares: every field
present, no other field, each of its type and in its range, ``outcome`` and
``cache`` in their enums, ``job_id`` a UUID, text free of NUL and of lone
surrogates (Postgres cannot store them). One bad report rejects the whole batch,
and nothing is written.

Failure handling: wrong or missing token -> 401 (compared in constant time); not
JSON -> 415 (content type) or 400 (body); over 16 KiB -> 413; a bad field -> 400
naming it; database unreachable or too slow -> 503 with ``Retry-After``. Errors are
``{"error": {"status", "code", "message"}}`` (:mod:`dataplane.http`, as the BFF's). The
sender (:mod:`dataplane.worker.sender`) counts every non-2xx answer as a drop and never retries,
so an INSERT is all-or-nothing and a report is stored at most once.
"""

from __future__ import annotations

import hmac
import json
import logging
from dataclasses import dataclass
from typing import Any, NoReturn

import trio
from quart import Response, request
from quart_trio import QuartTrio

from dataplane.compat import install_edge, install_process
from dataplane.core.errors import ConfigError, DatabaseError, DatabaseUnavailable
from dataplane.core.settings import from_env, setting
from dataplane.db import Database, open_bridge, open_database, q
from dataplane.http import (
    ApiError,
    RequireTrio,
    install_error_handlers,
    json_response,
    prometheus_response,
    require_bearer,
    server_span,
)
from dataplane.queue import queue_database
from dataplane.queue.roles import refuse_owner
from telemetry.logs import configure_logging
from telemetry.metrics import initialise, instruments
from telemetry.otel import Telemetry, prometheus_text, setup_telemetry
from telemetry.report import ReportError, check_reports, insert_params

log = logging.getLogger(__name__)

SERVICE_NAME = "dataplane-capcom"
ROUTE = "/worker/job-finished"
MAX_BODY_BYTES = 16 * 1024
BODY_TIMEOUT = 10  # seconds a client may take to send its body
POOL_SIZE = 4  # connections
ACQUIRE_TIMEOUT = 2.0  # seconds to wait for a free connection
CONNECT_TIMEOUT = 3.0  # seconds to open one
INSERT_TIMEOUT = 5.0  # seconds the INSERT may take
READY_TIMEOUT = 2.0  # seconds /readyz may spend on its ping
ROLE_CHECK_RETRY = 2.0  # seconds between tries of the role check while the DB is down
REQUIRE_TRIO = (
    "dataplane.capcom.app must be served under Trio: run `dataplane capcom` (or "
    "`hypercorn -k trio dataplane.capcom.app:app`; Hypercorn's asyncio worker cannot run it)"
)


@dataclass(frozen=True, slots=True)
class CapcomSettings:
    """The receiver's configuration (read by :func:`dataplane.core.settings.from_env`)."""

    token: str | None = setting("DATAPLANE_CAPCOM_TOKEN", None, old=("CAPCOM_TOKEN",))
    db_url: str | None = setting(
        ("DATAPLANE_CAPCOM_DB_URL", "MAESTRO_QUEUES_URL"), None, old=("CAPCOM_DB_URL",)
    )
    metrics_token: str | None = setting("DATAPLANE_METRICS_TOKEN", None)


# -- the body ---------------------------------------------------------------


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def parse_body(raw: str | bytes) -> Any:
    """JSON (UTF-8, no NaN/Infinity) or :class:`ReportError`."""
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise ReportError(f"the body is not valid JSON: {exc}") from None


# -- the app ----------------------------------------------------------------


@dataclass
class _State:
    token: str | None = None
    db: Database | None = None
    why: str = "capcom is starting"
    metrics: bool = False
    metrics_token: str | None = None
    telemetry: Telemetry | None = None


def create_app() -> QuartTrio:
    app = QuartTrio(__name__, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.config["BODY_TIMEOUT"] = BODY_TIMEOUT
    state = _State()
    app.extensions["capcom"] = state  # for operators' tools and tests
    install_error_handlers(app, max_body_bytes=MAX_BODY_BYTES)

    @app.before_serving
    async def start() -> None:
        await _start(app, state)

    @app.after_serving
    async def stop() -> None:
        if state.telemetry is not None:
            state.telemetry.shutdown()

    @app.get("/healthz")
    async def healthz() -> Response:
        return json_response({"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> Response:
        checks = {"token": state.token is not None, "db": False}
        if state.db is not None:
            try:
                await state.db.ping(call_timeout=READY_TIMEOUT)
                checks["db"] = True
            except DatabaseError:
                pass
        ok = all(checks.values())
        body = {"status": "ready" if ok else "not ready", "checks": checks}
        return json_response(body, 200 if ok else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        require_bearer(state.metrics_token, "DATAPLANE_METRICS_TOKEN")
        if not state.metrics:
            raise ApiError(404, "metrics are off: set DATAPLANE_METRICS=1")
        return prometheus_response(prometheus_text())

    @app.post(ROUTE)
    @server_span(ROUTE)
    async def job_finished() -> Response:
        if state.token is None:
            raise ApiError(
                503, "capcom is not configured: set DATAPLANE_CAPCOM_TOKEN", "NOT_CONFIGURED"
            )
        _authorize(state.token)
        db = state.db
        if db is None:
            raise ApiError(503, state.why, "NOT_CONFIGURED")
        if request.mimetype != "application/json":
            raise ApiError(415, "send the report as application/json")
        raw = await request.get_data(cache=False, as_text=False)
        if len(raw) > MAX_BODY_BYTES:
            raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes")
        try:
            reports = check_reports(parse_body(raw))
        except ReportError as exc:
            raise ApiError(400, str(exc)) from None
        await insert_reports(db, reports)
        return Response("", status=204)

    return app


async def _start(app: QuartTrio, state: _State) -> None:
    """Replacements, logging, settings, telemetry; then the database, in a task of the
    app's nursery, when one is configured."""
    install_process()  # psycopg, OpenTelemetry: before its database and telemetry
    install_edge(app)  # before Hypercorn takes a connection; never at import
    configure_logging()
    settings = from_env(CapcomSettings)
    state.telemetry = setup_telemetry(SERVICE_NAME)
    state.metrics = state.telemetry.prometheus
    state.metrics_token = settings.metrics_token
    if state.metrics and not settings.metrics_token:
        log.warning(
            "GET /metrics is served to anyone who reaches this port: "
            "set DATAPLANE_METRICS_TOKEN to require it as a bearer token"
        )
    initialise("capcom")
    state.token = settings.token
    if settings.token is None:
        log.warning("capcom: DATAPLANE_CAPCOM_TOKEN is not set; every report is answered 503")
    if settings.db_url is None:
        state.why = (
            "capcom is not configured: set DATAPLANE_CAPCOM_DB_URL or MAESTRO_QUEUES_URL "
            "(the database holding worker_runs)"
        )
        log.warning("%s; reports are answered 503", state.why)
        return
    await app.nursery.start(_serve_db, settings.db_url, state)


def _authorize(expected: str) -> None:
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    given = given.strip()
    if scheme.lower() != "bearer" or not given:
        raise ApiError(401, "send Authorization: Bearer <DATAPLANE_CAPCOM_TOKEN>")
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise ApiError(401, "wrong capcom token")


async def insert_reports(db: Database, reports: list[dict[str, Any]]) -> None:
    """Write checked reports (:func:`~telemetry.report.check_reports`) into ``worker_runs``
    with one INSERT; its failures as the HTTP errors they answer (the test kit records
    its workers' reports with it too)."""
    try:
        await db.execute(
            q("worker_run_insert"), insert_params(reports), call_timeout=INSERT_TIMEOUT
        )
    except DatabaseUnavailable as exc:
        raise ApiError(503, f"the database is unreachable: {exc}") from None
    except DatabaseError as exc:
        if exc.sqlstate and exc.sqlstate[:2] in ("22", "23"):  # data exception, constraint
            raise ApiError(400, f"the database refused the report: {exc}") from None
        log.error("capcom: INSERT into worker_runs failed: %s", exc)
        raise ApiError(503, "the database refused the INSERT (is worker_runs migrated?)") from None
    instruments().capcom_received.add(len(reports))


async def _serve_db(
    db_url: str, state: _State, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """The pool's lifetime: from startup until the app's nursery is cancelled."""
    config = queue_database(
        db_url,
        "capcom",
        pool_size=POOL_SIZE,
        acquire_timeout=ACQUIRE_TIMEOUT,
        connect_timeout=CONNECT_TIMEOUT,
        call_timeout=INSERT_TIMEOUT,
    )
    async with open_bridge(), open_database(config) as db:
        # Its role first: never the owner's or a superuser's credential. Checked before
        # it reports started (as the pool was), then retried while the DB is down.
        checked = await _role_checked(db, state)
        task_status.started()
        while checked is False:
            await trio.sleep(ROLE_CHECK_RETRY)
            checked = await _role_checked(db, state)
        if checked is None:
            await trio.sleep_forever()  # refused: reports are answered 503, saying why
        state.db = db
        log.info("capcom ready: storing job reports in worker_runs")
        try:
            await trio.sleep_forever()
        finally:
            state.db = None


quart_app = create_app()
app = RequireTrio(quart_app, REQUIRE_TRIO)


async def _role_checked(db: Database, state: _State) -> bool | None:
    """True: the role may serve; False: the DB is unreachable (try again); None: refused."""
    try:
        await refuse_owner(db, "capcom")
        return True
    except DatabaseUnavailable as exc:
        state.why = f"capcom: the database is unreachable ({exc})"
        return False
    except ConfigError as exc:
        state.why = str(exc)
        log.error("%s; reports are answered 503", state.why)
        return None
