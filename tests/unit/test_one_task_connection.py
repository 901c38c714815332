"""``edge.OneTaskHTTPConnection``: a Quart-Trio request handled in the app's own task.

The test plays the ASGI server: it calls the app with the ``receive`` and ``send`` an
ASGI server gives. The route runs in the calling task (Quart-Trio's own connection runs
it in a child task); a disconnect still cancels a route that waits; an error in the
route still answers 500. The whole BFF runs on it in every acceptance test."""

from __future__ import annotations

from typing import Any

import trio
from quart_trio import QuartTrio

from dataplane.edge import OneTaskHTTPConnection


def make_app() -> tuple[QuartTrio, dict[str, Any]]:
    app = QuartTrio("one-task")
    app.asgi_http_class = OneTaskHTTPConnection
    seen: dict[str, Any] = {}

    @app.get("/task")
    async def task() -> str:
        seen["task"] = trio.lowlevel.current_task()
        return "ok"

    waiting = trio.Event()
    seen["waiting"] = waiting

    @app.get("/wait")
    async def wait() -> str:
        waiting.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            seen["cancelled"] = True
            raise
        return "never"

    @app.get("/boom")
    async def boom() -> str:
        raise RuntimeError("boom")

    return app, seen


def scope(path: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"test")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "extensions": {},
    }


class Server:
    """The ASGI server's side: the request's messages in, the response's out."""

    def __init__(self, *, disconnect: trio.Event | None = None) -> None:
        self.sent: list[dict[str, Any]] = []
        self._first = True
        self._disconnect = trio.Event() if disconnect is None else disconnect

    async def receive(self) -> dict[str, Any]:
        if self._first:
            self._first = False
            return {"type": "http.request", "body": b"", "more_body": False}
        await self._disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            self._disconnect.set()  # as Hypercorn does once a response is complete

    @property
    def status(self) -> int:
        return next(m["status"] for m in self.sent if m["type"] == "http.response.start")


async def test_the_route_runs_in_the_calling_task() -> None:
    app, seen = make_app()
    server = Server()
    with trio.fail_after(10):
        await app(scope("/task"), server.receive, server.send)  # type: ignore[arg-type]
    assert server.status == 200
    assert seen["task"] is trio.lowlevel.current_task()


async def test_a_disconnect_cancels_a_waiting_route() -> None:
    app, seen = make_app()
    gone = trio.Event()
    server = Server(disconnect=gone)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(app, scope("/wait"), server.receive, server.send)
            await seen["waiting"].wait()
            gone.set()  # the client went away
    assert seen.get("cancelled") is True
    assert not server.sent  # nothing was answered


async def test_an_error_in_the_route_answers_500() -> None:
    app, _ = make_app()
    server = Server()
    with trio.fail_after(10):
        await app(scope("/boom"), server.receive, server.send)  # type: ignore[arg-type]
    assert server.status == 500
