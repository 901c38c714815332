"""``dataplane dev --reload``: a saved file of a surface package restarts what serves it.

The directories of the packages the registered surfaces come from (an editable
install's source tree; the plane's own ``probe`` is not watched) are watched with
watchfiles. A change restarts the workers of the surfaces that package declares, at
once (no backoff; Postgres stays up, the rows in flight are re-driven by their lease or
handed back on SIGTERM). The BFF validates parameters and publishes ``/openapi.json``
from the same declarations: it restarts too when what it serves changed, told by a
fingerprint of the OpenAPI document that a fresh interpreter loads from the new code
(a waiting browser's stream is cut and reconnects). Code that no longer loads is
logged and left to the workers' restart backoff; the BFF keeps the last that did.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import trio

from dataplane.dev.children import Child
from dataplane.surfaces.manifest import Surface
from dataplane.surfaces.sources import package_dirs as handler_package_dirs

log = logging.getLogger("dataplane.dev")

DEBOUNCE_MS = 100  # changes within this are one (an editor writes a file in steps)
FINGERPRINT_SECONDS = 30.0  # a fresh interpreter loading the surfaces, at most
_FINGERPRINT = """
import hashlib, json
from dataplane.bff.openapi import openapi_document
from dataplane.core.settings import from_env
from dataplane.surfaces import SurfacesConfig
surfaces = from_env(SurfacesConfig, probe_enabled=True).registry().surfaces
doc = json.dumps(openapi_document(surfaces), sort_keys=True, default=str)
print(hashlib.sha256(doc.encode()).hexdigest())
"""


def package_dirs(surfaces: Mapping[str, Surface]) -> dict[Path, set[str]]:
    """The directory of each package the surfaces' handlers come from -> its surface ids
    (the plane's own package is not a surface package: not watched)."""
    dirs: dict[Path, set[str]] = {}
    for sid, surface in surfaces.items():
        for op in surface.versions.values():
            for path in handler_package_dirs(op.handler):
                dirs.setdefault(path, set()).add(sid)
    return dirs


def affected(changed: Iterable[str], dirs: Mapping[Path, set[str]]) -> set[str]:
    """The surface ids whose package holds one of the ``changed`` paths."""
    ids: set[str] = set()
    for name in changed:
        path = Path(name).resolve()
        for root, sids in dirs.items():
            if path.is_relative_to(root):
                ids |= sids
    return ids


async def fingerprint(env: Mapping[str, str]) -> str | None:
    """What the BFF would serve from the code as it is now (None: it does not load)."""
    with trio.move_on_after(FINGERPRINT_SECONDS):
        done = await trio.run_process(
            [sys.executable, "-c", _FINGERPRINT],
            env=dict(env),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        if done.returncode == 0:
            return done.stdout.decode().strip()
        last = (done.stderr.decode().strip().splitlines() or ["?"])[-1]
        log.warning("reload: the surfaces do not load (%s); the BFF keeps the last code", last)
    return None


async def reload_on_change(
    children: Sequence[Child], surfaces: Mapping[str, Surface], env: Mapping[str, str]
) -> None:
    """Watch the surface packages until cancelled; restart what a change concerns."""
    from watchfiles import awatch  # the dev extra: imported by --reload only

    dirs = package_dirs(surfaces)
    if not dirs:
        log.warning("reload: no surface package outside the plane to watch")
        return
    by_name = {child.name: child for child in children}
    served = await fingerprint(env)
    log.info("reload: watching %s", ", ".join(str(d) for d in sorted(dirs)))
    async for changes in awatch(*dirs, debounce=DEBOUNCE_MS, step=20):
        ids = affected((path for _, path in changes), dirs)
        for sid in sorted(ids):
            worker = by_name.get(f"worker-{sid}")
            if worker is not None:
                worker.restart(f"{sid}'s code changed")
        now = await fingerprint(env)
        if now is not None and now != served and "bff" in by_name:
            served = now
            by_name["bff"].restart("what it serves changed (schemas, operations, gates)")
