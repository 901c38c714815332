"""The end-to-end load client: HTTP sessions, one ``probe.echo`` round trip, closed loops.

Shared by ``load.py`` and ``soak.py``:
a raw keep-alive HTTP/1.1 client on Trio sockets (the cheapest client).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import trio

from bench.harness.common import summary_ms
from bench.harness.procs import CpuMeter, cpu_ms_per_op
from bench.harness.stack import HOST, JWT_SECRET
from dataplane.auth.verifier import mint_token

Headers = Mapping[str, str] | None


class Session(Protocol):
    """One client's HTTP connection(s): plain requests and event streams."""

    async def request(
        self, method: str, path: str, body: bytes | None = None, headers: Headers = None
    ) -> tuple[int, bytes]: ...

    async def events(self, path: str) -> tuple[int, list[tuple[str, str, float]]]:
        """GET an event stream to its end: (status, [(event, data, perf_counter received)])."""
        ...


class ConnectionClosed(Exception):
    """The server closed a :class:`RawSession`'s connection."""


class RawSession:
    """One keep-alive HTTP/1.1 connection on a raw Trio socket: the cheapest client.

    Just enough HTTP for this bench: Content-Length and chunked bodies, ``Connection:
    close`` honoured, one retry when a reused idle connection turns out closed.
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.stream: trio.SocketStream | None = None
        self.buf = bytearray()
        self.host = f"Host: {HOST}:{port}\r\n"

    async def aclose(self) -> None:
        stream, self.stream = self.stream, None
        self.buf.clear()
        if stream is not None:
            with contextlib.suppress(Exception):
                await stream.aclose()

    async def _fill(self) -> None:
        assert self.stream is not None
        data = await self.stream.receive_some(65536)
        if not data:
            raise ConnectionClosed("the server closed the connection")
        self.buf += data

    async def _until(self, sep: bytes) -> bytes:
        while (i := self.buf.find(sep)) < 0:
            await self._fill()
        out = bytes(self.buf[:i])
        del self.buf[: i + len(sep)]
        return out

    async def _exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            await self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    async def _head(self) -> tuple[int, dict[str, str]]:
        lines = (await self._until(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        return int(lines[0].split(" ", 2)[1]), headers

    async def _body(self, headers: Mapping[str, str], on_data: Any) -> bytes:
        if headers.get("transfer-encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                size = int((await self._until(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await self._until(b"\r\n")  # no trailers here
                    return b"".join(parts)
                chunk = await self._exact(size)
                await self._exact(2)
                if on_data is not None:
                    on_data(chunk)
                else:
                    parts.append(chunk)
        return await self._exact(int(headers.get("content-length", "0")))

    async def _exchange(self, head: str, body: bytes, on_data: Any = None) -> tuple[int, bytes]:
        request = head.encode() + body
        for attempt in (1, 2):
            reused = self.stream is not None
            if self.stream is None:
                self.stream = await trio.open_tcp_stream(HOST, self.port)
            try:
                await self.stream.send_all(request)
                status, headers = await self._head()
            except (ConnectionClosed, trio.BrokenResourceError, OSError):
                nothing = not self.buf
                await self.aclose()
                if reused and nothing and attempt == 1:
                    continue  # an idle keep-alive connection the server had closed
                raise
            try:
                data = await self._body(headers, on_data)
            except BaseException:
                await self.aclose()
                raise
            if headers.get("connection", "").lower() == "close":
                await self.aclose()
            return status, data
        raise AssertionError("unreachable")

    async def request(
        self, method: str, path: str, body: bytes | None = None, headers: Headers = None
    ) -> tuple[int, bytes]:
        body = body or b""
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        length = f"Content-Length: {len(body)}\r\n" if method != "GET" else ""
        return await self._exchange(
            f"{method} {path} HTTP/1.1\r\n{self.host}{extra}{length}\r\n", body
        )

    async def events(self, path: str) -> tuple[int, list[tuple[str, str, float]]]:
        out: list[tuple[str, str, float]] = []
        pending = bytearray()

        def on_data(chunk: bytes) -> None:
            pending.extend(chunk)
            while (i := pending.find(b"\n\n")) >= 0:
                block = bytes(pending[:i]).decode()
                del pending[: i + 2]
                event = data = ""
                for line in block.split("\n"):
                    if line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:"):
                        data = line[5:].strip()
                if event:
                    out.append((event, data, time.perf_counter()))

        head = f"GET {path} HTTP/1.1\r\n{self.host}Accept: text/event-stream\r\n\r\n"
        status, _ = await self._exchange(head, b"", on_data)
        return status, out


@contextlib.asynccontextmanager
async def raw_sessions(ports: Sequence[int]) -> AsyncIterator[Callable[[], RawSession]]:
    """A factory of raw keep-alive sessions, each on the next of ``ports`` in turn."""
    made: list[RawSession] = []
    cycle = itertools.cycle(ports)

    def make() -> RawSession:
        made.append(RawSession(next(cycle)))
        return made[-1]

    try:
        yield make
    finally:
        for session in made:
            await session.aclose()


@dataclass
class E2eSample:
    t0: float
    t_202: float = 0.0
    t_queued: float | None = None
    t_done: float = 0.0
    job_id: str = ""
    error: str | None = None

    @property
    def latency(self) -> float:
        return self.t_done - self.t0


async def post_echo(session: Session, headers: Headers, value: str) -> Any:
    body = json.dumps({"operation": "echo", "params": {"value": value}}).encode()
    status, raw = await session.request("POST", "/api/probe/q", body, headers)
    if status != 202:
        raise RuntimeError(f"POST answered {status}: {raw[:200]!r}")
    answer = json.loads(raw)
    if answer["coalesced"]:
        raise RuntimeError("POST coalesced: the values were meant to be distinct")
    return answer


async def e2e_once(session: Session, headers: Headers, value: str) -> E2eSample:
    """POST, then (right after the 202) read the stream to its end; perf_counter stamps."""
    s = E2eSample(time.perf_counter())
    body = await post_echo(session, headers, value)
    s.t_202 = time.perf_counter()
    s.job_id = body["jobId"]
    status, events = await session.events(body["streamUrl"])
    end = time.perf_counter()
    final = next(((e, d, t) for e, d, t in events if e in ("done", "error")), None)
    s.t_queued = next((t for e, _, t in events if e == "queued"), None)
    s.t_done = final[2] if final else end
    if status != 200:
        s.error = f"stream answered {status}"
    elif final is None:
        s.error = "stream ended without a final event"
    elif final[0] != "done" or json.loads(final[1]).get("result", {}).get("echo") != value:
        s.error = f"unexpected final event {final[0]}: {final[1][:200]}"
    return s


def auth_headers() -> dict[str, str]:
    tok = mint_token(JWT_SECRET, client="acme", sub="bench-e2e", staff=True, ttl=3600)
    return {"Authorization": f"Bearer {tok}", "Content-Type": "application/json"}


async def closed_loop(
    seconds: float, clients: int, new_session: Any, one: Any
) -> tuple[list[float], list[str], float]:
    """``clients`` tasks, each on its own session, awaiting ``one(session, k, i)``."""
    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.perf_counter() + seconds

    async def client(k: int) -> None:
        session = new_session()
        i = 0
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            try:
                err = await one(session, k, i)
            except (
                httpx.HTTPError,
                RuntimeError,
                OSError,
                ConnectionClosed,
                trio.BrokenResourceError,
            ) as exc:
                err = f"{type(exc).__name__}: {exc}"
            if err:
                errors.append(err)
            else:
                latencies.append(time.perf_counter() - t0)
            i += 1

    t0 = time.perf_counter()
    with trio.fail_after(seconds + 60):
        async with trio.open_nursery() as nursery:
            for k in range(clients):
                nursery.start_soon(client, k)
    return latencies, errors, time.perf_counter() - t0


async def hello_load(port: int, serving: int, seconds: float, clients: int) -> Any:
    """``GET /`` of the hello world by ``clients`` closed-loop clients, after a 1 s warm-up."""

    async def one(session: Session, k: int, i: int) -> str | None:
        status, body = await session.request("GET", "/")
        return None if status == 200 and body == b"hello" else f"answered {status}"

    async with raw_sessions([port]) as new_session:
        await closed_loop(1.0, clients, new_session, one)
        meter = CpuMeter({"hello": lambda: [serving]})
        cpu0 = meter.snapshot()
        lat, errors, elapsed = await closed_loop(seconds, clients, new_session, one)
        cpu = meter.since(cpu0)
    return {
        "clients": clients,
        "seconds": round(elapsed, 3),
        "completed": len(lat),
        "error_count": len(errors),
        "errors": errors[:5],
        "hello_rps": round(len(lat) / elapsed, 1),
        "latency_ms": summary_ms(lat),
        "cpu": cpu,
        "cpu_ms_per_request": cpu_ms_per_op(cpu, len(lat)),
    }
