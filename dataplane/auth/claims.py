"""What a verified token must carry, and the :class:`~dataplane.queue.envelope.Auth` it
becomes; tokens minted for development and tests.

* A token's claims become the envelope's ``auth`` (jsonb), the dedupe and scope keys
  (UTF-8 hashes) and answers: every string in them (keys included) must be text all
  three can hold, no NUL, no unpaired surrogate (:func:`claims_are_text`; one 401
  message for all, :data:`NOT_TEXT`).
* ``client`` (non-empty, no ``|``), ``staff`` (a boolean), ``branches`` (a list of
  branch ids; ``*`` for staff only) and ``sub`` are required, ``email`` is optional;
  anything else is an :class:`AuthError` (HTTP 401) saying which claim is wrong.
* :class:`AuthError` is every authentication failure of the BFF (JWT, JWKS, URL token).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import jwt

from dataplane.core.errors import DataPlaneError, InvalidArgument
from dataplane.queue.envelope import Auth


class AuthError(DataPlaneError):
    """The caller could not be authenticated (HTTP 401)."""


NOT_TEXT = "token claims must be text: no NUL characters, no unpaired surrogates"


def claims_are_text(value: Any) -> bool:
    """Whether every string in ``value`` (keys included) is storable text: valid
    UTF-8 (no unpaired surrogate) without NUL. Iterative: claims come from a token
    of at most ``MAX_TOKEN_BYTES``, so this is cheap."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return False
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return True


def auth_from_claims(claims: Mapping[str, Any]) -> Auth:
    # Claims end up in the envelope (jsonb), the dedupe and scope keys (UTF-8 hashes)
    # and answers: text that cannot be all three is refused here, one way for all.
    if not claims_are_text(claims):
        raise AuthError(NOT_TEXT)
    client, staff, branches = claims.get("client"), claims.get("staff"), claims.get("branches")
    if not isinstance(client, str) or not client or "|" in client:
        raise AuthError("token lacks a valid 'client' claim")
    if not isinstance(staff, bool):
        raise AuthError("token lacks a boolean 'staff' claim")
    if not isinstance(branches, list) or not all(isinstance(b, str) and b for b in branches):
        raise AuthError("token lacks a 'branches' claim (a list of branch ids)")
    if "*" in branches and not staff:
        raise AuthError("only staff tokens may carry the '*' branch scope")
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub:
        raise AuthError("token lacks a valid 'sub' claim")
    email = claims.get("email", "")
    if not isinstance(email, str):
        raise AuthError("token 'email' claim must be a string")
    try:
        return Auth(
            client=client, user_id=sub, actor_email=email, staff=staff, branches=tuple(branches)
        )
    except InvalidArgument as exc:
        raise AuthError(str(exc)) from None


def mint_token(
    secret: str,
    *,
    client: str,
    sub: str,
    staff: bool = False,
    branches: list[str] | None = None,
    email: str | None = None,
    ttl: int = 3600,
    audience: str | None = None,
    issuer: str | None = None,
    roles: list[str] | None = None,
) -> str:
    """An HS256 token for development and tests (``dataplane token``); ``roles`` (the
    console's ``dataplane:operator``, ``dataplane:viewer``) only when given."""
    now = int(time.time())
    claims: dict[str, Any] = {
        "sub": sub,
        "client": client,
        "staff": staff,
        "branches": branches if branches is not None else ["*"] if staff else [],
        "email": email or f"{sub}@{client}.example",
        "iat": now,
        "exp": now + ttl,
    }
    if audience:
        claims["aud"] = audience
    if issuer:
        claims["iss"] = issuer
    if roles is not None:
        claims["roles"] = list(roles)
    return jwt.encode(claims, secret, algorithm="HS256")
