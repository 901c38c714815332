"""The BFF's routes around the plane (the plane's own are :mod:`dataplane.bff.routes`)::

    GET /healthz        alive: 200, or 503 once the plane keeps failing (restart it)
    GET /readyz         ready: the plane serves, its pump listens, the queue DB answers
                        (and, with DATAPLANE_READY_NEEDS_WORKERS=1, every surface has
                        had a worker)
    GET /metrics        Prometheus text (DATAPLANE_METRICS=1; DATAPLANE_METRICS_TOKEN)
    GET /openapi.json   the OpenAPI document of every installed surface
    GET /  /static/<name>   the demo page and its files (DATAPLANE_PROBE=1 for ``/``)

They answer whether or not the plane is serving: none of them needs the queue but
``/readyz``, which bounds its check by :data:`READY_TIMEOUT`. ``/static/<name>`` serves
only the files listed at import (:func:`_static_files`): a request's name is looked up,
never joined to a path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
from quart import Blueprint, Response

from dataplane.bff.openapi import openapi_document
from dataplane.bff.plane import BffServices
from dataplane.bff.routes import state
from dataplane.core.errors import DatabaseError
from dataplane.db.lock import workers_at
from dataplane.http import ApiError, json_response, prometheus_response, require_bearer
from dataplane.queue.migrations import pending
from telemetry.otel import prometheus_text

READY_TIMEOUT = 2.0  # seconds /readyz may spend on its DB check
SCHEMA_RECHECK = 30.0  # seconds a migrated schema is trusted before /readyz reads it again
STATIC = Path(__file__).resolve().parent / "static"
STATIC_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".ts": "text/plain; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}

site = Blueprint("dataplane_site", __name__)


def probe_enabled() -> bool:
    config = state().config
    return config is not None and config.surfaces.probe_enabled


@site.get("/metrics")
async def prometheus_metrics() -> Response:
    config = state().config
    require_bearer(config.metrics_token if config else None, "DATAPLANE_METRICS_TOKEN")
    telemetry = state().telemetry
    if telemetry is None or not telemetry.prometheus:
        raise ApiError(404, "metrics are served only with DATAPLANE_METRICS=1")
    return prometheus_response(prometheus_text())


@site.get("/healthz")
async def healthz() -> Response:
    """Alive: 200, unless the plane keeps failing and is down (503 with the reason:
    restarting the process may help)."""
    s = state()
    if not s.healthy:
        return json_response({"status": "failing", "reason": s.why}, 503)
    return json_response({"status": "ok"})


@site.get("/readyz")
async def readyz() -> Response:
    """Ready: the plane serves, its pump listens, the queue DB answers and has this
    release's migrations; else 503 with the checks and, when the plane is down or the
    schema behind, why."""
    s = state()
    current = s.services
    checks: dict[str, Any] = {"configured": current is not None}
    why = s.why
    if current is not None:
        checks["listening"] = current.pump.listening
        try:
            await current.db.ping(call_timeout=READY_TIMEOUT)
            checks["queueDb"] = True
            now = trio.current_time()
            if not current.migrated or now - current.schema_checked_at >= SCHEMA_RECHECK:
                # Rechecked while migrated too: a restored or rebuilt database may lack
                # migrations the BFF saw applied (a cheap read, once per interval).
                missing = await pending(current.db, call_timeout=READY_TIMEOUT)
                current.migrated, current.schema_checked_at = not missing, now
                current.schema_missing = missing
            if not current.migrated:
                missing = current.schema_missing
                why = f"the queue database lacks {len(missing)} migration(s) from "
                why += f"{missing[0] if missing else '-'}: run `dataplane migrate`"
            checks["migrated"] = current.migrated
            if current.migrated and current.config.ready_needs_workers:
                without = await types_without_worker(current)
                checks["workers"] = not without
                if without:
                    why = f"no ready worker for {', '.join(without)}"
        except DatabaseError:
            checks["queueDb"] = False
    ok = all(checks.values()) and current is not None
    body: dict[str, Any] = {"status": "ready" if ok else "not ready", "checks": checks}
    if current is None or False in (checks.get("migrated"), checks.get("workers")):
        body["reason"] = why
    return json_response(body, 200 if ok else 503)


async def types_without_worker(current: BffServices) -> list[str]:
    """The served queue types no worker has served yet (``DATAPLANE_READY_NEEDS_WORKERS``),
    sorted. A type once seen stays seen for this plane: a worker that is full lets its
    on-call lock go, and a busy fleet must not take the BFFs out of the proxy's rotation.
    So this gates the start (compose's proxy answering before the workers serve), not a
    fleet that loses its workers later (alert DataplaneNoReadyWorker)."""
    types = {current.queue_type(s) for s in current.surfaces.values()}
    wanted = {t.oncall_key: t.name for t in types if t.name not in current.workers_seen}
    if wanted:
        held = await workers_at(current.db, sorted(wanted), call_timeout=READY_TIMEOUT)
        current.workers_seen.update(wanted[key] for key in held)
    return sorted(name for name in wanted.values() if name not in current.workers_seen)


@site.get("/")
async def demo_page() -> Response:
    if not probe_enabled():
        raise ApiError(404, "the demo page is served only with DATAPLANE_PROBE=1")
    return await static_response("index.html")


@site.get("/static/<name>")
async def static_file(name: str) -> Response:
    return await static_response(name)


@site.get("/openapi.json")
async def openapi() -> Response:
    config = state().config
    surfaces = config.surfaces.registry().surfaces if config is not None else {}
    return json_response(openapi_document(surfaces))


def _static_files() -> dict[str, Path]:
    """The files ``/static/<name>`` may serve: by name, those of ``bff/static`` (flat, no
    dot-files) of a type in ``STATIC_TYPES``. Listed once: a request's name is looked up,
    never joined to a path, so no name (NUL, too long, not UTF-8, ``..``) reaches the
    file system."""
    return {
        path.name: path
        for path in STATIC.iterdir()
        if path.is_file() and not path.name.startswith(".") and path.suffix in STATIC_TYPES
    }


STATIC_FILES = _static_files()


async def static_response(name: str) -> Response:
    """A file of ``bff/static`` (see :func:`_static_files`); 404 for any other name."""
    path = STATIC_FILES.get(name)
    if path is None:
        raise ApiError(404, "no such file")
    try:
        data = await trio.Path(path).read_bytes()
    except FileNotFoundError:
        raise ApiError(404, "no such file") from None
    resp = Response(data, mimetype=STATIC_TYPES[path.suffix].split(";")[0])
    resp.headers["Content-Type"] = STATIC_TYPES[path.suffix]
    resp.headers["Cache-Control"] = "no-cache"
    return resp
