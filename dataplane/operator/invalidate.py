"""``dataplane invalidate TAG...``: drop cache entries by tag on every worker, and say
truthfully who will.

A worker holding ``DATAPLANE_NOTIFY_SECRET`` believes only an invalidation sealed with
one of its secrets, a worker without one only a plain tag
(:mod:`dataplane.worker.invalidations`). Each live worker's liveness row
(``maestro_workers``, :mod:`dataplane.worker.claims.liveness`) names the key ids of the
secrets it opens with, so before it sends, the command reads who is alive: when no live
worker would believe what it can send it sends nothing and exits 1 naming what to set;
when some would not, it sends, says how many will and why the others will not, and
exits 1; with no live worker it sends and says that no cache holds an entry. It runs as
any login that may read ``maestro_workers`` and connect (``pg_notify`` takes no
privilege): ``dataplane_operator``, the login ``dataplane dev`` prints.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dataplane.core.errors import ConfigError, DatabaseError
from dataplane.core.settings import from_env
from dataplane.db import Database, open_bridge, q
from dataplane.queue import QueueClient, QueueConfig, open_queue_database
from dataplane.queue.notices.seal import NotifySeal


def add_parser(sub: Any) -> None:
    """Add ``invalidate`` to the CLI's subparsers."""
    inv = sub.add_parser("invalidate", help="drop cache entries by tag on every worker")
    inv.add_argument("tags", nargs="+", help="tags such as c:acme or u:42")


async def run(args: argparse.Namespace) -> int:
    """Send the tags, sealed with ``DATAPLANE_NOTIFY_SECRET`` when set, and say how many
    live workers will drop their entries: none would, and nothing is sent (exit 1);
    some would not, and the line says so (exit 1)."""
    config = from_env(QueueConfig)
    async with open_bridge(), open_queue_database(config.url, "invalidate") as db:
        queue = QueueClient(db, config)
        try:
            live = await live_workers(db)
        except DatabaseError as exc:
            raise DatabaseError(
                f"cannot read which workers are alive ({exc}); nothing sent"
            ) from None
        deaf = [w for w in live if not believes(w, queue.seal)]
        if deaf and len(deaf) == len(live):
            raise ConfigError(f"{why_unheard(deaf, queue.seal)}; nothing sent")
        await queue.invalidate(*args.tags)
    sent = f"{len(args.tags)} tag(s)" + (" (sealed)" if queue.seal is not None else "")
    if not live:
        print(f"sent {sent}; no worker is alive, so no cache holds an entry to drop")
    elif deaf:
        print(
            f"dataplane invalidate: sent {sent}; {len(live) - len(deaf)} of {len(live)} live"
            f" worker(s) drop their entries, not the others: {why_unheard(deaf, queue.seal)}",
            file=sys.stderr,
        )
        return 1
    else:
        print(f"sent {sent}; {len(live)} live worker(s) drop their entries")
    return 0


@dataclass(frozen=True, slots=True)
class LiveWorker:
    worker_id: str
    type: str
    opens: tuple[str, ...] | None  # key ids of its notify secrets; None: it holds none


async def live_workers(db: Database) -> list[LiveWorker]:
    """The workers alive now (by their rows; a worker of an older release has none)."""
    rows = await db.fetchall(q("worker_live"))
    return [
        LiveWorker(r["worker_id"], r["type"], tuple(r["opens"]) if r["opens"] is not None else None)
        for r in rows
    ]


def believes(worker: LiveWorker, seal: NotifySeal | None) -> bool:
    """Whether ``worker`` drops the cache entries of an invalidation sent with ``seal``
    (:mod:`dataplane.worker.invalidations`): a worker with a notify secret only a tag
    sealed with one of its secrets, a worker without one only a plain tag."""
    if worker.opens is None:
        return seal is None
    return seal is not None and seal.key_id in worker.opens


def why_unheard(deaf: Sequence[LiveWorker], seal: NotifySeal | None) -> str:
    """Why the live workers ``deaf`` will not believe an invalidation sent with
    ``seal`` (:func:`believes`), in one line naming what to set."""
    if seal is None:
        return (
            f"{len(deaf)} live worker(s) believe only sealed invalidations and"
            " DATAPLANE_NOTIFY_SECRET is not set (set it to the workers' notify secret)"
        )
    plain = sum(w.opens is None for w in deaf)
    others = sorted({kid for w in deaf for kid in w.opens or ()})
    parts = []
    if len(deaf) > plain:
        parts.append(
            f"{len(deaf) - plain} live worker(s) open sealed invalidations with another notify"
            f" secret (key id {', '.join(others)}; DATAPLANE_NOTIFY_SECRET's is {seal.key_id})"
        )
    if plain:
        parts.append(
            f"{plain} live worker(s) hold no notify secret and believe only plain tags"
            " (unset DATAPLANE_NOTIFY_SECRET to reach them)"
        )
    return "; ".join(parts)
