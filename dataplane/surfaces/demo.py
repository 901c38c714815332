"""The demo LMS surfaces (users, learnerviews, accounting, skills)."""

from __future__ import annotations

from dataplane.surfaces import accounting, learnerviews, skills, users
from dataplane.surfaces.manifest import Surface

SURFACES: tuple[Surface, ...] = (
    users.SURFACE,
    learnerviews.SURFACE,
    accounting.SURFACE,
    skills.SURFACE,
)
