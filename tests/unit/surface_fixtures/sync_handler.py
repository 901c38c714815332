"""A surface package whose declaration cannot work: refused when loaded."""

from __future__ import annotations

from typing import Any

from dataplane import Operation, OperationContext, surface
from tests.unit.surface_fixtures import SCHEMA


def handler(ctx: OperationContext) -> Any:
    return {}


SURFACE = surface(Operation("get", 1, SCHEMA, handler), id="sync")  # type: ignore[arg-type]
