"""The audit trail (issue #41): an action's row commits with the action or not at all,
is read newest first with keyset paging, and the operator role may append and read it
but never change it."""

from __future__ import annotations

from typing import Any

import pytest

from dataplane.core.errors import DatabaseError, InvalidArgument
from dataplane.db import Connection, Database
from dataplane.operator import Operator, list_audit, record


async def test_an_action_s_row_commits_with_it_and_reads_newest_first(db: Database) -> None:
    ops = Operator("ops@acme.example", "console")

    async def act(conn: Connection, n: int) -> int:
        async with conn.transaction():
            return await record(conn, ops, "retry", {"status": "poison", "n": n}, n)

    ids = [await db.run(act, n) for n in range(3)]
    rows = await list_audit(db)
    assert [r.id for r in rows] == ids[::-1]
    assert rows[0].target == {"status": "poison", "n": 2} and rows[0].rows == 2
    assert rows[0].actor == "ops@acme.example" and rows[0].via == "console"
    assert [r.id for r in await list_audit(db, limit=1, before=ids[2])] == [ids[1]]
    assert rows[0].to_json()["action"] == "retry"


async def test_a_failed_action_leaves_no_row(db: Database) -> None:
    async def fails(conn: Connection) -> Any:
        async with conn.transaction():
            await record(conn, Operator.cli(), "discard", {"type": "surface-probe"}, 5)
            await conn.execute("SELECT 1 / 0")

    with pytest.raises(DatabaseError):
        await db.run(fails)
    assert await list_audit(db) == []


def test_an_operator_and_an_action_are_checked() -> None:
    assert Operator.cli().actor.startswith("cli:") and Operator.cli().via == "cli"
    with pytest.raises(InvalidArgument):
        Operator("", "console")
    with pytest.raises(InvalidArgument):
        Operator("x", "email")  # type: ignore[arg-type]


async def test_an_unknown_action_is_refused_before_any_write(db: Database) -> None:
    async def unknown(conn: Connection) -> Any:
        return await record(conn, Operator.cli(), "drop", {}, 0)

    with pytest.raises(InvalidArgument):
        await db.run(unknown)
    assert await list_audit(db) == []


async def test_a_keyset_id_a_bigint_cannot_hold_is_refused_before_the_read(db: Database) -> None:
    for before in (0, -1, 2**63):  # Postgres would refuse 2**63: a 503, not a 400
        with pytest.raises(InvalidArgument, match="before"):
            await list_audit(db, before=before)
    assert await list_audit(db, before=2**63 - 1) == []
