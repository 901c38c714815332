"""Who is at the console, and whether they may act.

A request carries a JWT, verified exactly as the BFF verifies one
(:class:`~dataplane.auth.verifier.JwtVerifier`, the same ``DATAPLANE_JWT_*`` settings),
either as ``Authorization: Bearer <jwt>`` or in the session cookie (:data:`COOKIE`)
that ``POST /login`` sets from a token pasted into its form. The cookie holds the token
itself (no server-side session: nothing to lose on a restart, nothing to share between
replicas), lives until the token's ``exp``, and is ``HttpOnly``, ``SameSite=Strict`` and
``Secure`` unless the console is reached over plain HTTP on a loopback host
(``127.0.0.1``, ``localhost``, ``[::1]``: the default bind, where browsers may not
keep a ``Secure`` cookie from ``http://``).

A link from elsewhere (an alert's ``trace_url``) arrives without the cookie when its
page is on another site (``SameSite=Strict``), or from a browser not signed in: the
401 page's "Sign in" goes to ``/login?next=<the page>``, which a browser whose cookie is
good (now sent: the click was on this site) is sent straight on to, and which a
sign-in returns to (:func:`local_path`: a path of this console only).

Roles (the ``roles`` claim, a list of strings): :data:`OPERATOR` reads and acts,
:data:`VIEWER` reads only. No token or a bad one is 401; a verified token with neither
role (an end user's) is 403 on every route; a viewer's action is 403.

CSRF: every POST (but ``/login``, which has no session yet and checks ``Origin``: its
own origin only, never ``null``)
carries the CSRF token of its credential, in the form field ``csrf`` or the header
``X-CSRF-Token``: an HMAC of the credential's digest under the console's key
(``DATAPLANE_CONSOLE_SECRET``, else a key per process), so it needs no storage, differs
per session and dies with it. Pages embed it; every answer to an authenticated request
also carries it in ``X-CSRF-Token`` (for a bearer client). Missing or wrong: 403.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from quart import Response, request

from dataplane.auth.claims import AuthError
from dataplane.auth.verifier import JwtVerifier
from dataplane.http import ApiError
from dataplane.operator import Operator

COOKIE = "dataplane_console"
MAX_COOKIE_TOKEN = 3800  # bytes: a cookie holds about 4 KiB, name and attributes included
MAX_NEXT_CHARS = 2000  # a sign-in's next page: a path and query string of this console
OPERATOR = "dataplane:operator"
VIEWER = "dataplane:viewer"
CSRF_FIELD = "csrf"
CSRF_HEADER = "X-CSRF-Token"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})


@dataclass(frozen=True, slots=True)
class Caller:
    """A verified console user."""

    sub: str
    email: str | None
    can_act: bool
    csrf: str
    expires: float  # the token's exp, epoch seconds
    via_cookie: bool

    @property
    def role(self) -> str:
        return OPERATOR if self.can_act else VIEWER

    @property
    def operator(self) -> Operator:
        """Who the audit row names: the verified ``sub``, and the email when there is one."""
        actor = f"{self.sub} <{self.email}>" if self.email else self.sub
        return Operator(actor[:320], "console")


class Sessions:
    """Checks callers (:meth:`caller`) and mints what a session needs."""

    def __init__(self, verifier: JwtVerifier, secret: str | None = None) -> None:
        self.verifier = verifier
        self._key = (
            hashlib.sha256(b"dataplane-console|" + secret.encode()).digest()
            if secret
            else secrets.token_bytes(32)
        )

    def csrf_for(self, token: str) -> str:
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        return hmac.new(self._key, b"csrf|" + digest, hashlib.sha256).hexdigest()

    def check_token(self, token: str, *, via_cookie: bool) -> Caller:
        """A verified caller with a console role: 401 (not verified) or 403 (no role)."""
        try:
            claims = self.verifier.claims(token)
        except AuthError as exc:
            raise ApiError(401, str(exc)) from None
        roles = claims.get("roles")
        roles = roles if isinstance(roles, list) else []
        if OPERATOR not in roles and VIEWER not in roles:
            raise ApiError(
                403,
                f"this token has no console role: its roles claim holds neither "
                f"{OPERATOR!r} nor {VIEWER!r}",
            )
        email = claims.get("email")
        return Caller(
            sub=str(claims["sub"]),
            email=email if isinstance(email, str) and email else None,
            can_act=OPERATOR in roles,
            csrf=self.csrf_for(token),
            expires=float(claims["exp"]),
            via_cookie=via_cookie,
        )

    def credential(self) -> tuple[str, bool] | None:
        """The request's token and whether it came in the cookie (the bearer wins)."""
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and given.strip():
            return given.strip(), False
        cookie = request.cookies.get(COOKIE)
        return (cookie, True) if cookie else None

    def caller(self) -> Caller:
        """The request's verified caller; 401 without a credential."""
        found = self.credential()
        if found is None:
            raise ApiError(401, "sign in at /login, or send Authorization: Bearer <JWT>")
        return self.check_token(found[0], via_cookie=found[1])


