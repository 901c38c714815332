"""The audit trail: one ``dataplane_audit`` row per operator action (migration 0017).

An action runs its statements and :func:`record` in one transaction (pass the action's
connection), so a change always has its row and a failed action leaves none. The
actor is who the action was verified to come from: the console's bearer (its ``sub``,
and email when it has one), or the CLI's OS user (``cli:<user>``); never a claim a
request body makes.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from dataplane.core.errors import InvalidArgument
from dataplane.db import Connection, Database, q

Via = Literal["console", "cli"]
ACTIONS = ("retry", "discard", "pause", "resume", "cancel")
MAX_ACTOR_CHARS = 320
MAX_AUDIT_ID = 2**63 - 1  # dataplane_audit.id is a bigint


@dataclass(frozen=True, slots=True)
class Operator:
    """Who acts, and through what."""

    actor: str
    via: Via

    def __post_init__(self) -> None:
        if not self.actor or len(self.actor) > MAX_ACTOR_CHARS:
            raise InvalidArgument(f"an actor is 1 to {MAX_ACTOR_CHARS} characters")
        if self.via not in ("console", "cli"):
            raise InvalidArgument(f"via is console or cli, got {self.via!r}")

    @classmethod
    def cli(cls) -> Operator:
        """The CLI's operator: the OS user running it."""
        try:
            user = getpass.getuser()
        except (KeyError, OSError):  # no name for this uid (a container's)
            user = "unknown"
        return cls(f"cli:{user}", "cli")


@dataclass(frozen=True, slots=True)
class AuditRow:
    id: int
    at: datetime
    actor: str
    via: str
    action: str
    target: dict[str, Any]
    rows: int

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at.isoformat(),
            "actor": self.actor,
            "via": self.via,
            "action": self.action,
            "target": self.target,
            "rows": self.rows,
        }


async def record(
    conn: Connection, operator: Operator, action: str, target: Mapping[str, Any], rows: int
) -> int:
    """Append the action's row on ``conn`` (the action's own transaction); its id."""
    if action not in ACTIONS:
        raise InvalidArgument(f"action must be one of {', '.join(ACTIONS)}, got {action!r}")
    cur = await conn.execute(
        q("audit_insert"),
        {
            "actor": operator.actor,
            "via": operator.via,
            "action": action,
            "target": json.dumps(dict(target), sort_keys=True, default=str),
            "rows": rows,
        },
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row["id"])


async def list_audit(
    db: Database, *, limit: int = 100, before: int | None = None
) -> list[AuditRow]:
    """The newest actions first, ``limit`` of them, older than id ``before`` (keyset;
    an id is 1..:data:`MAX_AUDIT_ID`, a bigint)."""
    if not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise InvalidArgument(f"limit must be in 1..1000, got {limit!r}")
    if before is not None and (not isinstance(before, int) or not 1 <= before <= MAX_AUDIT_ID):
        raise InvalidArgument(f"before is an audit row's id, 1..{MAX_AUDIT_ID}, got {before!r}")
    rows = await db.fetchall(q("audit_list"), {"limit": limit, "before": before})
    return [AuditRow(**{k: row[k] for k in AuditRow.__dataclass_fields__}) for row in rows]
