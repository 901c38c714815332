"""Connections: how to reach a database, opening and closing, and the error boundary.

:func:`translate` is the one place where driver errors become the project's
(``dataplane.core.errors``); nothing above ``dataplane.db`` catches ``psycopg``
exceptions.
"""

from __future__ import annotations

import logging
import re
import select
from dataclasses import dataclass
from typing import Any

import psycopg
import trio
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import DictRow, dict_row

from dataplane.core.errors import DatabaseError, DatabaseUnavailable, InvalidArgument
from dataplane.db.bridge import run_on_loop

log = logging.getLogger(__name__)

Connection = psycopg.AsyncConnection[DictRow]

POOL_SIZE = 10  # connections
ACQUIRE_TIMEOUT = 5.0  # seconds to wait for a free pooled connection
CONNECT_TIMEOUT = 5.0  # seconds to open a connection
CALL_TIMEOUT = 30.0  # seconds for one database call

_SETTING_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")  # a GUC's name


@dataclass(frozen=True, slots=True)
class DatabaseConfig:
    """How to reach one database, and the limits every call is held to."""

    dsn: str
    pool_size: int = POOL_SIZE
    acquire_timeout: float = ACQUIRE_TIMEOUT
    connect_timeout: float = CONNECT_TIMEOUT
    call_timeout: float = CALL_TIMEOUT
    application_name: str = "dataplane"
    read_only: bool = False  # every transaction read-only (client DBs, belt and braces)
    trace_query_text: bool = False  # statement spans carry db.query.text (the client DB's)
    # Session settings every connection starts with (name, value); the DSN's own
    # options override them, and the read-only default overrides both.
    settings: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.dsn:
            raise InvalidArgument("database DSN is empty")
        for name, _ in self.settings:
            if not _SETTING_NAME.fullmatch(name):
                raise InvalidArgument(f"not a setting name: {name!r}")
        if self.pool_size < 1:
            raise InvalidArgument(f"pool_size must be >= 1, got {self.pool_size}")
        for name in ("acquire_timeout", "connect_timeout", "call_timeout"):
            if getattr(self, name) <= 0:
                raise InvalidArgument(f"{name} must be > 0, got {getattr(self, name)}")


def translate(exc: BaseException) -> DatabaseError:
    """Map a driver error onto the project's types (the one place that does)."""
    if isinstance(exc, DatabaseError):
        return exc
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError | OSError):
        return DatabaseUnavailable(f"database unavailable: {exc}".strip())
    if isinstance(exc, psycopg.Error):
        sqlstate = exc.sqlstate
        return DatabaseError(f"database error [{sqlstate}]: {exc}".strip(), sqlstate=sqlstate)
    return DatabaseError(f"database error: {exc!r}")


READ_ONLY_OPTION = "-c default_transaction_read_only=on"


def setting_option(name: str, value: str) -> str:
    """``-c name=value`` as the server splits ``options``: whitespace and backslashes
    in the value are escaped with a backslash."""
    return f"-c {name}=" + re.sub(r"([\s\\])", r"\\\1", value)


def startup_options(config: DatabaseConfig) -> str:
    """The ``options`` a connection starts with: the config's settings, the DSN's own
    (an ``options`` argument replaces the DSN's, so a deployer's ``-c search_path=...``
    in the URL must be carried over; later ones win), then the read-only default of a
    client DB's pool."""
    try:
        own = str(conninfo_to_dict(config.dsn).get("options") or "")
    except psycopg.Error:
        own = ""
    parts = [setting_option(name, value) for name, value in config.settings]
    parts.append(own)
    if config.read_only:
        parts.append(READ_ONLY_OPTION)
    return " ".join(part for part in parts if part)


# The class every connection is opened with: psycopg's own, or what the entry points'
# dataplane.compat.psycopg installs (LeanConnection: less a loop timer per wait).
_connection_class: type[psycopg.AsyncConnection[Any]] = psycopg.AsyncConnection


def use_connection_class(cls: type[psycopg.AsyncConnection[Any]] | None) -> None:
    """Open connections from now on with ``cls`` (None: psycopg's ``AsyncConnection``).
    The hook of :mod:`dataplane.compat.psycopg`; nothing here calls it."""
    global _connection_class
    _connection_class = psycopg.AsyncConnection if cls is None else cls


