"""The OpenAPI document's entry of ``POST /api/<surface>/invalidate``: the BFF's write
path dropping cached results (:mod:`dataplane.bff.invalidate`, whose limits it names)."""

from __future__ import annotations

from typing import Any

from dataplane.bff.invalidate import MAX_TAG_LENGTH, MAX_TAGS

ERROR_BODY = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
TAGS = {
    "type": "object",
    "required": ["tags"],
    "additionalProperties": False,
    "properties": {
        "tags": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_TAGS,
            "items": {"type": "string", "minLength": 1, "maxLength": MAX_TAG_LENGTH},
            "description": "cache tags: c:<client>, u:<user> (a staff caller: its own"
            " client's c: tag, and u: tags scoped to its client)",
        }
    },
}


def invalidate_path(sid: str) -> dict[str, Any]:
    """The route's path item for surface ``sid``."""

    def error(text: str) -> dict[str, Any]:
        return {"description": text, "content": ERROR_BODY}

    return {
        "post": {
            "operationId": f"{sid}_invalidate",
            "summary": "Drop the cached answers carrying these tags, on every worker",
            "description": "A staff caller (its own client's tags), or the bearer of"
            " DATAPLANE_INVALIDATE_TOKEN (any tag, as given).",
            "security": [{"bearer": []}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": TAGS}}},
            "responses": {
                "202": {
                    "description": "Broadcast to every worker: the tags as given",
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["invalidated"],
                                "properties": {
                                    "invalidated": {"type": "array", "items": {"type": "string"}}
                                },
                            }
                        }
                    },
                },
                "400": error('Not {"tags": [...]}, or a tag that is not one'),
                "401": error("No, invalid or expired token"),
                "403": error("Not staff, or a tag this caller may not drop"),
                "413": error("Body over 64 KiB"),
                "415": error("Body is not application/json"),
                "503": error("Plane not configured or queue DB unreachable"),
            },
        }
    }
