"""Shared test helpers: envelopes, worker processes, waiting."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dataplane.core.errors import LeaseLost
from dataplane.db import Database
from dataplane.dev.embedded import free_port
from dataplane.dev.ports import taken
from dataplane.queue import Blob, ClaimedJob, Completion, EnqueueResult, QueueClient, StoredBlob
from dataplane.queue.envelope import Auth, Envelope

STAFF = Auth(client="acme", user_id="1", actor_email="ops@acme.test", staff=True, branches=("*",))
NORTH = Auth(
    client="acme", user_id="2", actor_email="n@acme.test", staff=False, branches=("acme-north",)
)


async def complete(
    queue: QueueClient, job: ClaimedJob, result: Any, *, blob: Blob | None = None
) -> None:
    """Finish one held job (:meth:`QueueClient.complete_many` of one); raises
    :class:`LeaseLost` if the claim is no longer ours."""
    done = await queue.complete_many([Completion(job, result, blob)])
    if job.id not in done:
        raise LeaseLost(f"job {job.id}: claim {job.dequeue_count} by {job.worker_id} is lost")


async def read_blob(queue: QueueClient, job_id: Any) -> StoredBlob | None:
    """The newest unexpired blob of a job with its bytes (its head, then one chunk)."""
    head = await queue.get_blob_head(job_id)
    if head is None:
        return None
    data = await queue.get_blob_chunk(head.id, 0, head.size) if head.size else b""
    return dataclasses.replace(head, data=data or b"")


def envelope(
    surface: str, operation: str, params: Mapping[str, Any], auth: Auth = STAFF, version: int = 1
) -> Envelope:
    return Envelope(surface, operation, version, dict(params), auth)


async def session_locks(db: Database) -> tuple[int, int]:
    """(held, waited for) session locks of :mod:`dataplane.db.lock` in this database: the
    on-call locks (the only two-key advisory locks the plane takes)."""
    row = await db.fetchone(
        "SELECT count(*) FILTER (WHERE granted) AS held,"
        " count(*) FILTER (WHERE NOT granted) AS waiting FROM pg_locks"
        " WHERE locktype = 'advisory' AND objsubid = 2"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    assert row is not None
    return int(row["held"]), int(row["waiting"])


async def liveness_lapsed(db: Database, worker_id: str) -> bool:
    """Whether ``worker_id``'s row of ``maestro_workers`` has lapsed in Postgres' clock."""
    row = await db.fetchone(
        "SELECT alive_until < now() AS lapsed FROM maestro_workers WHERE worker_id = %(w)s",
        {"w": worker_id},
    )
    return bool(row and row["lapsed"])


async def submit(
    queue: QueueClient,
    surface: str,
    operation: str,
    params: Mapping[str, Any],
    auth: Auth = STAFF,
    *,
    suffix: str = "",
    max_dequeues: int | None = None,
) -> EnqueueResult:
    env = envelope(surface, operation, params, auth)
    return await queue.enqueue(
        f"surface-{surface}{suffix}", env.dedupe_key, env.to_json(), max_dequeues=max_dequeues
    )


class WorkerProcess:
    """A real ``dataplane worker`` child process."""

    def __init__(
        self, env: Mapping[str, str], log_path: str, *, prefix: tuple[str, ...] = ()
    ) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")  # closed in stop()
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "dataplane", "worker"],
            env={**os.environ, **env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: stop() can end Hypercorn's worker too
        )

    def output(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"worker exited early:\n{self.output()}")
        return " serving " in self.output()

    def wait_ready_blocking(self, within: float = 30.0) -> None:
        """For synchronous tests (it blocks the thread)."""
        deadline = time.monotonic() + within
        while not self._ready():
            if time.monotonic() > deadline:
                raise AssertionError(f"worker not ready within {within}s:\n{self.output()}")
            time.sleep(0.05)

    async def wait_ready(self, within: float = 30.0) -> None:
        """Wait for the worker's "serving" line without blocking the Trio loop."""
        from tests.conftest import wait_until

        await wait_until(self._ready, within=within, interval=0.05)

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, within: float = 60.0) -> int:
        return self.proc.wait(timeout=within)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self._log.close()


JWT_SECRET = "test-secret-that-is-long-enough-for-hs256!"
# DATAPLANE_NOTIFY_SECRET of the tests' workers and BFFs: small answers ride sealed.
NOTIFY_SECRET = "test-notify-secret-at-least-32-characters"


def token(
    client: str = "acme",
    *,
    sub: str = "u1",
    staff: bool = False,
    branches: list[str] | None = None,
    ttl: int = 3600,
    secret: str = JWT_SECRET,
    **extra: Any,
) -> str:
    from dataplane.auth.verifier import mint_token

    return mint_token(
        secret,
        client=client,
        sub=sub,
        staff=staff,
        branches=branches if branches is not None else (["*"] if staff else ["acme-north"]),
        ttl=ttl,
        **extra,
    )


def bearer(tok: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tok}"}


class SseEvent(dict[str, Any]):
    @property
    def name(self) -> str:
        return str(self.get("event", "message"))

    @property
    def json(self) -> Any:
        import json

        return json.loads(self["data"])


async def read_sse(
    client: Any,
    url: str,
    headers: Mapping[str, str] | None = None,
    *,
    stop_at_final: bool = True,
    on_event: Callable[[SseEvent], None] | None = None,
) -> tuple[int, Mapping[str, str], list[SseEvent]]:
    """GET an event stream; return (status, headers, events) until done/error or close.
    ``on_event`` is told of each event as it arrives."""
    events: list[SseEvent] = []
    async with client.stream("GET", url, headers=dict(headers or {})) as resp:
        if resp.status_code != 200:
            await resp.aread()
            return resp.status_code, resp.headers, events
        current = SseEvent()
        async for line in resp.aiter_lines():
            if line == "":
                if current:
                    events.append(current)
                    if on_event is not None:
                        on_event(current)
                    if stop_at_final and current.name in ("done", "error"):
                        break
                current = SseEvent()
            elif line.startswith(":"):
                current.setdefault("comments", []).append(line[1:].strip())
            else:
                key, _, value = line.partition(":")
                current[key] = value[1:] if value.startswith(" ") else value
        return resp.status_code, resp.headers, events