def require_csrf(caller: Caller, form: Mapping[str, Any]) -> None:
    """403 unless the POST carries the caller's CSRF token (form field or header)."""
    given = request.headers.get(CSRF_HEADER) or form.get(CSRF_FIELD) or ""
    if not isinstance(given, str) or not hmac.compare_digest(
        given.encode("utf-8", "surrogateescape"), caller.csrf.encode()
    ):
        raise ApiError(403, "missing or wrong CSRF token: reload the page and try again")


def require_operator(caller: Caller) -> None:
    if not caller.can_act:
        raise ApiError(403, f"a viewer cannot act: this needs the {OPERATOR!r} role")


def same_origin() -> None:
    """403 when a browser says the form came from another origin (login CSRF), or from
    an opaque one (``Origin: null``: a sandboxed frame, a ``data:`` page, a redirect
    across sites), which could be any site. No ``Origin`` at all is not a browser's
    form (browsers send one with every POST): a script's sign-in, let through."""
    origin = request.headers.get("Origin")
    if origin is None:
        return
    expected = f"{request.scheme}://{request.host}"
    if origin != expected:
        shown = origin[:100] or "an empty Origin"
        raise ApiError(403, f"a sign-in from {shown} is refused: use this console's page")


def local_path(raw: object) -> str:
    """``raw`` when it is a path of this console (``/jobs/slowest?since=1h``), else
    ``/``: where a sign-in goes next, never another site (no ``//host``, no scheme, no
    backslash a browser would read as a slash, no control character)."""
    if (
        not isinstance(raw, str)
        or len(raw) > MAX_NEXT_CHARS
        or not raw.startswith("/")
        or raw.startswith("//")
        or "\\" in raw
        or any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw)
    ):
        return "/"
    return raw


def cookie_is_secure() -> bool:
    """``Secure`` unless plain HTTP to a loopback host (see the module doc)."""
    host = request.host.rsplit(":", 1)[0] if not request.host.endswith("]") else request.host
    return request.scheme == "https" or host not in LOOPBACK_HOSTS


def set_session(response: Response, token: str, expires: float) -> None:
    if len(token.encode()) > MAX_COOKIE_TOKEN:
        raise ApiError(400, f"a token over {MAX_COOKIE_TOKEN} bytes cannot be kept in a cookie")
    response.set_cookie(
        COOKIE,
        token,
        max_age=max(0, int(expires - time.time())),
        path="/",
        secure=cookie_is_secure(),
        httponly=True,
        samesite="Strict",
    )


def clear_session(response: Response) -> None:
    response.delete_cookie(
        COOKIE, path="/", secure=cookie_is_secure(), httponly=True, samesite="Strict"
    )
