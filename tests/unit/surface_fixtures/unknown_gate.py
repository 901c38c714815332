"""A surface package whose declaration cannot work: refused when loaded."""

from __future__ import annotations

from dataplane import Operation, surface
from tests.unit.surface_fixtures import SCHEMA, answer

SURFACE = surface(Operation("get", 1, SCHEMA, answer, gates=("wizard",)), id="gated")
