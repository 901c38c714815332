"""Surfaces: what the plane serves, and the registry both the BFF and the worker read.

* :mod:`~dataplane.surfaces.manifest`: how a surface and its operations are declared
  (parameter schema, ttl, gates, cache tags, handler);
* :mod:`~dataplane.surfaces.probe`: the built-in synthetic-check surface;
* :mod:`~dataplane.surfaces.demo`: the demo LMS surfaces and their client DB
  (:mod:`~dataplane.surfaces.demo_db`).
"""

from __future__ import annotations

from dataclasses import dataclass

from dataplane.config import setting
from dataplane.errors import ConfigError, InvalidArgument
from dataplane.queue import QueueType
from dataplane.surfaces import probe
from dataplane.surfaces.manifest import Surface


@dataclass(frozen=True, slots=True)
class SurfacesConfig:
    probe_enabled: bool = setting("DATAPLANE_PROBE", False)


def all_surfaces(*, probe_enabled: bool) -> dict[str, Surface]:
    """Every surface, ``probe`` only when enabled (``DATAPLANE_PROBE=1``)."""
    from dataplane.surfaces import demo

    found = {s.id: s for s in demo.SURFACES}
    if probe_enabled:
        found[probe.SURFACE.id] = probe.SURFACE
    return found


def surface_for_queue_type(queue_type: str, *, probe_enabled: bool) -> tuple[Surface, QueueType]:
    """``surface-<id>`` or ``surface-<id>-dev`` -> (its surface, the parsed type)."""
    try:
        parsed = QueueType.parse(queue_type)
    except InvalidArgument:
        raise ConfigError(
            f"SURFACE_QUEUE_TYPE must look like surface-<id>[-dev], got {queue_type!r}"
        ) from None
    surfaces = all_surfaces(probe_enabled=probe_enabled)
    if parsed.surface not in surfaces:
        known = ", ".join(sorted(surfaces))
        hint = " (set DATAPLANE_PROBE=1 for probe)" if parsed.surface == "probe" else ""
        raise ConfigError(
            f"unknown surface {parsed.surface!r} in SURFACE_QUEUE_TYPE{hint}; known: {known}"
        )
    return surfaces[parsed.surface], parsed
