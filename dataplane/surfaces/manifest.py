"""The public surface API: how a team declares a surface and its operations.

A surface package (installed next to the plane, found through the entry-point
group ``dataplane.surfaces``) builds a :class:`Surface` with :func:`surface` from
:class:`Operation` s, each naming

* ``name`` and ``version``: a request is for one version; workers serve every
  version the surface still declares (declare the old and the new one side by
  side during a rollout, and upgrade workers before BFFs), and a worker asked for a
  version it does not declare answers 400 naming the versions it serves;
* ``params``: a JSON Schema (Draft 2020-12, the dialect of OpenAPI 3.1), compiled
  once, validated at the BFF (400) and again in the worker, published in
  ``/openapi.json``; ``default`` values are filled in and integral numbers given
  for ``integer`` normalised, so equal requests coalesce;
* ``result`` (optional): a JSON Schema of what the handler answers (a JSON answer; a
  blob's answer is its ``blobRef``), published in ``/openapi.json`` so a client can be
  typed from it, and checked by the worker as ``DATAPLANE_RESULT_CHECK`` says
  (``enforce`` in ``dataplane dev`` and the test kit: a mismatch answers
  ``RESULT_INVALID`` naming the first difference; ``count``; ``off``, the default);
* ``ttl_seconds``: 0 (always fresh, never cached) or how long the worker caches a
  result; its cache tags are ``c:<client>`` and ``u:<user>`` (with its client-scoped
  twin ``c:<client>|u:<user>``) for the user the result is about: ``user_param``
  names the parameter holding that user, and ``per_user`` says it is about the
  caller (``u:<caller's sub>``): the caller is then part of its dedupe key, so it
  is cached and coalesced per caller;
* ``gates`` (:mod:`dataplane.surfaces.gates`): checks of the caller against the
  request (:data:`STAFF_ONLY`,
  :func:`branch_in_scope`, :func:`client_match`, or their names ``"staff"``,
  ``"branch-in-scope:<param>"``, ``"client-match:<param>"``), run at the BFF for a
  fast 403 and re-enforced in the worker;
* ``timeout_seconds`` (default 30): the handler runs in a cancel scope; past it
  the attempt fails (``TIMEOUT``) and is retried, then poisoned, like any failure;
* ``max_concurrency`` / ``max_concurrency_per_client`` (optional, ints >= 1): at most
  that many attempts of the operation running at once across every worker of the
  queue type / of one client's, enforced by the claim (``maestro_claim``, migration
  0015): rows over the bound stay pending, the other operations are still claimed;
* ``handler``: ``async def handler(ctx: OperationContext) -> result``: JSON, or
  bytes / :class:`BlobResult` (stored as a blob). Raise :class:`HttpError`
  (400/403/404) for an expected error: an answer, never retried.

A declaration that cannot work is refused when the surface is built (and so when a
process loads it): :class:`~dataplane.core.errors.InvalidArgument` naming the problem. A
surface id must name a queue type and channels on every tier
(:func:`~dataplane.queue.types.check_surface_id`: at most 42 characters of ``a-z``,
``0-9`` and ``_``, starting with a letter, not ending in ``_dev``).
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jsonschema_rs
import trio

from dataplane.core.errors import HttpError, InvalidArgument
from dataplane.queue import QueueType
from dataplane.queue.envelope import Auth
from dataplane.queue.notices.progress import progress_report
from dataplane.queue.types import check_surface_id, client_tag
from dataplane.surfaces.gates import STAFF_ONLY, Gate, branch_in_scope, client_match, gate_named

if TYPE_CHECKING:
    from dataplane.db import Database

__all__ = [
    "STAFF_ONLY",
    "BlobResult",
    "Gate",
    "Handler",
    "HttpError",
    "Operation",
    "OperationContext",
    "Schema",
    "Surface",
    "branch_in_scope",
    "client_match",
    "gate_named",
    "surface",
    "validate",
]

Schema = Mapping[str, Any]
TIMEOUT_SECONDS = 30.0  # default handler timeout


# -- parameters -------------------------------------------------------------------


def _path(base: str, parts: Iterable[Any]) -> str:
    out = base
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _message(error: Any, base: str) -> str:
    """One readable line for a schema violation: where, and what is wrong."""
    kind, where = error.kind, _path(base, error.instance_path)
    name = type(kind).__name__
    if name == "Required":
        return f"{where}.{kind.property}: is required"
    if name == "AdditionalProperties":
        return f"{where}: unknown field(s) {', '.join(sorted(kind.unexpected))}"
    if name == "Type":
        return f"{where}: expected {' or '.join(kind.types)}"
    readable = {
        "Minimum": "must be >= {limit}",
        "Maximum": "must be <= {limit}",
        "ExclusiveMinimum": "must be > {limit}",
        "ExclusiveMaximum": "must be < {limit}",
        "MinLength": "must be at least {limit} characters",
        "MaxLength": "must be at most {limit} characters",
        "MinItems": "needs at least {limit} items",
        "MaxItems": "allows at most {limit} items",
        "Pattern": "must match {pattern}",
    }.get(name)
    if readable is not None:
        return f"{where}: " + readable.format(**{a: getattr(kind, a) for a in kind.__match_args__})
    if name == "Enum":
        return f"{where}: must be one of {', '.join(repr(o) for o in kind.options)}"
    return f"{where}: {error.message}"


def _compile(schema: Schema, what: str = "parameter") -> Any:
    try:
        return jsonschema_rs.Draft202012Validator(dict(schema), validate_formats=True)
    except (jsonschema_rs.ValidationError, ValueError, TypeError) as exc:
        first = str(exc).splitlines()[0]
        raise InvalidArgument(f"the {what} schema does not compile: {first}") from None


def _normalise(schema: Schema, value: Any) -> Any:
    """Defaults filled in and integral numbers made integers where the schema says so."""
    kind = schema.get("type")
    kinds = {kind} if isinstance(kind, str) else set(kind or ())
    if "integer" in kinds and isinstance(value, float) and math.isfinite(value):
        if value.is_integer() and abs(value) < 2**63:
            return int(value)
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [_normalise(schema["items"], v) for v in value]
    if isinstance(value, dict):
        props: Mapping[str, Schema] = schema.get("properties", {})
        out = dict(value)
        for name, sub in props.items():
            if not isinstance(sub, Mapping):
                continue
            if name in out:
                out[name] = _normalise(sub, out[name])
            elif "default" in sub:
                out[name] = sub["default"]
        return out
    return value


def validate(schema: Schema, value: Any, path: str = "params", *, validator: Any = None) -> Any:
    """Check ``value`` against ``schema`` (Draft 2020-12); return it normalised.

    Raises ``HttpError(400)`` naming the offending path. ``validator`` is the
    compiled schema when the caller holds one (an :class:`Operation` does).
    """
    compiled = validator if validator is not None else _compile(schema)
    if not compiled.is_valid(value):  # the fast path answers yes or no; then say why
        for error in compiled.iter_errors(value):
            raise HttpError(400, _message(error, path))
    return _normalise(schema, value)


# -- operations -----------------------------------------------------------------------


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
    progress_sink: Callable[..., None] | None = None  # the worker's, for this attempt

    async def progress(
        self,
        fraction: float | None = None,
        *,
        done: int | None = None,
        total: int | None = None,
        message: str | None = None,
        partial: Any = None,
    ) -> None:
        """Tell whoever waits how far the job is: ``fraction`` in [0, 1] or ``done`` of
        ``total``, a short ``message``, a small JSON ``partial`` result (at most 4 KiB).
        Waiting streams get an ``event: progress``; at most five a second reach them
        (the latest wins); it costs the handler no I/O. A bad report is a
        :class:`ValueError` (here too, with no worker behind the context)."""
        report = {"done": done, "total": total, "message": message, "partial": partial}
        if self.progress_sink is None:
            progress_report(fraction, **report)
        else:
            self.progress_sink(fraction=fraction, **report)
        await trio.lowlevel.checkpoint()

    def require_client_db(self) -> Database:
        if self.client_db is None:
            raise RuntimeError("this surface has no client database configured")
        return self.client_db

    def scope(self) -> dict[str, Any]:
        """The bound parameters every scoped query takes: client and branches."""
        return {"client": self.auth.client, "branches": list(self.auth.branches)}


Handler = Callable[[OperationContext], Awaitable[Any]]


def _is_async(handler: Any) -> bool:
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 - an async callable object
    )


@dataclass(frozen=True, slots=True)
class Operation:
    name: str
    version: int
    params: Schema
    handler: Handler
    ttl_seconds: float = 0.0
    gates: Sequence[Gate | str] = ()
    timeout_seconds: float = TIMEOUT_SECONDS
    user_param: str | None = None  # the parameter naming the user a result is about
    per_user: bool = False  # the result is about the caller
    description: str = ""
    summary_fields: Sequence[str] = ()
    result: Schema | None = None  # what the handler answers (JSON Schema 2020-12)
    max_concurrency: int | None = None  # attempts running at once, fleet-wide
    max_concurrency_per_client: int | None = None  # of one client's, fleet-wide
    _validator: Any = field(init=False, repr=False, compare=False, default=None)
    _result_validator: Any = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-zA-Z0-9_]*", self.name):
            raise InvalidArgument(f"operation name {self.name!r} is not an identifier")
        where = f"operation {self.name!r}"
        if not isinstance(self.version, int) or isinstance(self.version, bool) or self.version < 1:
            raise InvalidArgument(f"{where}: version must be an integer >= 1")
        if not isinstance(self.params, Mapping) or self.params.get("type") != "object":
            raise InvalidArgument(f"{where}: the parameter schema must be an object schema")
        try:
            object.__setattr__(self, "_validator", _compile(self.params))
        except InvalidArgument as exc:
            raise InvalidArgument(f"{where}: {exc}") from None
        if self.result is not None:
            if not isinstance(self.result, Mapping):
                raise InvalidArgument(f"{where}: the result schema must be a JSON Schema object")
            try:
                object.__setattr__(self, "_result_validator", _compile(self.result, "result"))
            except InvalidArgument as exc:
                raise InvalidArgument(f"{where}: {exc}") from None
        if not _is_async(self.handler):
            raise InvalidArgument(f"{where}: the handler must be an async function")
        if self.ttl_seconds < 0:
            raise InvalidArgument(f"{where}: ttl_seconds must be >= 0")
        if not self.timeout_seconds > 0:
            raise InvalidArgument(f"{where}: timeout_seconds must be > 0")
        for bound in ("max_concurrency", "max_concurrency_per_client"):
            value = getattr(self, bound)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 1
            ):
                raise InvalidArgument(f"{where}: {bound} must be an integer >= 1 or None")
        gates = tuple(gate_named(g) if isinstance(g, str) else g for g in self.gates)
        properties = self.params.get("properties", {})
        for gate in gates:
            if not isinstance(gate, Gate):
                raise InvalidArgument(f"{where}: {gate!r} is not a Gate")
            if gate.param is not None and gate.param not in properties:
                raise InvalidArgument(
                    f"{where}: gate {gate.name!r} reads params.{gate.param}, "
                    "which the schema does not declare"
                )
        object.__setattr__(self, "gates", gates)
        if self.user_param is not None and self.user_param not in properties:
            raise InvalidArgument(
                f"{where}: user_param {self.user_param!r} is not a declared parameter"
            )

    @property
    def cacheable(self) -> bool:
        return self.ttl_seconds > 0

    def check(self, auth: Auth, params: Any) -> dict[str, Any]:
        """Validate params (400) and run every gate (403); return the normalised params."""
        if not isinstance(params, dict):
            raise HttpError(400, "params: expected object")
        normalised: dict[str, Any] = validate(self.params, params, validator=self._validator)
        for gate in self.gates:
            assert isinstance(gate, Gate)
            gate(auth, normalised)
        return normalised

    def result_problem(self, value: Any) -> str | None:
        """The first way ``value`` breaks the result schema (``result.<path>: what is
        wrong``), or None: it conforms, or the operation declares no result schema."""
        checker = self._result_validator
        if checker is None or checker.is_valid(value):
            return None
        for error in checker.iter_errors(value):
            return _message(error, "result")
        return "result: does not match the result schema"

    def cache_tags(self, auth: Auth, params: Mapping[str, Any]) -> list[str]:
        """``c:<client>``; and for each user the result is about, ``u:<user>`` (dropped
        by a service's invalidation, for every client) and ``c:<client>|u:<user>``
        (dropped by a staff caller's ``u:<user>``, for its own client only)."""
        tags = [f"c:{auth.client}"]
        users: list[str] = []
        if self.per_user:
            users.append(f"u:{auth.user_id}")
        if self.user_param is not None and params.get(self.user_param) is not None:
            users.append(f"u:{params[self.user_param]}")
        for user in users:
            tags += [user, client_tag(auth.client, user)]
        return tags


# -- surfaces --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Surface:
    id: str
    operations: Mapping[str, Operation]  # the latest version of each operation
    description: str = ""
    needs_client_db: bool = True
    versions: Mapping[tuple[str, int], Operation] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_surface_id(self.id)  # every tier's queue type and channels can be named
        if not self.versions:
            object.__setattr__(
                self, "versions", {(op.name, op.version): op for op in self.operations.values()}
            )

    def operation(self, name: str, version: int | None = None) -> Operation:
        """The operation ``name`` (its latest version, or ``version``); 404/400 otherwise."""
        latest = self.operations.get(name)
        if latest is None:
            raise HttpError(404, f"unknown operation {name!r} on surface {self.id!r}")
        if version is None or version == latest.version:
            return latest
        op = self.versions.get((name, version))
        if op is None:
            served = sorted(v for (n, v) in self.versions if n == name)
            raise HttpError(400, f"{name} is served at version(s) {served}, not {version}")
        return op

    def queue_type(self, suffix: str = "") -> QueueType:
        """This surface's queue type on the tier of ``suffix`` (``""`` or ``"-dev"``)."""
        return QueueType(self.id, suffix)


def surface(
    *operations: Operation, id: str, description: str = "", needs_client_db: bool = True
) -> Surface:
    """A surface serving ``operations`` (several versions of one name are allowed)."""
    versions: dict[tuple[str, int], Operation] = {}
    for op in operations:
        if not isinstance(op, Operation):
            raise InvalidArgument(f"surface {id}: {op!r} is not an Operation")
        if (op.name, op.version) in versions:
            raise InvalidArgument(f"surface {id}: {op.name} version {op.version} declared twice")
        versions[op.name, op.version] = op
    latest: dict[str, Operation] = {}
    for op in operations:
        if op.name not in latest or op.version > latest[op.name].version:
            latest[op.name] = op
    return Surface(id, latest, description, needs_client_db, versions)


surface_of = surface  # the name the built-in surfaces were written with
