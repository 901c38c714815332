"""What a test sends and gets: callers' tokens, answers and Server-Sent Events.

:func:`token` mints a JWT with the claims the BFF reads, signed with
:data:`JWT_SECRET`, the key the kit's BFF trusts (``DATAPLANE_JWT_SECRET``, set only in
the test's process). An :class:`Answer` is what a browser gets: the HTTP status and
the JSON body (a refusal's ``{"error": {...}}``, or a finished job's answer: ``jobId``,
``status``, ``result`` or ``error``, ``cache``, ``coalesced``, ``timings``), and, from a
stream, every event in order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dataplane.auth.claims import AuthError, mint_token
from dataplane.auth.verifier import JwtVerifier
from dataplane.http import ApiError
from dataplane.queue.envelope import Auth

JWT_SECRET = "dataplane-testing-kit-jwt-secret-for-hs256!"  # only ever a test's
NOTIFY_SECRET = "dataplane-testing-kit-notify-secret-32-chars"
STREAM_SECRET = "dataplane-testing-kit-stream-secret-32-chars"
FINAL_EVENTS = ("done", "error")  # a stream's last event; any other is collected on the way


def token(
    client: str = "acme",
    *,
    sub: str = "u1",
    staff: bool = False,
    branches: list[str] | None = None,
    email: str | None = None,
    ttl: int = 3600,
) -> str:
    """A bearer JWT for a caller of ``client``: user ``sub``, ``staff`` or not, scoped to
    ``branches`` (default: ``["*"]`` for staff, none otherwise)."""
    return mint_token(
        JWT_SECRET, client=client, sub=sub, staff=staff, branches=branches, email=email, ttl=ttl
    )


_VERIFIER = JwtVerifier.from_settings(secret=JWT_SECRET, public_key=None)


def caller_of(auth: Auth | str | None) -> Auth:
    """The caller an ``auth=`` argument names: an :class:`Auth`, a token (verified as the
    BFF verifies it; :class:`AuthError` if it does not verify), or None (:func:`token`'s
    default caller)."""
    if isinstance(auth, Auth):
        return auth
    return _VERIFIER.verify(token() if auth is None else auth)


@dataclass(frozen=True, slots=True)
class Event:
    """One Server-Sent Event: its ``event`` name (``message`` when unnamed), ``id`` and
    ``data`` as sent."""

    name: str
    data: str
    id: str | None = None

    @property
    def json(self) -> Any:
        return json.loads(self.data)


class AnswerError(AssertionError):
    """``Answer.result`` of an answer that is an error."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(f"the answer is an error (HTTP {answer.status}): {answer.body}")
        self.answer = answer


@dataclass(frozen=True, slots=True)
class Answer:
    """What the browser got: ``status`` (200 for a job's answer; the BFF's refusal:
    400, 401, 403, 404...), the JSON ``body``, and a stream's ``events`` in order."""

    status: int
    body: dict[str, Any]
    events: tuple[Event, ...] = ()

    @property
    def error(self) -> dict[str, Any] | None:
        """The error (``status``, ``message``, maybe ``code``), refused or answered; or None."""
        error = self.body.get("error")
        return error if isinstance(error, dict) else None

    @property
    def result(self) -> Any:
        """The handler's JSON answer; :class:`AnswerError` when the answer is an error."""
        if self.status != 200 or self.error is not None:
            raise AnswerError(self)
        return self.body.get("result")

    @property
    def cache(self) -> str | None:
        return self.body.get("cache")

    @property
    def coalesced(self) -> bool:
        return bool(self.body.get("coalesced"))


def refusal(status: int, message: str) -> Answer:
    """The BFF's refusal, as every error is answered (:class:`~dataplane.http.ApiError`)."""
    error = ApiError(status, message)
    return Answer(status, {"error": {"status": status, "code": error.code, "message": message}})


def final_body(event: Event) -> dict[str, Any]:
    """A stream's answer from its last event: ``done``'s data is the answer; an
    ``error`` event's data is the error (with its ``jobId``), answered as
    ``{"jobId", "error"}``."""
    data = event.json
    if event.name == "error" and isinstance(data, dict):
        rest = {k: v for k, v in data.items() if k != "jobId"}
        return {"jobId": data.get("jobId"), "error": rest}
    return data if isinstance(data, dict) else {"result": data}


__all__ = ["JWT_SECRET", "Answer", "AnswerError", "AuthError", "Event", "caller_of", "token"]
