"""The OpenAPI 3.1 document: every route, and every operation's parameter schema.

Generated from the manifest, so the schemas the BFF validates with are the ones
published. The POST body of each surface is a ``oneOf`` over its operations,
each fixing ``operation`` with ``const``. The named schemas every surface shares (an
error, a queued job, a live one with its progress and retry, an answer) are
:mod:`dataplane.bff.openapi.schemas`'s; the edge's statuses :mod:`dataplane.bff.openapi.edge`'s; the
paths are here.
"""

from __future__ import annotations

from typing import Any

from dataplane import __version__
from dataplane.bff.openapi import edge as openapi_edge
from dataplane.bff.openapi import invalidate as openapi_invalidate
from dataplane.bff.openapi.schemas import COMPONENTS
from dataplane.surfaces.manifest import Gate, Surface

ERROR = {"$ref": "#/components/schemas/Error"}
SSE_EVENT = {
    "type": "object",
    "description": (
        "One event: queued, any progress and retry (no id: the latest first on every "
        "connection; a retry: an attempt failed and the job is tried again after its "
        "backoff), then done, or error with code TIMEOUT, POISON or CANCELLED"
    ),
    "properties": {
        "event": {"enum": ["queued", "progress", "retry", "done", "error"]},
        "data": {
            "type": "string",
            "description": (
                "JSON: the job's status, its progress {jobId, attempt, seq, fraction?, "
                "done?, total?, message?, partial?}, a failed attempt it retries {jobId, "
                "attempt, maxAttempts, error, retryAt, retryInMs}, or its answer"
            ),
        },
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
}


def _error_responses(*statuses: int) -> dict[str, Any]:
    text = {
        400: "Bad request: malformed body, unknown operation field or parameter mismatch",
        401: "No, invalid or expired token",
        403: "A gate refused the caller (a DELETE: the caller did not request the job)",
        404: "Unknown surface, operation or job (or not the caller's)",
        409: "The job has finished (its status named): there is nothing to withdraw from",
        413: "Body over 64 KiB",
        415: "Body is not application/json",
        429: "This client has its share of the surface's live jobs: retry after Retry-After",
        503: "Plane not configured, queue DB unreachable, or the surface's queue is full",
    }
    return {
        str(s): {"description": text[s], "content": {"application/json": {"schema": ERROR}}}
        for s in statuses
    }


def _operation_schema(surface: Surface) -> dict[str, Any]:
    variants = []
    for op in surface.operations.values():
        variants.append(
            {
                "title": f"{surface.id}.{op.name}",
                "description": op.description
                + (f" Cached {op.ttl_seconds:g}s." if op.cacheable else " Always fresh.")
                + "".join(f" Gate: {g.description}." for g in op.gates if isinstance(g, Gate)),
                "type": "object",
                "properties": {"operation": {"const": op.name}, "params": dict(op.params)},
                **(
                    {"x-dataplane-result": _ref(result_name(surface.id, op.name))}
                    if op.result
                    else {}
                ),
                "required": ["operation", "params"] if op.params.get("required") else ["operation"],
                "additionalProperties": False,
            }
        )
    return {"oneOf": variants}


SECURITY: list[dict[str, list[str]]] = [{"bearer": []}]
PREFER: dict[str, Any] = {
    "name": "Prefer",
    "in": "header",
    "required": False,
    "description": "RFC 7240. `wait=N`: hold the POST up to N seconds (capped by"
    " DATAPLANE_MAX_PREFER_WAIT_SECONDS, default 5) and answer 200 with the job's answer if"
    " it comes in time, else the usual 202. `respond-async`: the immediate 202 (the"
    " default). Several fields or comma-separated preferences; unknown preferences and"
    " values that are not delta-seconds (wait=abc, wait=-1) are ignored, never an error.",
    "schema": {"type": "string"},
    "example": "wait=2",
}
PREFERENCE_APPLIED: dict[str, Any] = {
    "description": "RFC 7240: the preferences applied, e.g. `wait=2` (the wait applied, capped)"
    " or `respond-async`",
    "schema": {"type": "string"},
}
VARY: dict[str, Any] = {
    "description": "includes Prefer: the answer depends on it",
    "schema": {"type": "string"},
}
JOB_PARAMS: list[dict[str, Any]] = [
    {"name": "jobId", "in": "path", "required": True, "schema": {"type": "string"}},
    {
        "name": "token",
        "in": "query",
        "required": False,
        "description": "the signed stream token from streamUrl/pollUrl (instead of a bearer)",
        "schema": {"type": "string"},
    },
]


def openapi_document(surfaces: dict[str, Surface]) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    schemas = dict(COMPONENTS["schemas"])
    for sid, surface in sorted(surfaces.items()):
        paths.update(_surface_paths(sid, surface))
        schemas.update(_result_schemas(sid, surface))
    paths.update(FIXED_PATHS)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Surface Data Plane", "version": __version__},
        "paths": openapi_edge.with_edge_statuses(paths),
        "components": {**COMPONENTS, "schemas": schemas},
    }


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def result_name(sid: str, operation: str) -> str:
    """The component naming an operation's result schema: ``<surface>.<operation>.result``."""
    return f"{sid}.{operation}.result"


