"""The operations manifest: what each surface serves, and how it is checked.

An :class:`Operation` declares its name, version, parameter schema (a JSON
Schema subset, validated at the BFF and again in the worker, and exported to
OpenAPI as is), ``ttl_seconds`` (0 = always fresh, never cached), gates, cache
tags and its handler. Gates run at the BFF for a fast 403 and are re-enforced
in the worker from the envelope's ``auth``: the worker trusts no row.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dataplane.envelope import Auth
from dataplane.errors import HttpError, InvalidArgument
from dataplane.queue import QueueType

if TYPE_CHECKING:
    from dataplane.db import Database

Schema = Mapping[str, Any]

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def validate(schema: Schema, value: Any, path: str = "params") -> Any:
    """Check ``value`` against a JSON Schema subset; return it with defaults filled.

    Supported: type, properties, required, additionalProperties (false),
    default, enum, const, minimum, maximum, minLength, maxLength, pattern,
    items, minItems, maxItems. Raises ``HttpError(400)`` naming the offending path.
    """
    kind = schema.get("type")
    if kind is not None:
        kinds = [kind] if isinstance(kind, str) else list(kind)
        ok = False
        for k in kinds:
            if isinstance(value, bool) and k in ("integer", "number"):
                continue
            if k == "integer" and isinstance(value, float):
                # JSON Schema: 3.0 is an integer. Normalise it, so equal requests coalesce.
                if value.is_integer() and abs(value) < 2**63:
                    value = int(value)
                    ok = True
                    break
                continue
            if isinstance(value, _JSON_TYPES[k]):
                ok = True
                break
        if not ok:
            raise HttpError(400, f"{path}: expected {' or '.join(kinds)}")
    if "const" in schema and value != schema["const"]:
        raise HttpError(400, f"{path}: must be {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(repr(v) for v in schema["enum"])
        raise HttpError(400, f"{path}: must be one of {allowed}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise HttpError(400, f"{path}: must be >= {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            raise HttpError(400, f"{path}: must be <= {schema['maximum']}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            raise HttpError(400, f"{path}: must be at least {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise HttpError(400, f"{path}: must be at most {schema['maxLength']} characters")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            raise HttpError(400, f"{path}: must match {schema['pattern']}")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            raise HttpError(400, f"{path}: needs at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise HttpError(400, f"{path}: allows at most {schema['maxItems']} items")
        if "items" in schema:
            value = [validate(schema["items"], v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        props: Mapping[str, Schema] = schema.get("properties", {})
        for name in schema.get("required", ()):
            if name not in value:
                raise HttpError(400, f"{path}.{name}: is required")
        if schema.get("additionalProperties") is False:
            extra = sorted(set(value) - set(props))
            if extra:
                raise HttpError(400, f"{path}: unknown field(s) {', '.join(extra)}")
        out = dict(value)
        for name, sub in props.items():
            if name in out:
                out[name] = validate(sub, out[name], f"{path}.{name}")
            elif "default" in sub:
                out[name] = sub["default"]
        value = out
    return value


@dataclass(frozen=True, slots=True)
class Gate:
    """A check of the caller against the request: raises ``HttpError(403)``."""

    name: str
    description: str
    check: Callable[[Auth, Mapping[str, Any]], None]

    def __call__(self, auth: Auth, params: Mapping[str, Any]) -> None:
        self.check(auth, params)


def _staff(auth: Auth, params: Mapping[str, Any]) -> None:
    if not auth.staff:
        raise HttpError(403, "this operation is for staff only")


STAFF_ONLY = Gate("staff", "the caller must be staff", _staff)


def branch_in_scope(param: str = "branch") -> Gate:
    """The branch named by ``params[param]`` (when given) must be in the caller's scope."""

    def check(auth: Auth, params: Mapping[str, Any]) -> None:
        branch = params.get(param)
        if branch is not None and not auth.may_see_branch(str(branch)):
            raise HttpError(403, f"branch {branch!r} is outside your scope")

    return Gate(f"branch-in-scope:{param}", f"params.{param} must be in the caller's scope", check)


def client_match(param: str = "client") -> Gate:
    """``params[param]`` (when given) must be the caller's own client."""

    def check(auth: Auth, params: Mapping[str, Any]) -> None:
        client = params.get(param)
        if client is not None and client != auth.client:
            raise HttpError(403, "you may only read your own client's data")

    return Gate(f"client-match:{param}", f"params.{param} must be the caller's client", check)


@dataclass(frozen=True, slots=True)
class BlobResult:
    """A handler's binary answer (a PDF, say): always stored as a blob."""

    content_type: str
    data: bytes
    filename: str | None = None


@dataclass(frozen=True, slots=True)
class OperationContext:
    """What a handler gets: validated params, the caller, the read-only client DB."""

    params: dict[str, Any]
    auth: Auth
    job_id: str
    dequeue_count: int
    client_db: Database | None

    def require_client_db(self) -> Database:
        if self.client_db is None:
            raise RuntimeError("this surface has no client database configured")
        return self.client_db

    def scope(self) -> dict[str, Any]:
        """The bound parameters every scoped query takes: client and branches."""
        return {"client": self.auth.client, "branches": list(self.auth.branches)}


Handler = Callable[[OperationContext], Awaitable[Any]]


def default_cache_tags(auth: Auth, params: Mapping[str, Any]) -> list[str]:
    tags = [f"c:{auth.client}"]
    if "userId" in params:
        tags.append(f"u:{params['userId']}")
    return tags


@dataclass(frozen=True, slots=True)
class Operation:
    name: str
    version: int
    params: Schema
    handler: Handler
    ttl_seconds: float = 0.0
    gates: Sequence[Gate] = ()
    cache_tags: Callable[[Auth, Mapping[str, Any]], list[str]] = default_cache_tags
    description: str = ""
    summary_fields: Sequence[str] = field(default=())

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-zA-Z0-9_]*", self.name):
            raise InvalidArgument(f"operation name {self.name!r} is not an identifier")
        if self.params.get("type") != "object":
            raise InvalidArgument(f"{self.name}: the parameter schema must be an object")
        if self.ttl_seconds < 0:
            raise InvalidArgument(f"{self.name}: ttl_seconds must be >= 0")

    @property
    def cacheable(self) -> bool:
        return self.ttl_seconds > 0

    def check(self, auth: Auth, params: Any) -> dict[str, Any]:
        """Validate params (400) and run every gate (403); return the normalised params."""
        if not isinstance(params, dict):
            raise HttpError(400, "params: expected object")
        normalised: dict[str, Any] = validate(self.params, params)
        for gate in self.gates:
            gate(auth, normalised)
        return normalised


@dataclass(frozen=True, slots=True)
class Surface:
    id: str
    operations: Mapping[str, Operation]
    description: str = ""
    needs_client_db: bool = True

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", self.id):
            raise InvalidArgument(f"surface id {self.id!r} must be lower-case letters and digits")

    def operation(self, name: str) -> Operation:
        try:
            return self.operations[name]
        except KeyError:
            raise HttpError(404, f"unknown operation {name!r} on surface {self.id!r}") from None

    def queue_type(self, suffix: str = "") -> QueueType:
        """This surface's queue type on the tier of ``suffix`` (``""`` or ``"-dev"``)."""
        return QueueType(self.id, suffix)


def surface_of(
    *operations: Operation, id: str, description: str = "", needs_client_db: bool = True
) -> Surface:
    names = [op.name for op in operations]
    if len(set(names)) != len(names):
        raise InvalidArgument(f"surface {id}: duplicate operation names")
    return Surface(id, {op.name: op for op in operations}, description, needs_client_db)
