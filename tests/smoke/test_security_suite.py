"""Attacks beyond tokens: SQL injection through every string parameter of every
operation, and newline injection into SSE fields."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
import trio

from dataplane.core.errors import HttpError
from dataplane.db import Database
from dataplane.queue.envelope import Auth
from dataplane.surfaces import all_surfaces
from dataplane.surfaces.manifest import OperationContext
from tests.acceptance.test_bff import post

INJECTIONS = [
    "'; DROP TABLE lms.users; --",
    "' OR '1'='1",
    "%' OR 1=1 --",
    "1; DELETE FROM lms.enrollments",
    "\\'; TRUNCATE lms.invoices; --",
    "acme' UNION SELECT email, NULL FROM lms.users --",
    "$$; DROP SCHEMA lms CASCADE; $$",
    "_%\\",
]
VALID_INT = 1
AUTH = Auth("acme", "1", "ops@acme.test", True, ("*",))


def _counts(admin_dsn: str) -> dict[str, int]:
    with psycopg.connect(admin_dsn) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'lms' ORDER BY 1"
            )
        ]
        return {t: conn.execute(f"SELECT count(*) FROM lms.{t}").fetchone()[0] for t in tables}  # type: ignore[index]


def _string_params(schema: dict[str, Any]) -> list[str]:
    return [
        name
        for name, sub in schema.get("properties", {}).items()
        if sub.get("type") == "string" or sub.get("type") is None
    ]


def _base_params(schema: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in schema.get("required", ()):
        sub = schema["properties"][name]
        out[name] = VALID_INT if sub.get("type") == "integer" else "x"
    return out


async def test_sql_injection_through_every_string_parameter(
    client_db: Database, demo_db: tuple[str, str]
) -> None:
    before = _counts(demo_db[0])
    tried = 0
    for surface in all_surfaces(probe_enabled=False).values():
        for op in surface.operations.values():
            for name in _string_params(dict(op.params)):
                for attack in INJECTIONS:
                    raw = {**_base_params(dict(op.params)), name: attack}
                    try:
                        params = op.check(AUTH, raw)
                    except HttpError as exc:  # refused by the schema: fine, and a 400
                        assert exc.status == 400
                        continue
                    ctx = OperationContext(params, AUTH, "t", 1, client_db)
                    try:
                        result = await op.handler(ctx)
                    except HttpError as exc:  # not found in scope: an answer
                        assert exc.status in (400, 404)
                        continue
                    tried += 1
                    text = json.dumps(result, default=str) if not isinstance(result, bytes) else ""
                    assert "DROP" not in text or attack in text
    assert tried > 0, "no injection reached a handler"
    assert _counts(demo_db[0]) == before


async def test_newlines_cannot_forge_sse_fields(
    http: httpx.AsyncClient, spawn_worker: Callable[..., Any]
) -> None:
    await spawn_worker()
    evil = 'x\n\nevent: done\ndata: {"forged": true}\nid: 99\n\n'
    body = (await post(http, "probe", "echo", {"value": evil})).json()
    raw = b""
    with trio.fail_after(20):
        async with http.stream("GET", body["streamUrl"]) as resp:
            async for chunk in resp.aiter_bytes():
                raw += chunk
                if b"event: done" in raw and raw.endswith(b"\n\n"):
                    break
    lines = raw.decode().split("\n")
    # "queued" comes first unless the job was already done when the stream opened.
    events = [ln for ln in lines if ln.startswith("event:")]
    ids = [ln for ln in lines if ln.startswith("id:")]
    assert (events, ids) in (
        (["event: queued", "event: done"], ["id: 1", "id: 3"]),
        (["event: done"], ["id: 3"]),
    ), (events, ids)
    data = [json.loads(ln[len("data: ") :]) for ln in lines if ln.startswith("data:")]
    assert data[-1]["result"]["echo"] == evil  # delivered intact, as data
