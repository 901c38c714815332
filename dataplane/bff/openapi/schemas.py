"""The schemas of the BFF's bodies, the components its OpenAPI document's routes refer
to (:mod:`dataplane.bff.openapi.document`): an error, a queued job, a live job (its last progress,
and the failed attempt it waits out before the next: ``retry``), a withdrawal, a finished
job's answer (and, when it was cancelled, who cancelled it and when).

Each matches what the routes send (:func:`dataplane.bff.jobs.answer`, the ``DELETE``'s
body in :mod:`dataplane.bff.routes`); Schemathesis holds every answer to them
(tests/acceptance/test_openapi_fuzz.py).
"""

from __future__ import annotations

from typing import Any

COMPONENTS: dict[str, Any] = {
    "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}},
    "schemas": {
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["status", "code", "message"],
                    "properties": {
                        "status": {"type": "integer"},
                        "code": {"type": "string"},
                        "message": {"type": "string"},
                    },
                }
            },
        },
        "Queued": {
            "type": "object",
            "required": ["jobId", "streamUrl", "pollUrl", "coalesced"],
            "properties": {
                "jobId": {"type": "string", "format": "uuid"},
                "streamUrl": {"type": "string"},
                "pollUrl": {"type": "string"},
                "coalesced": {"type": "boolean"},
            },
        },
        "Live": {
            "type": "object",
            "required": ["jobId", "status"],
            "properties": {
                "jobId": {"type": "string"},
                "status": {"enum": ["pending", "in_progress", "cancelled"]},
                "requesters": {"type": "integer"},
                "progress": {"$ref": "#/components/schemas/Progress"},
                "retry": {"$ref": "#/components/schemas/Retry"},
            },
        },
        "Progress": {
            "type": "object",
            "description": "A running job's last progress, as its handler reported it",
            "required": ["jobId", "attempt", "seq"],
            "properties": {
                "jobId": {"type": "string"},
                "attempt": {"type": "integer", "minimum": 1},
                "seq": {"type": "integer", "minimum": 1},
                "fraction": {"type": "number", "minimum": 0, "maximum": 1},
                "done": {"type": "integer", "minimum": 0},
                "total": {"type": "integer", "minimum": 1},
                "message": {"type": "string"},
                "partial": {},
            },
        },
        "Retry": {
            "type": "object",
            "description": (
                "An attempt failed and the job is tried again: the attempt, the budget, the "
                "error (its class and message, the last line, at most 500 characters) and "
                "when the next try is due"
            ),
            "required": ["jobId", "attempt", "maxAttempts", "error", "retryAt", "retryInMs"],
            "properties": {
                "jobId": {"type": "string"},
                "attempt": {"type": "integer", "minimum": 1},
                "maxAttempts": {"type": "integer", "minimum": 2},
                "error": {"type": "string", "maxLength": 500},
                "retryAt": {"type": "string", "format": "date-time"},
                "retryInMs": {"type": "integer", "minimum": 0},
            },
        },
        "Answer": {
            "type": "object",
            "required": ["jobId", "status"],
            "properties": {
                "jobId": {"type": "string"},
                "status": {"enum": ["done", "poison", "cancelled"]},
                "result": {},
                "error": {
                    "type": "object",
                    "description": "an expected error {status, message}, POISON, or CANCELLED"
                    " (its message and `cancellation` say who cancelled it, whether it ran,"
                    " and when)",
                    "properties": {
                        "status": {"type": "integer"},
                        "code": {"type": "string"},
                        "message": {"type": "string"},
                        "cancellation": {"$ref": "#/components/schemas/Cancellation"},
                    },
                },
                "blobRef": {
                    "type": "object",
                    "properties": {
                        "url": {"type": "string"},
                        "contentType": {"type": "string"},
                        "size": {"type": "integer"},
                        "filename": {"type": "string"},
                    },
                },
                "cache": {"enum": ["hit", "miss", "bypass"]},
                "coalesced": {"type": "boolean"},
                "timings": {
                    "type": "object",
                    "description": "queue wait and run time of the answering execution",
                    "properties": {
                        "queueMs": {"type": "number"},
                        "runMs": {"type": "number"},
                    },
                },
            },
        },
        "Cancellation": {
            "type": "object",
            "description": "Who cancelled a job, whether it was running then, and when (a"
            " job an older release cancelled has none: its message says when only)",
            "required": ["by", "whileRunning"],
            "properties": {
                "by": {
                    "enum": ["requesters", "operator"],
                    "description": "requesters: every requester withdrew (DELETE);"
                    " operator: an operator's cancel (the console, `dataplane jobs cancel`)",
                },
                "operator": {"type": "string", "description": "the operator, by name"},
                "whileRunning": {"type": "boolean"},
                "at": {"type": "string", "format": "date-time"},
            },
        },
        "Withdrawal": {
            "type": "object",
            "required": ["jobId", "status"],
            "properties": {
                "jobId": {"type": "string"},
                "status": {"enum": ["pending", "in_progress", "cancelled"]},
                "requesters": {"type": "integer", "description": "those still waiting"},
                "cancellation": {"$ref": "#/components/schemas/Cancellation"},
            },
        },
    },
}
