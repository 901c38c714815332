"""The whole plane in a test: a real BFF and real workers of the surfaces under test.

:func:`open_plane` serves the BFF's app (``dataplane.bff.app``) with Hypercorn in a task
of the test's process, on a free port of 127.0.0.1, configured the way a deployment
configures it, through its environment (set with the test's ``monkeypatch``, so it is
undone after): the test's queue DB, the kit's JWT key (:func:`~dataplane.testing.token`
mints for it), the surfaces under test (``DATAPLANE_SURFACES``), one attempt a job.
The workers are the :class:`~dataplane.testing.kit.Kit`'s, one per surface, all started
before the first request.

:meth:`Plane.query` is what a browser's ``dataClient.js`` does: ``POST /q``, then the
job's event stream, read to its last event. Every event is kept, in order, whatever its
name: an event type the BFF adds shows up without a change here.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from dataplane.bff.app import REQUIRE_TRIO, create_app
from dataplane.http import RequireTrio
from dataplane.queue.envelope import Auth
from dataplane.surfaces.manifest import Surface
from dataplane.testing.answers import (
    FINAL_EVENTS,
    JWT_SECRET,
    NOTIFY_SECRET,
    STREAM_SECRET,
    Answer,
    Event,
    final_body,
    token,
)
from dataplane.testing.kit import Enqueued, Execution, Kit

READY_WITHIN = 30.0  # seconds for the BFF's /readyz to answer 200
QUERY_WITHIN = 30.0  # seconds for a query's answer, POST to last event

# The BFF's environment: what the kit sets, and what it removes (another key source).
UNSET = (
    "DATAPLANE_QUEUE_SUFFIX",
    "DATAPLANE_JWT_PUBLIC_KEY",
    "DATAPLANE_JWT_JWKS_URL",
    "DATAPLANE_JWT_AUDIENCE",
    "DATAPLANE_JWT_ISSUER",
)


def bff_environment(queue_dsn: str, modules: str | None) -> dict[str, str | None]:
    """The variables the kit's BFF runs with (None: unset)."""
    return {
        "MAESTRO_QUEUES_URL": queue_dsn,
        "DATAPLANE_JWT_SECRET": JWT_SECRET,
        "DATAPLANE_STREAM_SECRET": STREAM_SECRET,
        "DATAPLANE_NOTIFY_SECRET": NOTIFY_SECRET,
        "DATAPLANE_ALLOW_OWNER": "1",  # the test server's superuser
        "DATAPLANE_PROBE": "0",
        "DATAPLANE_SURFACES": modules,
        "DATAPLANE_SWEEP_SECONDS": "1",
        "DATAPLANE_MAX_DEQUEUES": "1",  # one attempt: a failure answers POISON at once
        "DATAPLANE_FAIL_BACKOFF_SECONDS": "0",
        **dict.fromkeys(UNSET),
    }


def bearer_of(auth: Auth | str | None) -> str:
    """A token for ``auth``: itself, one with an :class:`Auth`'s claims, or the default."""
    if isinstance(auth, str):
        return auth
    if auth is None:
        return token()
    return token(
        auth.client,
        sub=auth.user_id,
        staff=auth.staff,
        branches=list(auth.branches),
        email=auth.actor_email or None,
    )


async def read_events(
    http: httpx.AsyncClient, url: str, *, headers: dict[str, str] | None = None
) -> tuple[int, list[Event]]:
    """GET an event stream; (its status, every event up to and with the first ``done``
    or ``error``, or to the stream's end). Comments (keep-alives) are not events."""
    events: list[Event] = []
    async with http.stream("GET", url, headers=headers or {}) as resp:
        if resp.status_code != 200:
            await resp.aread()
            return resp.status_code, events
        fields: dict[str, str] = {}
        data: list[str] = []
        async for line in resp.aiter_lines():
            if line == "":
                if data or fields:
                    event = Event(fields.get("event", "message"), "\n".join(data), fields.get("id"))
                    events.append(event)
                    if event.name in FINAL_EVENTS:
                        break
                fields, data = {}, []
            elif not line.startswith(":"):
                key, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if key == "data":
                    data.append(value)
                else:
                    fields[key] = value
    return resp.status_code, events


@dataclass
class Plane:
    """A running BFF (``url``, ``http``: a client of it) and the :class:`Kit`'s workers."""

    url: str
    http: httpx.AsyncClient
    kit: Kit

    async def query(
        self,
        surface: Surface | str,
        operation: str,
        params: Any = None,
        *,
        auth: Auth | str | None = None,
        within: float = QUERY_WITHIN,
    ) -> Answer:
        """``POST /api/<surface>/q`` as ``auth`` (a token, an :class:`Auth` or None: the
        default caller), then the job's stream: the :class:`Answer` with every event.
        A refused POST answers its status and body, without events."""
        sid = surface.id if isinstance(surface, Surface) else surface
        body = {"operation": operation, "params": {} if params is None else params}
        headers = {"Authorization": f"Bearer {bearer_of(auth)}"}
        with trio.fail_after(within):
            posted = await self.http.post(f"/api/{sid}/q", json=body, headers=headers)
            if posted.status_code != 202:
                return Answer(posted.status_code, posted.json())
            status, events = await read_events(self.http, posted.json()["streamUrl"])
        if status != 200 or not events or events[-1].name not in FINAL_EVENTS:
            raise AssertionError(f"the stream answered {status} and ended after {events}")
        return Answer(200, final_body(events[-1]), tuple(events))

    async def enqueued(
        self, surface: Surface | str | None = None, operation: str | None = None
    ) -> list[Enqueued]:
        """See :meth:`Kit.enqueued`."""
        return await self.kit.enqueued(surface, operation)

    async def executions(
        self, surface: Surface | str | None = None, operation: str | None = None
    ) -> list[Execution]:
        """See :meth:`Kit.executions`."""
        return await self.kit.executions(surface, operation)


@asynccontextmanager
async def open_plane(
    kit: Kit, queue_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Plane]:
    """A BFF for ``kit``'s surfaces, every one of its workers running; stopped after."""
    for name, value in bff_environment(queue_dsn, kit.under_test.modules).items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    await kit.start_all()
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        app: Any = RequireTrio(create_app(), REQUIRE_TRIO)  # an ASGI app, as Hypercorn takes
        serving = functools.partial(serve, app, config, shutdown_trigger=shutdown.wait)
        binds = await nursery.start(serving)
        try:
            async with httpx.AsyncClient(base_url=binds[0], timeout=QUERY_WITHIN) as http:
                await _wait_ready(http)
                yield Plane(binds[0], http, kit)
        finally:
            shutdown.set()


async def _wait_ready(http: httpx.AsyncClient) -> None:
    """Until ``/readyz`` answers 200; past :data:`READY_WITHIN`, fail with its reason."""
    last: httpx.Response | None = None
    with trio.move_on_after(READY_WITHIN):
        while True:
            last = await http.get("/readyz")
            if last.status_code == 200:
                return
            await trio.sleep(0.05)
    why = last.text if last is not None else "no answer"
    raise AssertionError(f"the kit's BFF is not ready within {READY_WITHIN:g}s: {why}")
