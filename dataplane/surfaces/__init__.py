"""The surfaces this build serves, by id."""

from __future__ import annotations

from dataplane.errors import ConfigError
from dataplane.manifest import Surface
from dataplane.surfaces import probe


def all_surfaces(*, probe_enabled: bool) -> dict[str, Surface]:
    """Every surface, ``probe`` only when enabled (``DATAPLANE_PROBE=1``)."""
    from dataplane.surfaces import demo

    found = {s.id: s for s in demo.SURFACES}
    if probe_enabled:
        found[probe.SURFACE.id] = probe.SURFACE
    return found


def surface_for_queue_type(queue_type: str, *, probe_enabled: bool) -> tuple[Surface, str]:
    """``surface-<id>`` or ``surface-<id>-dev`` -> (surface, suffix)."""
    if not queue_type.startswith("surface-"):
        raise ConfigError(
            f"SURFACE_QUEUE_TYPE must look like surface-<id>[-dev], got {queue_type!r}"
        )
    rest = queue_type.removeprefix("surface-")
    suffix = ""
    if rest.endswith("-dev"):
        rest, suffix = rest.removesuffix("-dev"), "-dev"
    surfaces = all_surfaces(probe_enabled=probe_enabled)
    if rest not in surfaces:
        known = ", ".join(sorted(surfaces))
        hint = " (set DATAPLANE_PROBE=1 for probe)" if rest == "probe" else ""
        raise ConfigError(f"unknown surface {rest!r} in SURFACE_QUEUE_TYPE{hint}; known: {known}")
    return surfaces[rest], suffix
