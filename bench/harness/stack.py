"""Bringing up a stack under Trio: BFFs (Hypercorn), workers, the bare hello-world server.

Shared by ``load.py``, ``drain.py`` and ``soak.py``;
the processes themselves are :class:`bench.harness.procs.Child` objects.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import trio

from bench.harness.common import close_to_public
from bench.harness.procs import REPO, Child, Children, children_of, cmdline
from dataplane.dev.embedded import free_port

HOST = "127.0.0.1"
#: The probe surface's queue: ``probe.echo`` and friends (``DATAPLANE_PROBE=1``).
QUEUE_TYPE = "surface-probe"
JWT_SECRET = "bench-e2e-secret-that-is-long-enough-for-hs256!"
# Workers seal small answers into their done notifies, the BFFs open them (README).
NOTIFY_SECRET = "bench-notify-secret-that-is-long-enough!"
SSE_DEADLINE_S = 600.0  # BFF DATAPLANE_SSE_DEADLINE_SECONDS (a whole run)

HELLO_APP = '''"""Bare Hypercorn + Quart-Trio hello world (bench/load.py's reference)."""
from quart_trio import QuartTrio

app = QuartTrio(__name__)


@app.get("/")
async def hello():
    return "hello"
'''


SINK_APP = '''"""An OTLP/HTTP sink: 200 to every export, counts them (bench/load.py tracing)."""
from quart import request
from quart_trio import QuartTrio

app = QuartTrio(__name__)
app.config["MAX_CONTENT_LENGTH"] = 64 * 1024 * 1024
seen = {"exports": 0, "bytes": 0}


@app.get("/")
async def stats():
    return seen


@app.post("/v1/<kind>")
async def export(kind):
    seen["exports"] += 1
    seen["bytes"] += len(await request.get_data())
    return b"", 200, {"Content-Type": "application/x-protobuf"}
'''


def stack_env(
    queue_dsn: str,
    *,
    jwt_secret: str = JWT_SECRET,
    sse_deadline_s: float = SSE_DEADLINE_S,
    drop: tuple[str, ...] = (),
    **extra: str,
) -> dict[str, str]:
    """The environment of the BFF and the workers: ours, without any ``DATAPLANE_*``,
    ``SURFACE_*`` (or ``drop``-prefixed) variable, configured for the probe surface."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("DATAPLANE_", "SURFACE_", *drop))
    }
    env.update(
        MAESTRO_QUEUES_URL=queue_dsn,
        # A scratch server's superuser: the roles are proven by tests/integration/
        # test_roles.py; a bench measures the same statements under any role.
        DATAPLANE_ALLOW_OWNER="1",
        DATAPLANE_JWT_SECRET=jwt_secret,
        DATAPLANE_NOTIFY_SECRET=NOTIFY_SECRET,
        DATAPLANE_PROBE="1",
        # probe alone (a list naming no package): the surface packages installed in the
        # venv are this tree's, which an older tree of an A/B may not load
        DATAPLANE_SURFACES=",",
        DATAPLANE_SSE_DEADLINE_SECONDS=str(sse_deadline_s),
        **extra,
        PYTHONUNBUFFERED="1",
    )
    return env


def migrate_schema(env: Mapping[str, str]) -> str:
    """``dataplane migrate`` as a child process, then the database closed to PUBLIC
    (``bench.harness.common.close_to_public``); the migration's output."""
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
    close_to_public(env["MAESTRO_QUEUES_URL"])
    return done.stdout.strip()


# -- Hypercorn ---------------------------------------------------------------------


#: Hypercorn's default keep-alive timeout (5 s) also closes a kept-alive connection
#: whose next request the loop has not read within 5 s of the last response: under a
#: burst of hundreds of connections that drops requests. The README recommends 75 s.
BFF_OPTIONS = ("--keep-alive", "75")


def hypercorn_argv(port: int, app: str, *options: str) -> list[str]:
    return [sys.executable, "-m", "hypercorn", "-k", "trio", "-b", f"{HOST}:{port}", *options, app]


def serving_child(parent: int) -> int:
    """Hypercorn's serving process: the multiprocessing ``spawn_main`` child."""
    for pid in children_of(parent):
        if "spawn_main" in cmdline(pid):
            return pid
    return parent  # -w 0 would serve in the parent


async def wait_http(child: Child, url: str, within: float = 30.0) -> None:
    """Until ``url`` answers 200 (the child must stay alive meanwhile)."""
    async with httpx.AsyncClient(timeout=2) as client:
        with trio.fail_after(within):
            while True:
                if not child.alive():
                    raise RuntimeError(f"{child.name} exited early:\n{child.output()}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(url)).status_code == 200:
                        return
                await trio.sleep(0.1)


@dataclass
class Hypercorn:
    child: Child
    port: int
    serving: int = 0  # Hypercorn's spawned serving process


async def start_hypercorn(
    kids: Children,
    name: str,
    app: str,
    env: Mapping[str, str],
    *,
    port: int | None = None,
    ready_path: str = "/readyz",
    within: float = 30.0,
    options: Sequence[str] = (),
    cwd: Path = REPO,
) -> Hypercorn:
    """Start ``python -m hypercorn -k trio`` serving ``app``; return once it answers."""
    port = free_port() if port is None else port
    child = kids.start(name, hypercorn_argv(port, app, *options), env, cwd=cwd)
    await wait_http(child, f"http://{HOST}:{port}{ready_path}", within=within)
    serving = serving_child(child.pid)
    child.extra_pids.append(serving)
    return Hypercorn(child, port, serving)


async def start_bff(
    kids: Children,
    name: str,
    env: Mapping[str, str],
    *,
    port: int | None = None,
    within: float = 30.0,
) -> Hypercorn:
    """A BFF (``dataplane.app:app``), ready once ``/readyz`` answers, with the keep-alive
    timeout the README recommends (:data:`BFF_OPTIONS`)."""
    return await start_hypercorn(
        kids, name, "dataplane.app:app", env, port=port, within=within, options=BFF_OPTIONS
    )


async def start_hello(kids: Children, tmp: Path) -> Hypercorn:
    """The bare Hypercorn + Quart-Trio hello world (:data:`HELLO_APP`), run from ``tmp``."""
    (tmp / "e2e_hello_app.py").write_text(HELLO_APP)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DATAPLANE_", "MAESTRO_", "SURFACE_", "OTEL_"))
    }
    return await start_hypercorn(kids, "hello", "e2e_hello_app:app", env, ready_path="/", cwd=tmp)


async def start_sink(kids: Children, tmp: Path) -> Hypercorn:
    """An OTLP/HTTP receiver that drops what it gets (:data:`SINK_APP`), run from ``tmp``."""
    (tmp / "otlp_sink_app.py").write_text(SINK_APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATAPLANE_", "OTEL_"))}
    return await start_hypercorn(
        kids, "otlp-sink", "otlp_sink_app:app", env, ready_path="/", cwd=tmp
    )


# -- workers and stopping ----------------------------------------------------------


async def wait_serving(workers: Iterable[Child], within: float = 30.0, poll: float = 0.02) -> None:
    """Until every worker has logged `` serving `` (boot checks passed, claim loop on)."""
    with trio.fail_after(within):
        for worker in workers:
            while not worker.serving():
                if not worker.alive():
                    raise RuntimeError(f"{worker.name} exited early:\n{worker.output()}")
                await trio.sleep(poll)


async def stop_children(children: Sequence[Child]) -> dict[str, int | None]:
    """Stop them all at once (SIGTERM, then SIGKILL after a grace); name -> exit code."""
    codes: dict[str, int | None] = {}

    async def stop(child: Child) -> None:
        codes[child.name] = await trio.to_thread.run_sync(child.stop, 15.0)

    async with trio.open_nursery() as nursery:
        for child in children:
            nursery.start_soon(stop, child)
    return codes