def answer_name(sid: str, surface: Surface) -> str:
    """The answer schema of a surface's jobs: ``<surface>.Answer`` when every operation
    declares its result (``result`` is then one of them), else the plain ``Answer``."""
    typed = surface.operations and all(op.result for op in surface.operations.values())
    return f"{sid}.Answer" if typed else "Answer"


def _result_schemas(sid: str, surface: Surface) -> dict[str, Any]:
    """Each declared result schema as a component, and the surface's typed answer."""
    out: dict[str, Any] = {
        result_name(sid, op.name): dict(op.result)
        for op in surface.operations.values()
        if op.result is not None
    }
    if answer_name(sid, surface) != "Answer":
        variants = [_ref(result_name(sid, name)) for name in surface.operations]
        out[answer_name(sid, surface)] = {
            "allOf": [_ref("Answer")],
            "properties": {"result": {"anyOf": variants}},
        }
    return out


def _surface_paths(sid: str, surface: Surface) -> dict[str, Any]:
    """The routes of one surface: enqueue, poll, stream, blob; invalidate."""
    base = f"/api/{sid}/q"
    return {
        base: _enqueue_path(sid, surface),
        base + "/{jobId}": _job_path(sid, surface),
        base + "/{jobId}/stream": _stream_path(sid),
        base + "/{jobId}/blob": _blob_path(sid),
        f"/api/{sid}/invalidate": openapi_invalidate.invalidate_path(sid),
    }


def _enqueue_path(sid: str, surface: Surface) -> dict[str, Any]:
    """The enqueue route: POST a query (Prefer: wait)."""
    path: dict[str, Any] = {
        "post": {
            "operationId": f"{sid}_enqueue",
            "summary": f"Enqueue a {sid} query",
            "description": surface.description,
            "security": SECURITY,
            "parameters": [PREFER],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _operation_schema(surface)}},
            },
            "responses": {
                "200": {
                    "description": "Prefer: wait=N and the job finished within N seconds (capped):"
                    " its answer, as the poll's 200 gives it (the job's outcome, an expected"
                    " error or POISON included, is in the body)",
                    "headers": {
                        "Preference-Applied": PREFERENCE_APPLIED,
                        "Content-Location": {
                            "description": "the poll URL, whose answer this is",
                            "schema": {"type": "string"},
                        },
                        "Vary": VARY,
                    },
                    "content": {"application/json": {"schema": _ref(answer_name(sid, surface))}},
                },
                "202": {
                    "description": "Queued (or attached to an identical live job); with"
                    " Prefer: wait=N, after waiting N seconds (capped) for an answer that did"
                    " not come",
                    "headers": {
                        "Location": {"schema": {"type": "string"}},
                        "Retry-After": {"schema": {"type": "string"}},
                        "Preference-Applied": PREFERENCE_APPLIED,
                        "Vary": VARY,
                    },
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Queued"}}
                    },
                },
                **_error_responses(400, 401, 403, 404, 413, 415, 429, 503),
            },
        }
    }
    return path


