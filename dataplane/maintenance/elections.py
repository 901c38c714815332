"""Elections held in a row of ``dataplane_elections``, not in an advisory lock.

An advisory lock needs no privilege: any role that may connect to the queue DB could
take the maintenance lock and hold it, and maintenance would stop everywhere without a
word. A row of ``dataplane_elections`` is written only by the plane's roles (PUBLIC
holds no privilege on it), so only the plane can lead.

An election names one job of the fleet: today one, ``maintenance``, whose holder leads
every service of this room (:mod:`dataplane.maintenance.leader`). Its holder keeps it
for a term (:func:`take` with ``seconds``) and renews it before the term ends (a
renewal never shortens the term; :func:`hold_on` sets it); anyone takes it once the
term has lapsed (a crashed holder hands over when its term ends), or at once when the
holder steps down (:func:`release`). Each contender names itself with
:func:`new_holder` (host, process, a random suffix): two contenders of one process are
two holders.
"""

from __future__ import annotations

import os
import secrets
import socket

from dataplane.db import Connection, Database, q

MAINTENANCE = "maintenance"


def new_holder() -> str:
    """A contender's name: unique per contender, readable in the table."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def _params(name: str, holder: str, seconds: float = 0.0) -> dict[str, object]:
    return {"name": name, "holder": holder, "seconds": seconds}


async def take(db: Database, name: str, holder: str, seconds: float) -> bool:
    """Take or renew ``name`` for ``seconds``: whether ``holder`` holds it now."""
    return await db.fetchone(q("election_take"), _params(name, holder, seconds)) is not None


async def release(db: Database, name: str, holder: str) -> None:
    """Step down from ``name`` (nothing when ``holder`` does not hold it)."""
    await db.execute(q("election_release"), _params(name, holder))


async def take_on(conn: Connection, name: str, holder: str, seconds: float) -> bool:
    """:func:`take` on a connection (asyncio side, inside :meth:`Database.run`)."""
    cur = await conn.execute(q("election_take"), _params(name, holder, seconds))
    return await cur.fetchone() is not None


async def release_on(conn: Connection, name: str, holder: str) -> None:
    """:func:`release` on a connection (asyncio side)."""
    await conn.execute(q("election_release"), _params(name, holder))


async def hold_on(conn: Connection, name: str, holder: str, seconds: float) -> bool:
    """Set ``holder``'s term of ``name`` to ``seconds`` from now, shorter or longer:
    whether it still held it (asyncio side)."""
    cur = await conn.execute(q("election_hold"), _params(name, holder, seconds))
    return await cur.fetchone() is not None
