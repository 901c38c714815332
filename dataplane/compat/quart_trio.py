"""Quart-Trio 0.12: the request class that sends ``100 Continue`` only when a route
reads the body (correctness, always on: ``docs/known-issues.md`` 2).

:class:`ContinueRequest` / :class:`ContinueBody` replace ``TrioRequest`` /
``TrioBody`` as the app's ``request_class``; the body reads ``TrioBody._must_raise``
(a body already refused as too large invites nothing), and says whether the app read it
to its end (:attr:`ContinueBody.read_to_the_end`, from quart's ``Body._complete``: an
answer given before then closes the connection). The hook comes from the
request's scope (:data:`dataplane.http.guard.CONTINUE_EXTENSION`), set by the guard
when :mod:`dataplane.compat.hypercorn`'s protocol serves the connection.

``unmerged_slashes`` (correctness, always on, even outside the tested versions): the
app's URL map does not merge doubled slashes (:func:`unmerge_slashes`): Werkzeug's
default answers such a path with a 308 redirect, which Quart renders as HTML past every
error handler (``docs/known-issues.md`` 3); unmerged, it is an unknown route, the JSON
404 like any other.

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
CORRECTNESS = ("continue_request", "unmerged_slashes")
SPEED: tuple[str, ...] = ()
REACHES = (
    "quart_trio.wrappers.request.TrioBody",  # its instances' _must_raise, _complete: test_compat
    "quart_trio.wrappers.request.TrioRequest.body_class",
)


class ContinueBody(TrioBody):
    """A request body that sends ``100 Continue`` (when one is awaited) the first
    time the app reads it, unless the body is already refused (too large)."""

    send_continue: SendContinue | None = None

    @property
    def read_to_the_end(self) -> bool:
        """Whether the app has read this body to its end (nothing of it is left on the
        connection)."""
        complete = getattr(self, "_complete", None)
        return complete is not None and complete.is_set()

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


def unmerge_slashes(app: QuartTrio) -> None:
    """Doubled slashes in ``app``'s paths stay doubled (its rules, and any added)."""
    app.url_map.merge_slashes = False
    for rule in app.url_map.iter_rules():
        rule.merge_slashes = False


def install(app: QuartTrio) -> list[str]:
    """Make ``app`` read request bodies with :class:`ContinueRequest`, its doubled
    slashes unmerged."""
    app.request_class = ContinueRequest
    unmerge_slashes(app)
    return ["continue_request", "unmerged_slashes"]
