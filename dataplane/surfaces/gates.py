"""Gates: checks of a caller against a request, declared per operation.

A :class:`Gate` raises ``HttpError(403)`` saying what the caller may not do; it runs
at the BFF (a fast 403) and again in the worker from the envelope's ``auth`` (the
worker trusts no BFF). A gate reads only the caller and the checked params, so both
places decide alike. Gates are named (``"staff"``, ``"branch-in-scope:<param>"``,
``"client-match:<param>"``) so a declaration may give the name (:func:`gate_named`)
and the OpenAPI document can list them; an unknown name is refused when the surface
is built (:class:`~dataplane.core.errors.InvalidArgument`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dataplane.core.errors import HttpError, InvalidArgument
from dataplane.queue.envelope import Auth


@dataclass(frozen=True, slots=True)
class Gate:
    """A check of the caller against the request: raises ``HttpError(403)``."""

    name: str
    description: str
    check: Callable[[Auth, Mapping[str, Any]], None]
    param: str | None = None  # the parameter it reads, if any

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

    return Gate(
        f"branch-in-scope:{param}", f"params.{param} must be in the caller's scope", check, param
    )


def client_match(param: str = "client") -> Gate:
    """``params[param]`` (when given) must be the caller's own client."""

    def check(auth: Auth, params: Mapping[str, Any]) -> None:
        client = params.get(param)
        if client is not None and client != auth.client:
            raise HttpError(403, "you may only read your own client's data")

    return Gate(
        f"client-match:{param}", f"params.{param} must be the caller's client", check, param
    )


_GATE_FACTORIES: dict[str, Callable[[str], Gate]] = {
    "branch-in-scope": branch_in_scope,
    "client-match": client_match,
}


def gate_named(name: str) -> Gate:
    """``"staff"``, ``"branch-in-scope:<param>"`` or ``"client-match:<param>"``."""
    if name == STAFF_ONLY.name:
        return STAFF_ONLY
    kind, _, param = name.partition(":")
    factory = _GATE_FACTORIES.get(kind)
    if factory is None or not param:
        known = ", ".join(["staff", *(f"{k}:<param>" for k in _GATE_FACTORIES)])
        raise InvalidArgument(f"unknown gate {name!r} (known: {known})")
    return factory(param)
