"""The operator console: ``dataplane console`` (or ``hypercorn -k trio
dataplane.console.app:app``), a process of its own, never served by the BFF.

Server-rendered pages (Quart's Jinja2 templates, autoescaped) with htmx and its SSE
extension for the live wallboard, vendored in ``static/vendor`` (no build step). The
routes are :mod:`dataplane.console.views`; who may see and do what is
:mod:`dataplane.console.session`; what it reads :mod:`dataplane.console.reads`; its
actions go through :mod:`dataplane.console.actions` to :mod:`dataplane.operator`.

Configuration (:class:`ConsoleSettings`): the BFF's JWT settings (``DATAPLANE_JWT_*``),
the queue DB (``DATAPLANE_CONSOLE_DB_URL``, else ``MAESTRO_QUEUES_URL``) as a member of
``dataplane_operator`` (a superuser or the owner is refused unless
``DATAPLANE_ALLOW_OWNER=1``), ``DATAPLANE_CONSOLE_SECRET`` (the CSRF key; shared by
replicas), ``DATAPLANE_TRACE_URL`` (``{trace_id}`` in it: a job's trace link),
``DATAPLANE_CONSOLE_REFRESH_SECONDS`` (the wallboard's cadence).

States: *not configured* (no JWT key or no database: every page but ``/healthz`` is 503
saying what to set), *starting* (the database is unreachable or its role not checked
yet: 503), *serving*. The pool and the wallboard loop are tasks of the app's nursery.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import trio
from quart import Response, g, render_template, request
from quart_trio import QuartTrio

from dataplane.auth.config import JwtConfig
from dataplane.auth.verifier import JwtVerifier
from dataplane.compat import install_edge, install_process
from dataplane.console.board import REFRESH, Board
from dataplane.console.reads import is_operator_role, overview
from dataplane.console.session import CSRF_HEADER, Sessions
from dataplane.console.views import views
from dataplane.core.errors import ConfigError, DatabaseUnavailable
from dataplane.core.settings import from_env, nested, setting
from dataplane.db import Database, open_bridge, open_database
from dataplane.http import ApiError, RequireTrio, install_error_handlers
from dataplane.queue import queue_database
from dataplane.queue.roles import RoleSettings, refuse_owner
from telemetry.logs import configure_logging

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024  # a form: filters, a CSRF token, a pasted JWT
BODY_TIMEOUT = 10  # seconds
POOL_SIZE = 4  # connections: the wallboard loop and a few pages at once
ACQUIRE_TIMEOUT = 3.0  # seconds
CONNECT_TIMEOUT = 3.0  # seconds
CALL_TIMEOUT = 10.0  # seconds; reads bound themselves tighter
ROLE_CHECK_RETRY = 2.0  # seconds between tries of the role check while the DB is down
REQUIRE_TRIO = (
    "dataplane.console.app must be served under Trio: run `dataplane console` "
    "(or `hypercorn -k trio dataplane.console.app:app`)"
)
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
)


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    jwt: JwtConfig = nested(JwtConfig)
    db_url: str | None = setting(("DATAPLANE_CONSOLE_DB_URL", "MAESTRO_QUEUES_URL"), None)
    secret: str | None = setting("DATAPLANE_CONSOLE_SECRET", None)
    trace_url: str | None = setting("DATAPLANE_TRACE_URL", None)
    refresh_seconds: float = setting("DATAPLANE_CONSOLE_REFRESH_SECONDS", REFRESH, minimum=0.05)

    def __post_init__(self) -> None:
        url = self.trace_url
        if url is not None and (
            not url.startswith(("https://", "http://")) or "{trace_id}" not in url
        ):
            raise ConfigError("DATAPLANE_TRACE_URL is an http(s) URL with {trace_id} in it")


@dataclass
class ConsoleState:
    sessions: Sessions | None = None
    db: Database | None = None
    board: Board = field(default_factory=Board)
    settings: ConsoleSettings | None = None
    why: str = "the console is starting"


def create_app() -> QuartTrio:
    app = QuartTrio(__name__, static_folder="static", static_url_path="/static")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.config["BODY_TIMEOUT"] = BODY_TIMEOUT
    app.config["SEND_FILE_MAX_AGE_DEFAULT"] = 3600
    state = ConsoleState()
    app.extensions["console"] = state
    install_error_handlers(app, max_body_bytes=MAX_BODY_BYTES)
    app.register_error_handler(ApiError, _error_page)
    app.register_blueprint(views)
    app.jinja_env.globals.update(ms=_ms, pct=_pct)

    @app.before_serving
    async def start() -> None:
        install_process()
        install_edge(app)
        configure_logging()
        try:
            await _start(app, state)
        except ConfigError as exc:
            state.why = f"the console is not configured: {exc}"
            log.error("%s; pages answer 503", state.why)

    @app.before_request
    async def fetch_signing_keys() -> None:
        sessions = state.sessions
        if sessions is not None and sessions.verifier.jwks is not None:
            found = sessions.credential()
            if found is not None:
                await sessions.verifier.prepare(f"Bearer {found[0]}")

    @app.after_request
    async def harden(response: Response) -> Response:
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers["X-Content-Type-Options"] = "nosniff"
        # same-origin, not no-referrer: under no-referrer a browser sends its own form's
        # POST with Origin: null, which /login refuses (an opaque origin could be any
        # site); another origin still gets no Referer (a job page's trace link).
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["X-Frame-Options"] = "DENY"
        if not request.path.startswith("/static/"):
            response.headers["Cache-Control"] = "no-store"
        caller = g.get("caller")
        if caller is not None:
            response.headers[CSRF_HEADER] = caller.csrf
        return response

    return app


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f} ms"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


async def _error_page(error: ApiError) -> Response:
    """A browser gets a page saying what went wrong; anything else the JSON error."""
    wanted = request.accept_mimetypes.best_match(["application/json", "text/html"])
    if wanted != "text/html":  # */* (curl, httpx) gets the JSON
        return error.response()
    here = request.full_path.rstrip("?") if request.method == "GET" else "/"
    body = await render_template("error.html", error=error, next_page=here)
    resp = Response(body, status=error.status, mimetype="text/html")
    for name in ("WWW-Authenticate", "Retry-After"):
        value = error.response().headers.get(name)
        if value:
            resp.headers[name] = value
    return resp


async def _start(app: QuartTrio, state: ConsoleState) -> None:
    settings = state.settings = from_env(ConsoleSettings)
    jwt = settings.jwt
    if not jwt.configured:
        raise ConfigError("set DATAPLANE_JWT_SECRET, DATAPLANE_JWT_PUBLIC_KEY or ..._JWKS_URL")
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
        await verifier.jwks.refresh()
    state.sessions = Sessions(verifier, settings.secret)
    if settings.db_url is None:
        raise ConfigError("set DATAPLANE_CONSOLE_DB_URL or MAESTRO_QUEUES_URL")
    await app.nursery.start(_serve_db, app, settings, state)


async def _serve_db(
    app: QuartTrio,
    settings: ConsoleSettings,
    state: ConsoleState,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The pool's and the wallboard loop's lifetime: until the app's nursery ends."""
    config = queue_database(
        settings.db_url,
        "console",
        pool_size=POOL_SIZE,
        acquire_timeout=ACQUIRE_TIMEOUT,
        connect_timeout=CONNECT_TIMEOUT,
        call_timeout=CALL_TIMEOUT,
    )
    async with open_bridge(), open_database(config) as db:
        task_status.started()
        while True:
            try:
                await refuse_owner(db, "operator")
                if not (from_env(RoleSettings).allow_owner or await is_operator_role(db)):
                    raise ConfigError(
                        "the console: its queue-DB login is not a member of dataplane_operator"
                        " (GRANT dataplane_operator TO <login>; `dataplane roles` prints the"
                        " grants)"
                    )
                break
            except DatabaseUnavailable as exc:
                state.why = f"the console: the database is unreachable ({exc})"
                await trio.sleep(ROLE_CHECK_RETRY)
            except ConfigError as exc:
                state.why = str(exc)
                log.error("%s; pages answer 503", state.why)
                await trio.sleep_forever()

        async def render() -> str:
            cards = await overview(db)
            async with app.app_context():
                return await render_template("_cards.html", cards=cards, board=state.board)

        async with trio.open_nursery() as nursery:
            await nursery.start(
                lambda task_status: state.board.run(
                    render, refresh=settings.refresh_seconds, task_status=task_status
                )
            )
            state.db = db
            log.info("console ready: the wallboard refreshes every %g s", settings.refresh_seconds)
            try:
                await trio.sleep_forever()
            finally:
                state.db = None


quart_app = create_app()
app = RequireTrio(quart_app, REQUIRE_TRIO)
