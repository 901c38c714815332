"""The surface registry: what this installation serves, found the same way by the BFF,
the workers, ``/openapi.json``, ``dataplane surfaces`` and ``dataplane dev``.

Surfaces come from the entry-point group ``dataplane.surfaces`` (a package declares
``[project.entry-points."dataplane.surfaces"] lms = "dataplane_lms:PACKAGE"``), or,
when ``DATAPLANE_SURFACES=pkg.module:attr,...`` is set, from exactly those objects
instead. An entry is a :class:`Surface`, a sequence of them, or a
:class:`SurfacePackage` (surfaces plus, optionally, the builder of the demo
client DB they read). The built-in ``probe`` surface is added when enabled.

Refused at load, one line naming the entry and the problem
(:class:`~dataplane.core.errors.ConfigError`): an entry that cannot be imported or is
not a surface, two surfaces with one id, and whatever :class:`Operation` refuses
(an unknown gate, a schema that does not compile, a handler that is not async).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from dataplane.core.errors import ConfigError, DataPlaneError
from dataplane.surfaces import probe
from dataplane.surfaces.manifest import Surface

ENTRY_POINT_GROUP = "dataplane.surfaces"
BUILTIN = "dataplane (built in)"

#: ``async (admin_dsn, *, progress) -> read-only DSN`` of a package's demo client DB.
DemoDbBuilder = Callable[..., Awaitable[str]]


@dataclass(frozen=True, slots=True)
class SurfacePackage:
    """What a surface package registers: its surfaces, and optionally its demo DB."""

    name: str
    surfaces: Sequence[Surface]
    build_demo_db: DemoDbBuilder | None = None
    description: str = ""


@dataclass(frozen=True, slots=True)
class Registered:
    """One loaded surface and where it came from."""

    surface: Surface
    origin: str  # "lms = dataplane_lms:PACKAGE (dataplane-lms 0.1.0)", or BUILTIN
    package: SurfacePackage | None = None


@dataclass(frozen=True, slots=True)
class Registry:
    entries: dict[str, Registered] = field(default_factory=dict)

    @property
    def surfaces(self) -> dict[str, Surface]:
        return {sid: entry.surface for sid, entry in self.entries.items()}

    def demo_db_builders(self) -> list[tuple[SurfacePackage, DemoDbBuilder]]:
        """Each package's demo-DB builder, once per package."""
        seen: dict[str, tuple[SurfacePackage, DemoDbBuilder]] = {}
        for entry in self.entries.values():
            package = entry.package
            if package is not None and package.build_demo_db is not None:
                seen.setdefault(package.name, (package, package.build_demo_db))
        return list(seen.values())


def _load_object(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"DATAPLANE_SURFACES entry {spec!r} must look like pkg.module:attr")
    try:
        value: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"surface entry {spec}: cannot load it: {exc}") from None
    return value


def _sources(modules: str | None) -> Iterable[tuple[str, Callable[[], Any]]]:
    if modules is not None:
        for spec in (s.strip() for s in modules.split(",")):
            if spec:
                yield f"{spec} (DATAPLANE_SURFACES)", functools.partial(_load_object, spec)
        return
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = f" ({ep.dist.name} {ep.dist.version})" if ep.dist is not None else ""
        yield f"{ep.name} = {ep.value}{dist}", ep.load


def _surfaces_of(value: Any, origin: str) -> tuple[list[Surface], SurfacePackage | None]:
    if isinstance(value, SurfacePackage):
        return list(value.surfaces), value
    if isinstance(value, Surface):
        return [value], None
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        items = list(value)
        if items and all(isinstance(s, Surface) for s in items):
            return items, None
    raise ConfigError(
        f"surface entry {origin}: {type(value).__name__} is not a Surface, a list of "
        "surfaces or a SurfacePackage"
    )


@functools.lru_cache(maxsize=8)
def load_registry(*, probe_enabled: bool, modules: str | None = None) -> Registry:
    """Every registered surface (``probe`` when enabled); refused with one line."""
    entries: dict[str, Registered] = {}
    if probe_enabled:
        entries[probe.SURFACE.id] = Registered(probe.SURFACE, BUILTIN)
    for origin, load in _sources(modules):
        try:
            value = load()
        except ConfigError:
            raise
        except DataPlaneError as exc:  # an Operation or Surface refused its declaration
            raise ConfigError(f"surface entry {origin}: {exc}") from None
        except Exception as exc:
            raise ConfigError(f"surface entry {origin}: cannot load it: {exc!r}") from None
        surfaces, package = _surfaces_of(value, origin)
        for surface in surfaces:
            if surface.id in entries:
                raise ConfigError(
                    f"surface entry {origin}: surface id {surface.id!r} is already "
                    f"registered by {entries[surface.id].origin}"
                )
            entries[surface.id] = Registered(surface, origin, package)
    return Registry(entries)
