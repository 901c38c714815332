"""The telemetry receiver, capcom's ``/worker/job-finished``.

Served by ``hypercorn -k trio telemetry.capcom:app``. Routes::

    POST /worker/job-finished   one job report (a JSON object) or a batch (a JSON array of
                                at most MAX_BATCH of them) -> 204, one INSERT into worker_runs
    GET  /healthz               liveness
    GET  /readyz                configured and the database answers
    GET  /metrics               Prometheus text, when DATAPLANE_METRICS=1 (404 otherwise)

Configuration (environment, read once at startup): ``CAPCOM_TOKEN``, the bearer token
every worker shares; ``CAPCOM_DB_URL``, the database holding ``worker_runs``, by
default ``MAESTRO_QUEUES_URL``.

States: *not configured* (no token: every report is answered 503; no database: 503
after the token check) or *serving*. The database pool lives in a task of the app's
lifespan nursery (as in :mod:`dataplane.app`); it connects lazily, so the receiver
starts and answers ``/healthz`` with the database down.

A report is checked field by field before anything touches the database: every
``JobReport`` field present, no other field, each of its type and in its range,
``outcome`` and ``cache`` in their enums, ``job_id`` a UUID, text free of NUL and of
lone surrogates (Postgres cannot store them). One bad report rejects the whole
batch, and nothing is written.

Failure handling: wrong or missing token -> 401 (compared in constant time); not
JSON -> 415 (content type) or 400 (body); over 16 KiB -> 413; a bad field -> 400
naming it; database unreachable or too slow -> 503 with ``Retry-After``. Errors are
``{"error": {"status", "code", "message"}}`` like the BFF's. The sender
(:mod:`telemetry.sender`) counts every non-2xx answer as a drop and never retries,
so an INSERT is all-or-nothing and a report is stored at most once.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import trio
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from dataplane.app import ApiError, RequireTrio
from dataplane.db import Database, DatabaseConfig, open_bridge, open_database
from dataplane.errors import DatabaseError, DatabaseUnavailable
from dataplane.sql import q
from telemetry.metrics import instruments
from telemetry.otel import Telemetry, prometheus_text, setup_telemetry

log = logging.getLogger(__name__)

SERVICE_NAME = "dataplane-capcom"
ROUTE = "/worker/job-finished"
MAX_BODY_BYTES = 16 * 1024
MAX_BATCH = 100  # reports per POST (the body limit binds first: ~40 reports)
BODY_TIMEOUT = 10  # seconds a client may take to send its body
MAX_TEXT = 512  # characters of type, operation, worker_id
POOL_SIZE = 4  # connections
ACQUIRE_TIMEOUT = 2.0  # seconds to wait for a free connection
CONNECT_TIMEOUT = 3.0  # seconds to open one
INSERT_TIMEOUT = 5.0  # seconds the INSERT may take
READY_TIMEOUT = 2.0  # seconds /readyz may spend on its ping
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

OUTCOMES = frozenset({"done", "error", "failed", "poison", "lost", "released"})
CACHES = frozenset({"hit", "miss", "bypass"})
INT4_MAX = 2**31 - 1
INT8_MAX = 2**63 - 1
MAX_UNIX_SECONDS = 253_402_300_799.0  # 9999-12-31T23:59:59Z, Postgres' usable range


@dataclass(frozen=True, slots=True)
class CapcomSettings:
    """The receiver's configuration, read from the environment in one place."""

    token: str | None
    db_url: str | None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CapcomSettings:
        env = os.environ if env is None else env
        token = env.get("CAPCOM_TOKEN", "").strip() or None
        db_url = env.get("CAPCOM_DB_URL", "").strip() or env.get("MAESTRO_QUEUES_URL", "").strip()
        return cls(token=token, db_url=db_url or None)


# -- validation -------------------------------------------------------------


