"""Surface entries for the registry's tests, loaded through DATAPLANE_SURFACES."""

from __future__ import annotations

from typing import Any

from dataplane import Operation, OperationContext, surface

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}}


async def answer(ctx: OperationContext) -> Any:
    return {"n": ctx.params.get("n")}


GOOD = surface(Operation("get", 1, SCHEMA, answer), id="good", needs_client_db=False)
TWIN = surface(Operation("get", 1, SCHEMA, answer), id="good", needs_client_db=False)
NOT_A_SURFACE = {"id": "nope"}