def connection_class() -> type[psycopg.AsyncConnection[Any]]:
    return _connection_class


def dsn_endpoints(dsn: str) -> list[str]:
    """``host:port`` of every server a DSN names, in libpq's order (never its password).

    A libpq multi-host DSN (``host=a,b port=5432,5433``, or a URL's ``a:5432,b:5433``)
    names several: a connection goes to the first that answers and, with
    ``target_session_attrs=read-write``, accepts writes. A single ``port`` applies to
    every host."""
    try:
        info = conninfo_to_dict(dsn)
    except psycopg.Error:
        return []
    hosts = str(info.get("host") or info.get("hostaddr") or "localhost").split(",")
    ports = str(info.get("port") or "5432").split(",")
    if len(ports) == 1:
        ports = ports * len(hosts)
    return [f"{h or 'localhost'}:{p or '5432'}" for h, p in zip(hosts, ports, strict=False)]


def attempt_timeout(config: DatabaseConfig) -> int:
    """Seconds libpq may spend on one host: the DSN's own ``connect_timeout`` when it
    has one (a deployer's multi-host DSN sets it low, to move on from a dead host
    quickly), else the config's."""
    try:
        own = str(conninfo_to_dict(config.dsn).get("connect_timeout") or "")
    except psycopg.Error:
        own = ""
    seconds = int(own) if own.isdigit() and int(own) > 0 else round(config.connect_timeout)
    return max(1, seconds)


async def connect(config: DatabaseConfig, loop: Any) -> Connection:
    """A connection to ``config``'s database: to the first of its hosts that answers
    (each given :func:`attempt_timeout`), and for a writer's config never a standby."""
    per_host = attempt_timeout(config)

    async def connect() -> Connection:
        return await _connection_class.connect(
            config.dsn,
            autocommit=True,
            row_factory=dict_row,
            connect_timeout=per_host,
            application_name=config.application_name,
            keepalives=1,
            keepalives_idle=5,
            keepalives_interval=2,
            keepalives_count=3,
            options=startup_options(config),
        )

    budget = per_host * max(1, len(dsn_endpoints(config.dsn))) + 1
    try:
        with trio.fail_after(budget):
            conn: Connection = await run_on_loop(loop, connect())
    except trio.TooSlowError:
        raise DatabaseUnavailable(f"could not connect within {budget:g}s") from None
    except (psycopg.Error, OSError) as exc:
        raise translate(exc) from exc
    if not config.read_only and conn.info.parameter_status("in_hot_standby") == "on":
        # A proxy's stale route to a demoted primary, or a DSN without
        # target_session_attrs=read-write: every write would fail, so this is no primary.
        where = f"{conn.info.host}:{conn.info.port}"
        close_now(conn)
        raise DatabaseUnavailable(f"{where} is a standby (read-only): no primary reachable")
    return conn


# Server errors that mean the session or the server is going away (class 08 is the
# connection's own): admin_shutdown, crash_shutdown, cannot_connect_now.
_SERVER_GONE = frozenset({"57P01", "57P02", "57P03"})


def connection_lost(conn: Connection, exc: BaseException) -> bool:
    """Whether ``exc`` on ``conn`` means the link to the server is gone (so the pool's
    idle connections most likely are too), rather than an error the server answered
    with: a statement timeout (57014) or a lock timeout (55P03) is the latter."""
    if conn.closed or conn.broken:
        return True
    sqlstate = getattr(exc, "sqlstate", None)
    return sqlstate is None or sqlstate.startswith("08") or sqlstate in _SERVER_GONE


def close_now(conn: Connection) -> None:
    """Close without awaiting: libpq's finish() is local and does not block."""
    try:
        if not conn.closed:
            conn.pgconn.finish()
    except Exception:  # closing a broken connection may complain; it is gone either way
        log.debug("error while closing a connection", exc_info=True)


def looks_dead(conn: Connection) -> bool:
    """An idle connection with bytes to read has been told goodbye (or hit EOF)."""
    if conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        return True
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def with_params(dsn: str, **changes: Any) -> str:
    """``dsn`` with some connection parameters changed (database, user, password...)."""
    params = conninfo_to_dict(dsn)
    params.update(changes)
    return make_conninfo(**params)  # type: ignore[arg-type]
