"""Surfaces: what the plane serves, and the registry both the BFF and the worker read.

* :mod:`~dataplane.surfaces.gates`: checks of the caller against a request (403);
* :mod:`~dataplane.surfaces.manifest`: the public API a surface package declares its
  surface with (re-exported from :mod:`dataplane`);
* :mod:`~dataplane.surfaces.registry`: surfaces found through the entry-point group
  ``dataplane.surfaces`` (or ``DATAPLANE_SURFACES``);
* :mod:`~dataplane.surfaces.probe`: the built-in synthetic-check surface;
* :mod:`~dataplane.surfaces.scaffold`: ``dataplane new-surface``.

The demo LMS surfaces are a package of their own, ``examples/lms`` (``dataplane-lms``).
"""

from __future__ import annotations

from dataclasses import dataclass

from dataplane.core.errors import ConfigError, InvalidArgument
from dataplane.core.settings import setting
from dataplane.queue import QueueType
from dataplane.surfaces.manifest import Surface
from dataplane.surfaces.registry import Registry, load_registry


@dataclass(frozen=True, slots=True)
class SurfacesConfig:
    probe_enabled: bool = setting("DATAPLANE_PROBE", False)
    modules: str | None = setting("DATAPLANE_SURFACES", None)  # pkg.module:attr,...

    def registry(self) -> Registry:
        return load_registry(probe_enabled=self.probe_enabled, modules=self.modules)


def all_surfaces(*, probe_enabled: bool, modules: str | None = None) -> dict[str, Surface]:
    """Every registered surface, ``probe`` only when enabled (``DATAPLANE_PROBE=1``)."""
    return load_registry(probe_enabled=probe_enabled, modules=modules).surfaces


def surface_for_queue_type(
    queue_type: str, config: SurfacesConfig | None = None, *, probe_enabled: bool | None = None
) -> tuple[Surface, QueueType]:
    """``surface-<id>`` or ``surface-<id>-dev`` -> (its surface, the parsed type)."""
    if config is None:
        config = SurfacesConfig(probe_enabled=bool(probe_enabled))
    try:
        parsed = QueueType.parse(queue_type)
    except InvalidArgument:
        raise ConfigError(
            f"SURFACE_QUEUE_TYPE must look like surface-<id>[-dev], got {queue_type!r}"
        ) from None
    surfaces = config.registry().surfaces
    if parsed.surface not in surfaces:
        known = ", ".join(sorted(surfaces)) or "none"
        hint = " (set DATAPLANE_PROBE=1 for probe)" if parsed.surface == "probe" else ""
        raise ConfigError(
            f"unknown surface {parsed.surface!r} in SURFACE_QUEUE_TYPE{hint}; known: {known} "
            "(install the package that provides it, or name it in DATAPLANE_SURFACES)"
        )
    return surfaces[parsed.surface], parsed