def _job_path(sid: str, surface: Surface) -> dict[str, Any]:
    """A job's route: poll it (GET), cancel it (DELETE)."""
    path: dict[str, Any] = {
        "get": {
            "operationId": f"{sid}_poll",
            "summary": "Poll a job",
            "security": SECURITY,
            "parameters": JOB_PARAMS,
            "responses": {
                "200": {
                    "description": "The finished job's answer",
                    "content": {"application/json": {"schema": _ref(answer_name(sid, surface))}},
                },
                "202": {
                    "description": (
                        "Still live: with its last progress, and the failed attempt it waits "
                        "out before the next (retry), if any"
                    ),
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Live"}}
                    },
                },
                **_error_responses(401, 404, 503),
            },
        },
        "delete": {
            "operationId": f"{sid}_cancel",
            "summary": "Withdraw from a job: its last requester cancels it, pending or running",
            "description": "Withdraws this requester (named by the URL token or the bearer"
            " JWT), once. When no other requester waits, the job is cancelled, whether it"
            " waits or runs: a running job's handler is stopped and its late answer"
            " refused. A disconnect or a stream's TIMEOUT withdraws nobody: only this does.",
            "security": SECURITY,
            "parameters": JOB_PARAMS,
            "responses": {
                "200": {
                    "description": "Cancelled (this was its last requester): its streams end"
                    " with event: error CANCELLED, and `cancellation` says whether it ran",
                    "content": {"application/json": {"schema": _ref("Withdrawal")}},
                },
                "202": {
                    "description": "This requester withdrawn (or already was); other"
                    " requesters keep the job: its status, and how many still wait",
                    "content": {"application/json": {"schema": _ref("Withdrawal")}},
                },
                **_error_responses(401, 403, 404, 409, 503),
            },
        },
    }
    return path


def _stream_path(sid: str) -> dict[str, Any]:
    """A job's event stream."""
    path: dict[str, Any] = {
        "get": {
            "operationId": f"{sid}_stream",
            "summary": "Server-Sent Events: queued, progress and retry, then done or error",
            "security": SECURITY,
            "parameters": [
                *JOB_PARAMS,
                {
                    "name": "Last-Event-ID",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string"},
                },
            ],
            "responses": {
                "200": {
                    "description": "An event stream",
                    "content": {"text/event-stream": {"schema": SSE_EVENT}},
                },
                "204": {"description": "Last-Event-ID says the answer was delivered"},
                **_error_responses(401, 404, 503),
            },
        }
    }
    return path


def _blob_path(sid: str) -> dict[str, Any]:
    """A job's result blob."""
    path: dict[str, Any] = {
        "get": {
            "operationId": f"{sid}_blob",
            "summary": "The job's result blob",
            "security": SECURITY,
            "parameters": JOB_PARAMS,
            "responses": {
                "200": {
                    "description": "The blob's bytes, with its content type",
                    "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
                },
                **_error_responses(401, 404, 503),
            },
        }
    }
    return path


FIXED_PATHS: dict[str, Any] = {}
FIXED_PATHS["/healthz"] = {
    "get": {
        "operationId": "healthz",
        "summary": "Liveness",
        "responses": {"200": {"description": "alive"}},
    }
}
FIXED_PATHS["/readyz"] = {
    "get": {
        "operationId": "readyz",
        "summary": "Readiness: queue DB reachable and migrated, LISTEN up",
        "responses": {"200": {"description": "ready"}, "503": {"description": "not ready"}},
    }
}
