"""The demo LMS surfaces (users, learnerviews, accounting, skills)."""

from __future__ import annotations

from dataplane.manifest import Surface
from dataplane.surfaces import accounting, learnerviews, skills, users

SURFACES: tuple[Surface, ...] = (
    users.SURFACE,
    learnerviews.SURFACE,
    accounting.SURFACE,
    skills.SURFACE,
)
"""The surfaces this build serves, by id."""