class ReportError(ValueError):
    """A report that cannot be stored; the message names the field."""


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ReportError("expected a non-empty string")
    if len(value) > MAX_TEXT:
        raise ReportError(f"longer than {MAX_TEXT} characters")
    if "\x00" in value:
        raise ReportError("contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ReportError("contains a lone surrogate") from None
    return value


def _choice(allowed: frozenset[str]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str) or value not in allowed:
            raise ReportError(f"expected one of {', '.join(sorted(allowed))}")
        return value

    return check


def _job_id(value: Any) -> uuid.UUID:
    if not isinstance(value, str):
        raise ReportError("expected a UUID string")
    try:
        return uuid.UUID(value)
    except ValueError:
        raise ReportError("expected a UUID string") from None


def _milliseconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ReportError("expected a number")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ReportError("expected a finite number >= 0")
    return number


def _integer(maximum: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ReportError("expected an integer")
        if not 0 <= value <= maximum:
            raise ReportError(f"expected an integer from 0 to {maximum}")
        return value

    return check


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ReportError("expected true or false")
    return value


def _unix_seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ReportError("expected unix seconds (a number)")
    number = float(value)
    if not math.isfinite(number) or not 0 < number <= MAX_UNIX_SECONDS:
        raise ReportError("expected unix seconds after 1970 and before 10000")
    return number


# One checker per JobReport field, in worker_runs column order.
FIELDS: dict[str, Callable[[Any], Any]] = {
    "job_id": _job_id,
    "type": _text,
    "operation": _text,
    "outcome": _choice(OUTCOMES),
    "wall_ms": _milliseconds,
    "cpu_ms": _milliseconds,
    "rss_bytes": _integer(INT8_MAX),
    "queue_wait_ms": _milliseconds,
    "cache": _choice(CACHES),
    "coalesced": _boolean,
    "dequeue_count": _integer(INT4_MAX),
    "worker_id": _text,
    "finished_at": _unix_seconds,
}


def check_report(body: Any, *, where: str = "report") -> dict[str, Any]:
    """One report, every field checked and converted; :class:`ReportError` otherwise."""
    if not isinstance(body, dict):
        raise ReportError(f"{where}: expected a JSON object of the job report fields")
    unknown = sorted(set(body) - FIELDS.keys())
    if unknown:
        raise ReportError(f"{where}: unknown field(s): {', '.join(unknown)}")
    missing = [name for name in FIELDS if name not in body]
    if missing:
        raise ReportError(f"{where}: missing field(s): {', '.join(missing)}")
    checked: dict[str, Any] = {}
    for name, check in FIELDS.items():
        try:
            checked[name] = check(body[name])
        except ReportError as exc:
            raise ReportError(f"{where}.{name}: {exc}") from None
    return checked


def check_reports(body: Any) -> list[dict[str, Any]]:
    """A report, or a non-empty array of at most :data:`MAX_BATCH` reports."""
    if isinstance(body, list):
        if not 1 <= len(body) <= MAX_BATCH:
            raise ReportError(f"a batch holds 1 to {MAX_BATCH} reports, got {len(body)}")
        return [check_report(item, where=f"reports[{i}]") for i, item in enumerate(body)]
    return [check_report(body)]


def insert_params(reports: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The ``worker_run_insert`` parameters: one array per column."""
    return {name: [report[name] for report in reports] for name in FIELDS}


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
    telemetry: Telemetry | None = None


def create_app() -> QuartTrio:
    app = QuartTrio(__name__, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.config["BODY_TIMEOUT"] = BODY_TIMEOUT
    state = _State()
    app.extensions["capcom"] = state  # for operators' tools and tests

    @app.before_serving
    async def start() -> None:
        settings = CapcomSettings.from_env()
        state.telemetry = setup_telemetry(SERVICE_NAME)
        state.metrics = state.telemetry.prometheus
        state.token = settings.token
        if settings.token is None:
            log.warning("capcom: CAPCOM_TOKEN is not set; every report is answered 503")
        if settings.db_url is None:
            state.why = (
                "capcom is not configured: set CAPCOM_DB_URL or MAESTRO_QUEUES_URL "
                "(the database holding worker_runs)"
            )
            log.warning("%s; reports are answered 503", state.why)
            return
        await app.nursery.start(_serve_db, settings.db_url, state)

    @app.after_serving
    async def stop() -> None:
        if state.telemetry is not None:
            state.telemetry.shutdown()

    @app.errorhandler(ApiError)
    async def api_error(error: ApiError) -> Response:
        return error.response()

    @app.errorhandler(HTTPException)
    async def http_error(error: HTTPException) -> Response:
        status = error.code or 500
        message = {413: f"request body over {MAX_BODY_BYTES} bytes"}.get(
            status, error.description or error.name
        )
        resp = ApiError(status, message).response()
        allow = dict(error.get_headers()).get("Allow")
        if allow:
            resp.headers["Allow"] = allow
        return resp

    @app.after_request
    async def close_if_body_unread(response: Response) -> Response:
        # A refusal given before the body was read (401, 413, 415...) leaves that
        # body on the connection; reusing the connection would stall both sides.
        if response.status_code >= 400 and _body_unread():
            response.headers["Connection"] = "close"
        return response

    @app.get("/healthz")
    async def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> Response:
        checks = {"token": state.token is not None, "db": False}
        if state.db is not None:
            try:
                await state.db.fetchone(q("ping"), call_timeout=READY_TIMEOUT)
                checks["db"] = True
            except DatabaseError:
                pass
        ok = all(checks.values())
        return _json(
            {"status": "ready" if ok else "not ready", "checks": checks}, 200 if ok else 503
        )

    @app.get("/metrics")
    async def metrics() -> Response:
        if not state.metrics:
            raise ApiError(404, "metrics are off: set DATAPLANE_METRICS=1")
        resp = Response(prometheus_text(), status=200)
        resp.headers["Content-Type"] = PROMETHEUS_CONTENT_TYPE
        return resp

    @app.post(ROUTE)
    async def job_finished() -> Response:
        if state.token is None:
            raise ApiError(503, "capcom is not configured: set CAPCOM_TOKEN", "NOT_CONFIGURED")
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
        await _insert(db, reports)
        return Response("", status=204)

    return app


def _authorize(expected: str) -> None:
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    given = given.strip()
    if scheme.lower() != "bearer" or not given:
        raise ApiError(401, "send Authorization: Bearer <CAPCOM_TOKEN>")
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise ApiError(401, "wrong capcom token")


async def _insert(db: Database, reports: list[dict[str, Any]]) -> None:
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
    config = DatabaseConfig(
        db_url,
        pool_size=POOL_SIZE,
        acquire_timeout=ACQUIRE_TIMEOUT,
        connect_timeout=CONNECT_TIMEOUT,
        call_timeout=INSERT_TIMEOUT,
        application_name=SERVICE_NAME,
    )
    async with open_bridge(), open_database(config) as db:
        state.db = db
        log.info("capcom ready: storing job reports in worker_runs")
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            state.db = None


def _body_unread() -> bool:
    length = request.headers.get("Content-Length")
    has_body = (length is not None and length.strip() not in ("", "0")) or (
        "chunked" in request.headers.get("Transfer-Encoding", "").lower()
    )
    if not has_body:
        return False
    complete = getattr(request.body, "_complete", None)
    return not (complete is not None and complete.is_set())


def _json(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body), status=status, mimetype="application/json")


class RequireTrioCapcom(RequireTrio):
    """:class:`dataplane.app.RequireTrio`, naming this module in its message."""

    MESSAGE = (
        "telemetry.capcom must be served under Trio: run "
        "`hypercorn -k trio telemetry.capcom:app` (Hypercorn's asyncio worker cannot run it)"
    )


quart_app = create_app()
app = RequireTrioCapcom(quart_app)
