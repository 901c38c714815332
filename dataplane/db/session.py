"""The boot check that a DSN gives real sessions: LISTEN works through it.

The BFF's reply pump and each worker hold one ``LISTEN`` connection, which needs
the server session to stay with the client between transactions: Postgres
directly, or a *session*-pooling PgBouncer. Behind transaction (or statement)
pooling, ``LISTEN`` runs on whichever server connection the transaction got, that
connection goes back to the pool, and notifications never reach the listener —
silently. So, at boot, :func:`require_session_pooling` makes one round trip the way
the plane relies on it: connection A listens on a fresh channel and goes idle,
connection B notifies it, and A must hear it within a bound. Two short-lived
connections and a few milliseconds when it holds; ``within`` seconds when it does not.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import psycopg
import trio
from psycopg import sql as pgsql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dataplane.core.errors import ConfigError, DatabaseUnavailable
from dataplane.db.bridge import current_loop, run_on_loop
from dataplane.db.connection import (
    Connection,
    DatabaseConfig,
    close_now,
    connect,
    dsn_endpoints,
    translate,
)
from dataplane.db.sql import q

log = logging.getLogger(__name__)

SESSION_CHECK_TIMEOUT = 3.0  # seconds the notify may take to come back
SESSION_CHECK_RETRY_DELAYS = (2.0, 5.0)  # database unreachable: retry after 2 s, then every 5 s
CHANNEL_PREFIX = "dataplane_session_check_"


async def require_session_pooling(
    config: DatabaseConfig, *, loop: Any = None, within: float = SESSION_CHECK_TIMEOUT
) -> None:
    """Return when a notify from one connection reaches another, idle, connection.

    Raises :class:`ConfigError` (one line, naming transaction pooling) when it does
    not arrive within ``within`` seconds; :class:`DatabaseUnavailable` when the database
    cannot be reached or a statement fails to run within the config's call timeout.
    """
    loop = loop if loop is not None else current_loop()
    channel = CHANNEL_PREFIX + secrets.token_hex(8)
    listening = await connect(config, loop)
    try:
        sender = await connect(same_server(config, listening), loop)
        try:
            with trio.fail_after(config.call_timeout):
                listen = pgsql.SQL(q("listen")).format(channel=pgsql.Identifier(channel))
                await run_on_loop(loop, listening.execute(listen))
                notify = {"channel": channel, "payload": "session check"}
                await run_on_loop(loop, sender.execute(q("notify_send"), notify))
            heard = await run_on_loop(loop, _heard(listening, channel, within))
        except trio.TooSlowError:
            raise DatabaseUnavailable("the session check timed out") from None
        except (psycopg.Error, OSError) as exc:
            raise translate(exc) from exc
        finally:
            close_now(sender)
    finally:
        close_now(listening)
    if not heard:
        raise ConfigError(
            f"LISTEN does not work through {_where(config.dsn)}: a notify did not reach an idle "
            f"session within {within:g}s (a transaction-pooling PgBouncer?); point it at "
            "Postgres directly or at a session-pooling PgBouncer"
        )


async def wait_session_pooling(
    config: DatabaseConfig,
    *,
    loop: Any = None,
    within: float = SESSION_CHECK_TIMEOUT,
    retry_delays: Sequence[float] = SESSION_CHECK_RETRY_DELAYS,
) -> None:
    """:func:`require_session_pooling`, retried while the database is unreachable."""
    failures = 0
    while True:
        try:
            await require_session_pooling(config, loop=loop, within=within)
            return
        except DatabaseUnavailable as exc:
            delay = retry_delays[min(failures, len(retry_delays) - 1)]
            failures += 1
            log.warning("session check: %s; retrying in %gs", exc, delay)
            await trio.sleep(delay)


async def _heard(conn: Connection, channel: str, within: float) -> bool:
    """asyncio side: whether ``channel`` is notified within ``within`` seconds."""
    async for note in conn.notifies(timeout=within):
        if note.channel == channel:
            return True
    return False


def _where(dsn: str) -> str:
    """host:port of each server a DSN names, for the message (never its password)."""
    return ", ".join(dsn_endpoints(dsn)) or "this DSN"


def same_server(config: DatabaseConfig, conn: Connection) -> DatabaseConfig:
    """``config`` aimed at the one server ``conn`` reached: with a multi-host DSN (and
    libpq's ``load_balance_hosts=random``) a second connection could reach another
    server, where the first one's LISTEN is not, and the check would blame pooling."""
    if len(dsn_endpoints(config.dsn)) < 2:
        return config
    params = conninfo_to_dict(config.dsn)
    params.pop("hostaddr", None)
    params.pop("load_balance_hosts", None)
    params.update(host=conn.info.host, port=str(conn.info.port))
    return replace(config, dsn=make_conninfo(**params))  # type: ignore[arg-type]