class BffProcess:
    """A real ``hypercorn -k trio dataplane.app:app`` child process, or with ``command``
    (``("-m", "dataplane", "bff")``, ``("-m", "dataplane", "capcom")``) that command of
    this Python, given ``--bind 127.0.0.1:<port>`` and ``args``."""

    def __init__(
        self,
        env: Mapping[str, str],
        log_path: str,
        *,
        port: int,
        args: tuple[str, ...] = (),
        app: str = "dataplane.app:app",  # or dataplane.capcom.app:app, also with /readyz
        command: tuple[str, ...] | None = None,
    ) -> None:
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self._log = open(log_path, "wb")
        bind = f"127.0.0.1:{port}"
        if command is None:
            argv = [sys.executable, "-m", "hypercorn", "-b", bind, *args, app]
        else:
            argv = [sys.executable, *command, "--bind", bind, *args]
        self.proc = subprocess.Popen(
            argv,
            env={**os.environ, **env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: stop() can end Hypercorn's worker too
        )

    def output(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    async def wait_ready(self, within: float = 30.0) -> None:
        import httpx
        import trio

        async with httpx.AsyncClient(base_url=self.base, timeout=2) as client:
            with trio.fail_after(within):
                while True:
                    if self.proc.poll() is not None:
                        raise AssertionError(f"BFF exited early:\n{self.output()}")
                    try:
                        if (await client.get("/readyz")).status_code == 200:
                            return
                    except httpx.HTTPError:
                        pass
                    await trio.sleep(0.1)

    def wait_ready_blocking(self, within: float = 30.0) -> None:
        """wait_ready for synchronous tests (it blocks the thread): /readyz answers 200."""
        import httpx

        deadline = time.monotonic() + within
        with httpx.Client(base_url=self.base, timeout=2) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise AssertionError(f"{self.base} exited early:\n{self.output()}")
                try:
                    if client.get("/readyz").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        raise AssertionError(f"{self.base} not ready within {within}s:\n{self.output()}")

    def kill(self) -> None:
        """SIGKILL the serving process and Hypercorn's parent at once (a crash)."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        # Hypercorn's CLI serves from a spawned worker process: a parent killed (or one
        # that did not stop it) leaves that worker serving on. End the whole group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._log.close()

    def connections(self) -> list[Any]:
        """The TCP connections of the serving process (and of its children: Hypercorn's
        CLI serves from a spawned worker), as ``psutil`` reports them."""
        import psutil

        found = []
        try:
            parent = psutil.Process(self.proc.pid)
            for proc in [parent, *parent.children(recursive=True)]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    found.extend(proc.net_connections(kind="tcp"))
        except psutil.NoSuchProcess:
            pass
        return found


def capcom_process(env: Mapping[str, str], log_path: str, token: str) -> BffProcess:
    """A real ``hypercorn -k trio dataplane.capcom.app:app`` on a free port, taking ``token``."""
    return BffProcess(
        {**env, "DATAPLANE_CAPCOM_TOKEN": token},
        log_path,
        port=free_port(),
        args=("-k", "trio"),
        app="dataplane.capcom.app:app",
    )


def free_base_port(span: int = 30) -> int:
    """A base port with ``span`` free ports from it (``dataplane dev --base-port``),
    below the kernel's ephemeral range, so no outgoing connection takes one meanwhile."""
    for _ in range(100):
        base = random.randrange(20000, 32000 - span)
        if not any(taken(base + i) for i in range(span)):
            return base
    raise AssertionError(f"no {span} free ports in a row below 32000")


FAILING_SURFACE = """
from dataplane.surfaces.manifest import Operation, surface


def price_of(catalog, sku):
    return catalog[sku]  # the line that raises


async def quote(ctx):
    return {"price": price_of({}, ctx.params.get("sku", "oops"))}


SURFACE = surface(
    Operation(
        "quote",
        1,
        {"type": "object", "properties": {"sku": {"type": "string"}}},
        quote,
    ),
    id="shop",
    needs_client_db=False,
)
"""


@dataclasses.dataclass(frozen=True)
class FailingSurface:
    """A surface package of its own, ``shop`` (queue type ``surface-shop``), whose
    ``quote`` raises ``KeyError: 'oops'`` from a helper of the package: a real file
    outside the plane, so its frames are the surface's own."""

    file: Path  # the package's __init__.py
    env: dict[str, str]  # for a process that serves it (or registers it)
    frame: str  # the innermost frame of the surface's code, as a record names it
    queue_type: str = "surface-shop"


def failing_surface(root: Path) -> FailingSurface:
    """Write the ``shopsurface`` package under ``root/src``."""
    package = root / "src" / "shopsurface"
    package.mkdir(parents=True, exist_ok=True)
    source = textwrap.dedent(FAILING_SURFACE).lstrip()
    (package / "__init__.py").write_text(source)
    line = next(n for n, text in enumerate(source.splitlines(), 1) if "line that raises" in text)
    path = f"{root / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    return FailingSurface(
        package / "__init__.py",
        {"DATAPLANE_SURFACES": "shopsurface:SURFACE", "PYTHONPATH": path},
        f"shopsurface/__init__.py:{line} in price_of",
    )
