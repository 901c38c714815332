"""A surface package whose declaration cannot work: refused when loaded."""

from __future__ import annotations

from dataplane import Operation, surface
from tests.unit.surface_fixtures import answer

BAD = {"type": "object", "properties": {"n": {"type": "intgr"}}}
SURFACE = surface(Operation("get", 1, BAD, answer), id="schemas")
