"""The demo LMS surfaces (users, learnerviews, accounting, skills)."""

from __future__ import annotations

from dataplane.manifest import Surface

SURFACES: tuple[Surface, ...] = ()
