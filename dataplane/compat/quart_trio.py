"""Quart-Trio 0.12: the request class that sends ``100 Continue`` only when a route
reads the body (correctness, always on: ``docs/known-issues.md`` 2).

:class:`ContinueRequest` / :class:`ContinueBody` replace ``TrioRequest`` /
``TrioBody`` as the app's ``request_class``; the body reads ``TrioBody._must_raise``
(a body already refused as too large invites nothing). The hook comes from the
request's scope (:data:`dataplane.http.guard.CONTINUE_EXTENSION`), set by the guard
when :mod:`dataplane.compat.hypercorn`'s protocol serves the connection.

Tested with quart-trio 0.12.0 and quart 0.22.0 (requirements.lock; pyproject.toml caps
them below 0.13 and 0.23). Installed per app by :func:`install` from the app factories.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from quart_trio import QuartTrio
from quart_trio.wrappers.request import TrioBody, TrioRequest

from dataplane.http.guard import CONTINUE_EXTENSION, SendContinue

DISTRIBUTION = "quart-trio"
TESTED = ((0, 12),)
CORRECTNESS = ("continue_request",)
SPEED: tuple[str, ...] = ()
REACHES = (
    "quart_trio.wrappers.request.TrioBody",  # its instances' _must_raise: test_compat
    "quart_trio.wrappers.request.TrioRequest.body_class",
)


class ContinueBody(TrioBody):
    """A request body that sends ``100 Continue`` (when one is awaited) the first
    time the app reads it, unless the body is already refused (too large)."""

    send_continue: SendContinue | None = None

    async def _invite(self) -> None:
        send_continue, self.send_continue = self.send_continue, None
        if send_continue is not None and self._must_raise is None:
            await send_continue()

    def __await__(self) -> Generator[Any, None, Any]:
        yield from self._invite().__await__()
        return (yield from super().__await__())

    async def __anext__(self) -> bytes:
        await self._invite()
        return await super().__anext__()


class ContinueRequest(TrioRequest):
    body_class = ContinueBody

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        extensions: dict[str, Any] = dict(self.scope.get("extensions") or {})
        hook = extensions.get(CONTINUE_EXTENSION)
        if callable(hook) and isinstance(self.body, ContinueBody):
            self.body.send_continue = hook


def install(app: QuartTrio) -> list[str]:
    """Make ``app`` read request bodies with :class:`ContinueRequest`."""
    app.request_class = ContinueRequest
    return ["continue_request"]
