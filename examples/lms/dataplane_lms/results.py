"""Building blocks of the LMS operations' result schemas (JSON Schema 2020-12).

Each operation declares what its handler answers (``Operation(result=...)``), next to
the handler, from these pieces: ``/openapi.json`` publishes them so a client can be
typed, and ``dataplane dev`` checks every answer against them. The answers are rows of
the named SQL in ``sql/``: its columns are always there (a row is a :func:`record`:
every key required, no other key), timestamps are ISO-8601 UTC text, counts and cents
integers, averages and percentages float8 numbers. A value that can be NULL is
:func:`nullable`. Every schema is inline (no ``$ref``): it is published as a component
of the OpenAPI document, where a ``$ref`` of its own would not resolve.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Schema = dict[str, Any]

ID: Schema = {"type": "integer", "minimum": 1}
TEXT: Schema = {"type": "string"}
COUNT: Schema = {"type": "integer", "minimum": 0}
CENTS: Schema = {"type": "integer", "minimum": 0, "description": "integer cents"}
FLAG: Schema = {"type": "boolean"}
TIMESTAMP: Schema = {
    "type": "string",
    "format": "date-time",
    "description": "ISO-8601 UTC, e.g. 2025-01-31T09:30:00Z",
}
PERCENT: Schema = {"type": "number", "minimum": 0, "maximum": 100, "description": "0-100"}
SCORE: Schema = {"type": "integer", "minimum": 0, "maximum": 100}
AVG_SCORE: Schema = {
    "type": ["number", "null"],
    "minimum": 0,
    "maximum": 100,
    "description": "average score of the completed enrollments (null: none completed)",
}
CURRENCY: Schema = {"type": "string", "description": "ISO 4217 code, e.g. USD"}
LIMIT: Schema = {"type": "integer", "minimum": 1, "description": "the page size asked for"}
OFFSET: Schema = {"type": "integer", "minimum": 0, "description": "the page offset asked for"}


def nullable(schema: Schema, why: str = "") -> Schema:
    """``schema``, or null (a NULL of the database)."""
    kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    out = {**schema, "type": [*kinds, "null"]}
    if why:
        out["description"] = why
    return out


def enum(values: Iterable[str]) -> Schema:
    return {"type": "string", "enum": list(values)}


def record(doc: str = "", /, **properties: Schema) -> Schema:
    """An object with exactly ``properties``, every one always present (``doc`` is
    positional, so a column may be named ``description``)."""
    out: Schema = {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
    if doc:
        out["description"] = doc
    return out


def rows_of(item: Schema, description: str = "") -> Schema:
    out: Schema = {"type": "array", "items": item}
    if description:
        out["description"] = description
    return out
