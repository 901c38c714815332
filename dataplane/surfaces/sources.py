"""Where a surface's own code lives: the files a failed attempt's traceback marks.

A surface's sources are the directories of the top-level packages its handlers come
from (an editable install's source tree, or the package's directory in site-packages);
a handler of the plane's own package (``probe``) brings only its module's file, so the
plane's other frames are never taken for the surface's. ``dataplane dev --reload``
watches the same package directories (:func:`package_dirs`).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataplane.surfaces.manifest import Surface

PLANE = "dataplane"  # the plane's own top-level package: never a surface package


def _module_of(handler: Callable[..., Any]) -> str:
    """The module a handler is defined in (a ``functools.partial``'s function's; a
    callable object's class's)."""
    target = getattr(handler, "func", handler)
    module = getattr(target, "__module__", None)
    if not isinstance(module, str) or module == "functools":
        module = type(target).__module__
    return module


def package_dirs(handler: Callable[..., Any]) -> list[Path]:
    """The directories of the top-level package ``handler`` comes from; none for the
    plane's own package or a module not imported."""
    top = _module_of(handler).partition(".")[0]
    module = sys.modules.get(top)
    if not top or top == PLANE or module is None:
        return []
    paths = list(getattr(module, "__path__", ())) or [str(Path(module.__file__ or "").parent)]
    return [Path(path).resolve() for path in paths]


@dataclass(frozen=True, slots=True)
class SurfaceSources:
    """The surface's directories and single files, each with the directory its shown
    name is relative to (where the import system finds it: ``pkg/handlers.py``)."""

    roots: tuple[tuple[Path, Path], ...] = ()  # (directory, the base of its shown names)
    files: tuple[tuple[Path, Path], ...] = ()  # (module file, the base of its shown name)

    def shown(self, filename: str) -> str | None:
        """``filename`` relative to its base when it is the surface's, else None."""
        path = _resolved(filename)
        if path is None:
            return None
        for file, base in self.files:
            if path == file:
                return path.relative_to(base).as_posix()
        for root, base in self.roots:
            if path.is_relative_to(root):
                return path.relative_to(base).as_posix()
        return None


def surface_sources(surface: Surface) -> SurfaceSources:
    """Where ``surface``'s handlers are defined (see the module docstring)."""
    roots: dict[Path, Path] = {}
    files: dict[Path, Path] = {}
    for op in surface.versions.values():
        name = _module_of(op.handler)
        if name.partition(".")[0] != PLANE:
            for path in package_dirs(op.handler):
                roots.setdefault(path, path.parent)
            continue
        filename = getattr(sys.modules.get(name), "__file__", None)
        if filename:
            plane = Path(sys.modules[PLANE].__file__ or "").resolve().parent
            files.setdefault(Path(filename).resolve(), plane.parent)
    return SurfaceSources(tuple(roots.items()), tuple(files.items()))


@functools.lru_cache(maxsize=1024)
def _resolved(filename: str) -> Path | None:
    """A frame's file as an absolute path without links (``<string>``: None)."""
    if not filename or filename.startswith("<"):
        return None
    try:
        return Path(filename).resolve()
    except (OSError, RuntimeError):
        return None
