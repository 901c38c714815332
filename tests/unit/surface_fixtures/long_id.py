"""A surface whose id is too long for its dev tier's wake channel (refused at load)."""

from __future__ import annotations

from dataplane import Operation, surface
from tests.unit.surface_fixtures import SCHEMA, answer

SURFACE = surface(Operation("get", 1, SCHEMA, answer), id="x" * 43, needs_client_db=False)
