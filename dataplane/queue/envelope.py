"""The envelope: what a job carries, built from verified token claims only.

``scopeKey = sha256(canonical(sorted(branches)) | staff)`` and
``dedupeKey = sha256(surface | operation | version | client | scopeKey |
canonical(params) [| tier] [| user:canonical(sub)])``, where canonical JSON has
sorted keys, no insignificant whitespace and UTF-8 text, the tier (the queue
type's suffix, ``-dev``) is appended when not live, and the caller's ``sub`` is
appended for a ``per_user`` operation (its answer is about the caller). The key is
the row's dedupe key, the worker's cache key and its single-flight key: everything
an answer depends on is in it. Two operators whose scopes differ never share a job
or a cache entry; two callers of a per-user operation never do either, however
alike their scopes; equal params in any key order share both; the live and dev
tiers, sharing one queue DB, never share a row.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from dataplane.core.errors import InvalidArgument

ENVELOPE_VERSION = 1  # the shape of the payload, not an operation's version


# json.dumps with options builds an encoder per call; one built once encodes the same.
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_json(value: Any) -> str:
    """Sorted keys, no insignificant whitespace, UTF-8 (not ASCII-escaped)."""
    try:
        text = _CANONICAL.encode(value)
        text.encode("utf-8")  # unpaired surrogates cannot be UTF-8
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise InvalidArgument(f"not canonical-JSON-serialisable: {exc}") from None
    return text


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def scope_key(branches: Sequence[str], staff: bool) -> str:
    return _scope_key(tuple(sorted(set(branches))), staff)


@lru_cache(maxsize=4096)  # every envelope's auth works it out; callers repeat
def _scope_key(branches: tuple[str, ...], staff: bool) -> str:
    return _sha256(canonical_json(list(branches)) + "|" + ("1" if staff else "0"))


def dedupe_key(
    surface: str,
    operation: str,
    version: int,
    client: str,
    scope: str,
    params: Mapping[str, Any],
    tier: str = "",
    user: str | None = None,
) -> str:
    """The key of a request; ``user`` (the caller's ``sub``) only for a per-user operation.

    The parts are unambiguous: surface, operation and client hold no ``|``, the scope
    is hex, canonical JSON of an object ends where it closes, the tier starts with
    ``-`` and the user part with ``user:`` followed by a JSON string.
    """
    parts = [surface, operation, str(version), client, scope, canonical_json(params)]
    if any("|" in p for p in parts[:4]):
        raise InvalidArgument("surface, operation and client may not contain '|'")
    if tier:  # the live tier keeps the keys it always had
        parts.append(tier)
    if user is not None:  # so do operations that are not per user
        parts.append("user:" + canonical_json(user))
    return _sha256("|".join(parts))


@dataclass(frozen=True, slots=True)
class Auth:
    """Who asks, from verified claims: never from a request body."""

    client: str
    user_id: str
    actor_email: str
    staff: bool
    branches: tuple[str, ...]
    scope_key: str = field(default="")

    def __post_init__(self) -> None:
        if not self.client or not isinstance(self.client, str):
            raise InvalidArgument("auth.client must be a non-empty string")
        if not isinstance(self.staff, bool):
            raise InvalidArgument("auth.staff must be a boolean")
        if not all(isinstance(b, str) and b for b in self.branches):
            raise InvalidArgument("auth.branches must be non-empty strings")
        object.__setattr__(self, "branches", tuple(sorted(set(self.branches))))
        expected = scope_key(self.branches, self.staff)
        if self.scope_key and self.scope_key != expected:
            raise InvalidArgument("auth.scopeKey does not match branches and staff")
        object.__setattr__(self, "scope_key", expected)

    @property
    def all_branches(self) -> bool:
        return "*" in self.branches

    def may_see_branch(self, branch: str) -> bool:
        return self.all_branches or branch in self.branches

    def to_json(self) -> dict[str, Any]:
        return {
            "client": self.client,
            "actorEmail": self.actor_email,
            "staff": self.staff,
            "branches": list(self.branches),
            "scopeKey": self.scope_key,
            "userId": self.user_id,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Auth:
        try:
            return cls(
                client=data["client"],
                user_id=str(data["userId"]),
                actor_email=str(data.get("actorEmail") or ""),
                staff=data["staff"],
                branches=tuple(data["branches"]),
                scope_key=str(data.get("scopeKey") or ""),
            )
        except (KeyError, TypeError) as exc:
            raise InvalidArgument(f"envelope auth is malformed: {exc!r}") from None


@dataclass(frozen=True, slots=True)
class Envelope:
    surface: str
    operation: str
    version: int
    params: dict[str, Any]
    auth: Auth
    traceparent: str | None = None
    tier: str = ""  # the queue type's suffix: "" (live) or "-dev"
    # The operation's answer is about the caller (``Operation.per_user``): the caller is
    # part of the key. Set by whoever builds the envelope from the operation's
    # declaration (the BFF, and the worker from its own); carried as ``perUser``.
    per_user: bool = False

    @property
    def dedupe_key(self) -> str:
        return dedupe_key(
            self.surface,
            self.operation,
            self.version,
            self.auth.client,
            self.auth.scope_key,
            self.params,
            self.tier,
            self.auth.user_id if self.per_user else None,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "v": ENVELOPE_VERSION,
            "surface": self.surface,
            "operation": self.operation,
            "version": self.version,
            "params": self.params,
            "auth": self.auth.to_json(),
        }
        if self.traceparent:
            out["traceparent"] = self.traceparent
        if self.tier:
            out["tier"] = self.tier
        if self.per_user:
            out["perUser"] = True
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Envelope:
        if type(data) is not dict and not isinstance(data, Mapping):  # dict: the ABC check is slow
            raise InvalidArgument("envelope must be a JSON object")
        try:
            surface, operation = data["surface"], data["operation"]
            version, params = data["version"], data["params"]
            auth = data["auth"]
        except KeyError as exc:
            raise InvalidArgument(f"envelope lacks {exc.args[0]!r}") from None
        if not isinstance(surface, str) or not isinstance(operation, str):
            raise InvalidArgument("envelope surface and operation must be strings")
        if not isinstance(version, int) or isinstance(version, bool):
            raise InvalidArgument("envelope version must be an integer")
        if not isinstance(params, dict):
            raise InvalidArgument("envelope params must be an object")
        if type(auth) is not dict and not isinstance(auth, Mapping):
            raise InvalidArgument("envelope auth must be an object")
        traceparent = data.get("traceparent")
        tier = data.get("tier", "")
        if not isinstance(tier, str):
            raise InvalidArgument("envelope tier must be a string")
        per_user = data.get("perUser", False)
        if not isinstance(per_user, bool):
            raise InvalidArgument("envelope perUser must be a boolean")
        return cls(
            surface=surface,
            operation=operation,
            version=version,
            params=params,
            auth=Auth.from_json(auth),
            traceparent=traceparent if isinstance(traceparent, str) else None,
            tier=tier,
            per_user=per_user,
        )
