"""What a test serves: the surfaces under test, where a BFF loads them from, and the
builder of their client DB.

The ``dataplane_surfaces`` fixture gives one of these, or a list of them:

* a :class:`~dataplane.Surface` or a :class:`~dataplane.SurfacePackage` object (the
  kit finds the ``module:attribute`` it is importable as, for the BFF's
  ``DATAPLANE_SURFACES``);
* a ``"package.module:attribute"`` string naming one;
* ``None``: every surface the installed packages register (the entry-point group
  ``dataplane.surfaces``), the default.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dataplane.core.errors import InvalidArgument
from dataplane.surfaces.manifest import Surface
from dataplane.surfaces.registry import DemoDbBuilder, SurfacePackage, load_registry

SurfacesSpec = Surface | SurfacePackage | str | Sequence[Surface | SurfacePackage | str] | None


@dataclass(frozen=True, slots=True)
class UnderTest:
    """The surfaces a test serves, by id."""

    surfaces: dict[str, Surface]
    modules: str | None  # DATAPLANE_SURFACES for the BFF; None: the entry points
    builders: tuple[DemoDbBuilder, ...]  # their packages' client-DB builders, in order

    def surface(self, which: Surface | str) -> Surface:
        """A surface under test, by object or by id; :class:`InvalidArgument` otherwise."""
        sid = which.id if isinstance(which, Surface) else which
        found = self.surfaces.get(sid)
        if found is None:
            known = ", ".join(sorted(self.surfaces)) or "none"
            raise InvalidArgument(
                f"surface {sid!r} is not under test (serving: {known}); "
                "name it in the dataplane_surfaces fixture"
            )
        return found

    @property
    def needs_client_db(self) -> bool:
        return any(s.needs_client_db for s in self.surfaces.values())


def under_test(spec: SurfacesSpec) -> UnderTest:
    """Resolve the ``dataplane_surfaces`` fixture's value."""
    if spec is None:
        registry = load_registry(probe_enabled=False)
        builders = tuple(build for _, build in registry.demo_db_builders())
        return UnderTest(registry.surfaces, None, builders)
    items: Iterable[Any] = (
        [spec] if isinstance(spec, Surface | SurfacePackage | str) else list(spec)
    )
    names = [item if isinstance(item, str) else import_name(item) for item in items]
    modules = ",".join(names)
    registry = load_registry(probe_enabled=False, modules=modules)
    builders = tuple(build for _, build in registry.demo_db_builders())
    if not builders:  # a bare Surface of a package that has a builder: use it
        installed = load_registry(probe_enabled=False)
        wanted = set(registry.surfaces)
        builders = tuple(
            build
            for package, build in installed.demo_db_builders()
            if wanted & {s.id for s in package.surfaces}
        )
    return UnderTest(registry.surfaces, modules, builders)


def import_name(value: Surface | SurfacePackage) -> str:
    """``module:attribute`` under which ``value`` is importable, found among the loaded
    modules (the one its test imported it from); :class:`InvalidArgument` if none."""
    if not isinstance(value, Surface | SurfacePackage):
        raise InvalidArgument(
            f"dataplane_surfaces: {value!r} is not a Surface, a SurfacePackage or a "
            "'package.module:attribute' string"
        )
    for module_name, module in list(sys.modules.items()):
        if module is None or module_name == "__main__":
            continue
        try:
            attributes = list(vars(module).items())
        except TypeError:
            continue
        for attribute, found in attributes:
            if found is value and not attribute.startswith("_"):
                return f"{module_name}:{attribute}"
    what = value.id if isinstance(value, Surface) else value.name
    raise InvalidArgument(
        f"dataplane_surfaces: {what!r} is not a public attribute of any imported module; "
        "name it as 'package.module:attribute'"
    )
