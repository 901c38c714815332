"""``dataplane dev``: the whole stack on an embedded Postgres, one command.

Prepares ``./.dataplane/`` (kept between runs; ``--fresh`` starts over): an
embedded Postgres, the queue DB migrated, the demo client DB created and seeded
once with its read-only role, and a development JWT secret. Then it runs, as
separate child processes supervised from one Trio nursery, the BFF (Hypercorn
``-k trio``), one worker per demo surface plus ``probe``, and the telemetry
receiver when it is installed. A child that dies is logged and restarted with
backoff. Ctrl-C (or SIGTERM) stops every child — SIGTERM, then SIGKILL after a
short grace — and then Postgres, within a few seconds, leaving nothing behind.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import trio

from dataplane.bff.auth import mint_token
from dataplane.db import DatabaseConfig, open_bridge, open_database, with_params
from dataplane.dev.embedded import EmbeddedPostgres, free_port
from dataplane.queue.migrations import migrate
from dataplane.surfaces import all_surfaces
from dataplane.surfaces.demo_db import create_demo_db, ensure_database

log = logging.getLogger("dataplane.dev")

DEV_DIR = Path(".dataplane")
QUEUE_DB = "dataplane_queues"
CHILD_STOP_GRACE = 3.0  # seconds between SIGTERM and SIGKILL for a child
RESTART_BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0)  # seconds before restarting a dead child
STABLE_AFTER = 30.0  # a child that ran this long resets its backoff
READY_WAIT = 60.0  # seconds to wait for the BFF to answer /readyz


@dataclass
class Child:
    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    restarts: int = 0
    pid: int | None = field(default=None)


async def _stop_child(process: trio.Process) -> None:
    """Cancel delivery: SIGTERM, a short grace, then SIGKILL."""
    try:
        process.terminate()
        with trio.move_on_after(CHILD_STOP_GRACE):
            await process.wait()
            return
        process.kill()
    except ProcessLookupError:
        pass


async def supervise(child: Child, log_dir: Path) -> None:
    """Run ``child`` forever: restart it with backoff when it exits."""
    failures = 0
    while True:
        log_path = log_dir / f"{child.name}.log"
        started = trio.current_time()
        async with await trio.open_file(log_path, "ab") as out:
            process = await trio.lowlevel.open_process(
                list(child.argv),
                env={**os.environ, **child.env},
                stdout=out.wrapped,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches the supervisor, which stops children
            )
            child.pid = process.pid
            try:
                code = await process.wait()
            finally:
                if process.returncode is None:
                    with trio.CancelScope(shield=True):
                        await _stop_child(process)
        if trio.current_time() - started > STABLE_AFTER:
            failures = 0
        delay = RESTART_BACKOFF[min(failures, len(RESTART_BACKOFF) - 1)]
        failures += 1
        child.restarts += 1
        log.warning(
            "%s exited with status %s; restarting in %gs (log: %s)",
            child.name,
            code,
            delay,
            log_path,
        )
        await trio.sleep(delay)


def _secret(dev_dir: Path) -> str:
    path = dev_dir / "jwt-secret"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(48))
        path.chmod(0o600)
    return path.read_text().strip()


async def _prepare(server: EmbeddedPostgres, say: object) -> tuple[str, str]:
    """Queue DB migrated and demo DB seeded; returns (queue DSN, read-only client DSN)."""
    assert callable(say)
    admin = server.dsn()
    async with open_bridge():
        async with open_database(DatabaseConfig(admin, pool_size=1)) as db:
            await ensure_database(db, QUEUE_DB)
        queue_dsn = with_params(admin, dbname=QUEUE_DB)
        async with open_database(DatabaseConfig(queue_dsn, pool_size=1)) as db:
            applied = await migrate(db)
            say(f"queue DB ready ({len(applied)} migration(s) applied)")
        say("demo client DB: preparing (the first run seeds ~200k rows) ...")
        ro_dsn = await create_demo_db(admin, progress=lambda line: say("  " + line))
    return queue_dsn, ro_dsn


def _children(
    port: int, queue_dsn: str, ro_dsn: str, secret: str, capcom_port: int | None
) -> list[Child]:
    common = {
        "MAESTRO_QUEUES_URL": queue_dsn,
        "DATAPLANE_JWT_SECRET": secret,
        "DATAPLANE_PROBE": "1",
        "DATAPLANE_SHUTDOWN_GRACE_SECONDS": "2",
        "PYTHONUNBUFFERED": "1",
    }
    if capcom_port is not None:
        common["CAPCOM_URL"] = f"http://127.0.0.1:{capcom_port}"
        common["CAPCOM_TOKEN"] = secrets.token_urlsafe(32)
    py = sys.executable
    children = [
        Child(
            "bff",
            [py, "-m", "hypercorn", "-k", "trio", "-b", f"127.0.0.1:{port}", "dataplane.app:app"],
            common,
        )
    ]
    for surface in all_surfaces(probe_enabled=True).values():
        env = {**common, "SURFACE_QUEUE_TYPE": surface.queue_type().name}
        if surface.needs_client_db:
            env["CLIENT_DB_URL"] = ro_dsn
        children.append(Child(f"worker-{surface.id}", [py, "-m", "dataplane", "worker"], env))
    if capcom_port is not None:
        children.append(
            Child(
                "capcom",
                [
                    py,
                    "-m",
                    "hypercorn",
                    "-k",
                    "trio",
                    "-b",
                    f"127.0.0.1:{capcom_port}",
                    "telemetry.capcom:app",
                ],
                common,
            )
        )
    return children


async def _wait_ready(port: int) -> bool:
    import httpx

    async with httpx.AsyncClient(timeout=2) as client:
        with trio.move_on_after(READY_WAIT):
            while True:
                try:
                    resp = await client.get(f"http://127.0.0.1:{port}/readyz")
                    if resp.status_code == 200:
                        return True
                except httpx.HTTPError:
                    pass
                await trio.sleep(0.2)
    return False


async def _run(server: EmbeddedPostgres, dev_dir: Path, port: int) -> None:
    def say(line: str) -> None:
        print(f"dataplane dev: {line}", file=sys.stderr, flush=True)

    queue_dsn, ro_dsn = await _prepare(server, say)
    secret = _secret(dev_dir)
    capcom_port = free_port() if importlib.util.find_spec("telemetry.capcom") else None
    children = _children(port, queue_dsn, ro_dsn, secret, capcom_port)
    log_dir = dev_dir / "logs"
    log_dir.mkdir(exist_ok=True)
    async with trio.open_nursery() as nursery:
        for child in children:
            nursery.start_soon(supervise, child, log_dir)
        ready = await _wait_ready(port)
        token = mint_token(secret, client="acme", sub="1", staff=True, ttl=30 * 24 * 3600)
        url = f"http://127.0.0.1:{port}"
        print(
            "\n".join(
                [
                    "",
                    f"  Surface Data Plane is {'up' if ready else 'starting (slowly)'}: {url}",
                    f"  Demo page:      {url}/?token=<the dev token below>",
                    f"  OpenAPI:        {url}/openapi.json",
                    f"  Dev token:      {token}",
                    "  (staff of client acme, all branches, valid 30 days; mint others with",
                    f"   DATAPLANE_JWT_SECRET=$(cat {dev_dir}/jwt-secret) dataplane token ...)",
                    f"  Try:  curl -s -X POST {url}/api/probe/q -H 'Authorization: Bearer <token>'",
                    "           -H 'Content-Type: application/json'"
                    ' -d \'{"operation":"echo","params":{}}\'',
                    f"  Running:        {', '.join(c.name for c in children)}",
                    f"  Queue DB:       {queue_dsn}",
                    f"  Logs:           {log_dir}/",
                    "  Ctrl-C stops everything.",
                    "",
                ]
            ),
            flush=True,
        )
        await trio.sleep_forever()


def run_dev(*, fresh: bool, port: int, dev_dir: Path = DEV_DIR) -> int:
    dev_dir = dev_dir.resolve()
    if fresh and dev_dir.exists():
        EmbeddedPostgres(dev_dir / "pg").stop("immediate")
        shutil.rmtree(dev_dir)
    dev_dir.mkdir(parents=True, exist_ok=True)
    server = EmbeddedPostgres(dev_dir / "pg")
    print("dataplane dev: starting the embedded Postgres ...", file=sys.stderr, flush=True)
    server.start()
    # SIGTERM ends the run like Ctrl-C does.
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        trio.run(_run, server, dev_dir, port)
    except KeyboardInterrupt:
        pass
    except BaseExceptionGroup as group:
        _interrupted, rest = group.split(KeyboardInterrupt)
        if rest is not None:
            raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.stop("fast")
        print("dataplane dev: stopped", file=sys.stderr, flush=True)
    return 0
