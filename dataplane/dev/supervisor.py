"""``dataplane dev``: the whole stack on an embedded Postgres, one command.

Prepares ``./.dataplane/`` (kept between runs; ``--fresh`` starts over): an
embedded Postgres, the queue DB migrated, the demo client DB created and seeded
once with its read-only role, and a development JWT secret. Then it runs, as
separate child processes supervised from one Trio nursery, the BFF (``dataplane
bff``: Hypercorn's trio worker in the process), one worker per demo surface plus
``probe``, the telemetry receiver (``dataplane capcom``) when it is installed, and the
operators' console (``dataplane console``, as a login of ``dataplane_operator``).
Every child serves Prometheus metrics on a port of its own (the BFF and capcom on
``/metrics`` of their HTTP port, each worker on ``DATAPLANE_METRICS_PORT``), printed
with the URLs, and so are the ``export`` lines that let the CLI of a second shell act on
this plane (:mod:`dataplane.dev.banner`: the operator login's queue URL, the workers'
notify secret). ``--base-port N`` pins every port it listens on, Postgres's included, to an
offset from N (:mod:`dataplane.dev.ports`). ``--otlp URL`` points every child's
OTLP exporter at one endpoint. A child that dies is logged and restarted with
backoff. A handler's failure is printed here as it happens, one line per failed
attempt (:mod:`dataplane.dev.failures`); each child's output is in
``.dataplane/logs/<child>.log``. SIGINT (Ctrl-C), SIGTERM (systemd, ``docker stop``)
and SIGHUP (a closed terminal) all stop every child — SIGTERM, then SIGKILL after a
short grace — and then Postgres, within a few seconds, leaving nothing behind.

If this process dies without that chance (SIGKILL, OOM killer), nothing is left
running for long either: each child is spawned from the main thread with
``PR_SET_PDEATHSIG`` = SIGTERM (Linux), so the kernel tells it to stop when its
parent goes, and a small watchdog process holding the other end of a pipe stops
the embedded Postgres (``pg_ctl stop -m fast``) when the pipe's writer — this
process — is gone.
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
from dataclasses import replace
from pathlib import Path

import trio

from dataplane.core.settings import from_env
from dataplane.db import (
    DatabaseConfig,
    close_to_public,
    ensure_database,
    open_bridge,
    open_database,
    with_params,
)
from dataplane.dev.banner import Banner, banner
from dataplane.dev.children import Child, supervise
from dataplane.dev.config import DevConfig
from dataplane.dev.embedded import EmbeddedPostgres
from dataplane.dev.failures import FailureEcho
from dataplane.dev.ports import DevPorts, dev_ports, free_port
from dataplane.dev.reload import reload_on_change
from dataplane.queue import open_queue_database
from dataplane.queue.migrations import migrate
from dataplane.queue.roles import ensure_login
from dataplane.surfaces import SurfacesConfig
from dataplane.surfaces.manifest import Surface

log = logging.getLogger("dataplane.dev")

DEV_DIR = Path(".dataplane")
QUEUE_DB = "dataplane_queues"
READY_WAIT = 60.0  # seconds to wait for the BFF to answer /readyz
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # each stops everything
WATCHDOG_EXIT = 10.0  # seconds the Postgres watchdog may take to exit once we are done

# The watchdog: blocks until its stdin (a pipe whose only writer is `dataplane dev`)
# reaches EOF, then stops the embedded Postgres if it still runs.
_POSTGRES_WATCHDOG = (
    "import sys; from pathlib import Path;"
    " from dataplane.dev.embedded import EmbeddedPostgres;"
    " sys.stdin.buffer.read(); EmbeddedPostgres(Path(sys.argv[1])).stop('fast')"
)


def _secret(dev_dir: Path) -> str:
    path = dev_dir / "jwt-secret"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(48))
        path.chmod(0o600)
    return path.read_text().strip()


def _surfaces() -> dict[str, Surface]:
    """What is registered (``probe`` included); dev serves exactly that."""
    return from_env(SurfacesConfig, probe_enabled=True).registry().surfaces


async def _prepare(server: EmbeddedPostgres, say: object) -> tuple[str, dict[str, str], str | None]:
    """Queue DB migrated and, when a registered package ships one, its demo client DB
    seeded; returns (the superuser's queue DSN, a queue DSN per kind of process, each a
    login of that kind's role, read-only client DSN or None)."""
    assert callable(say)
    builders = from_env(SurfacesConfig, probe_enabled=True).registry().demo_db_builders()
    admin = server.dsn()
    async with open_bridge():
        async with open_database(DatabaseConfig(admin, pool_size=1)) as db:
            await ensure_database(db, QUEUE_DB)
        queue_dsn = with_params(admin, dbname=QUEUE_DB)
        async with open_queue_database(queue_dsn, "dev") as db:
            applied = await migrate(db)  # and the roles' grants (sql/roles.sql)
            await close_to_public(db)  # only the plane's roles (and the superuser) connect
            logins = {}
            for process in ("bff", "worker", "capcom", "operator"):  # a new password each run
                password = secrets.token_urlsafe(24)
                await ensure_login(db, f"dataplane_dev_{process}", process, password)
                user = f"dataplane_dev_{process}"
                logins[process] = with_params(queue_dsn, user=user, password=password)
            say(f"queue DB ready ({len(applied)} migration(s) applied)")
        ro_dsn = None
        for package, build in builders[:1]:
            say(f"demo client DB of {package.name}: preparing (the first run seeds it) ...")
            ro_dsn = await build(admin, progress=lambda line: say("  " + line))
        if not builders:
            say(
                "no installed surface package ships a demo client DB; serving what needs "
                "none (for the demo LMS: pip install -e examples/lms)"
            )
    return queue_dsn, logins, ro_dsn


def _capcom_installed() -> bool:
    return importlib.util.find_spec("dataplane.capcom.app") is not None


def _children(
    ports: DevPorts,
    logins: dict[str, str],
    ro_dsn: str | None,
    secret: str,
    otlp: str | None = None,
) -> list[Child]:
    capcom_port = ports.capcom if _capcom_installed() else None
    common = {
        "DATAPLANE_JWT_SECRET": secret,
        "DATAPLANE_PROBE": "1",
        "DATAPLANE_SHUTDOWN_GRACE_SECONDS": "2",
        "PYTHONUNBUFFERED": "1",
        "DATAPLANE_METRICS": "1",
        # Workers seal small answers into their done notifies; the BFF opens them.
        "DATAPLANE_NOTIFY_SECRET": secrets.token_urlsafe(32),
    }
    if otlp:
        common["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp
        common["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/protobuf"
    if capcom_port is not None:
        common["DATAPLANE_CAPCOM_URL"] = f"http://127.0.0.1:{capcom_port}"
        common["DATAPLANE_CAPCOM_TOKEN"] = secrets.token_urlsafe(32)
    py = sys.executable
    # `dataplane bff`/`capcom`: Hypercorn in the process itself (a crash is a non-zero
    # exit, which Hypercorn's CLI parent would report as 0), keep-alive 75 s, and the
    # shutdown grace of DATAPLANE_SHUTDOWN_GRACE_SECONDS, within CHILD_STOP_GRACE.
    bff = {**common, "MAESTRO_QUEUES_URL": logins["bff"]}  # each its own role (sql/roles.sql)
    dev = from_env(DevConfig)  # a failed attempt is tried again within seconds
    bind = f"127.0.0.1:{ports.bff}"
    children = [Child("bff", [py, "-m", "dataplane", "bff", "--bind", bind], bff)]
    workers = 0
    for surface in _surfaces().values():
        env = {
            **common,
            "MAESTRO_QUEUES_URL": logins["worker"],
            "SURFACE_QUEUE_TYPE": surface.queue_type().name,
            # An answer that breaks its result schema fails loudly here, where it is
            # written (production checks nothing unless told: DATAPLANE_RESULT_CHECK).
            "DATAPLANE_RESULT_CHECK": "enforce",
            **dev.worker_env(),
        }
        if surface.needs_client_db:
            if ro_dsn is None:
                log.warning(
                    "surface %s needs a client DB and none is set up: no worker", surface.id
                )
                continue
            env["DATAPLANE_CLIENT_DB_URL"] = ro_dsn
        env["DATAPLANE_METRICS_PORT"] = str(ports.worker(workers))  # one port per worker
        workers += 1
        children.append(Child(f"worker-{surface.id}", [py, "-m", "dataplane", "worker"], env))
    if capcom_port is not None:
        children.append(
            Child(
                "capcom",
                [py, "-m", "dataplane", "capcom", "--bind", f"127.0.0.1:{capcom_port}"],
                {**common, "MAESTRO_QUEUES_URL": logins["capcom"]},
            )
        )
    children.append(  # the operators' console, as dataplane_operator
        Child(
            "console",
            [py, "-m", "dataplane", "console", "--bind", f"127.0.0.1:{ports.console}"],
            {**common, "DATAPLANE_CONSOLE_DB_URL": logins["operator"]},
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


async def _run(
    server: EmbeddedPostgres, dev_dir: Path, ports: DevPorts, otlp: str | None, reload: bool = False
) -> None:
    def say(line: str) -> None:
        print(f"dataplane dev: {line}", file=sys.stderr, flush=True)

    queue_dsn, logins, ro_dsn = await _prepare(server, say)
    secret = _secret(dev_dir)
    port = ports.bff
    children = _children(ports, logins, ro_dsn, secret, otlp)
    log_dir = dev_dir / "logs"
    log_dir.mkdir(exist_ok=True)
    failures = FailureEcho()  # a failed attempt's line in this terminal, as it happens
    for child in children:
        if child.name.startswith("worker-"):
            child.echo = failures.watch(child.name)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(failures.run)
        for child in children:
            nursery.start_soon(supervise, child, log_dir)
        if reload:
            bff_env = {**os.environ, **children[0].env}
            nursery.start_soon(reload_on_change, children, _surfaces(), bff_env)
        ready = await _wait_ready(port)
        shown = Banner(ready, ports, secret, dev_dir, children, logins, queue_dsn, otlp, reload)
        print(banner(replace(shown, capcom=_capcom_installed())), flush=True)
        await trio.sleep_forever()


async def _run_until_signal(
    server: EmbeddedPostgres,
    dev_dir: Path,
    ports: DevPorts,
    otlp: str | None = None,
    reload: bool = False,
) -> None:
    """:func:`_run` until SIGINT, SIGTERM or SIGHUP: then cancel it, so every child
    is stopped (each ``supervise`` stops its own), and return."""
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async with trio.open_nursery() as nursery:

            async def stop_on_signal() -> None:
                async for signum in signals:
                    print(
                        f"dataplane dev: {signal.Signals(signum).name}: stopping",
                        file=sys.stderr,
                        flush=True,
                    )
                    nursery.cancel_scope.cancel()

            nursery.start_soon(stop_on_signal)
            await _run(server, dev_dir, ports, otlp, reload)


def _watch_postgres(server: EmbeddedPostgres) -> subprocess.Popen[bytes]:
    """A watchdog that stops ``server`` once this process is gone, however it went."""
    return subprocess.Popen(
        [sys.executable, "-c", _POSTGRES_WATCHDOG, str(server.datadir)],
        stdin=subprocess.PIPE,  # we hold the only write end: EOF when we die
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a signal to our process group is not for it
    )


def run_dev(
    *,
    fresh: bool,
    port: int,
    dev_dir: Path = DEV_DIR,
    otlp: str | None = None,
    reload: bool = False,
    base_port: int | None = None,
) -> int:
    # Every pinned port checked before anything starts (a taken one: one line, exit 1).
    workers, capcom = len(_surfaces()), _capcom_installed()
    ports = dev_ports(port=port, base_port=base_port, workers=workers, capcom=capcom)
    dev_dir = dev_dir.resolve()
    if fresh and dev_dir.exists():
        EmbeddedPostgres(dev_dir / "pg").stop("immediate")
        shutil.rmtree(dev_dir)
    dev_dir.mkdir(parents=True, exist_ok=True)
    # A free port for Postgres, unless pinned: none of the ports the BFF, capcom and the
    # console are given, which they bind only later.
    pg_port = ports.postgres or free_port(frozenset({ports.bff, ports.capcom, ports.console}))
    server = EmbeddedPostgres(dev_dir / "pg", port=pg_port)
    # Outside Trio (starting and stopping Postgres), each stop signal is a Ctrl-C;
    # inside it, _run_until_signal receives them.
    previous = {sig: signal.signal(sig, signal.default_int_handler) for sig in STOP_SIGNALS}
    watchdog = None
    try:
        print("dataplane dev: starting the embedded Postgres ...", file=sys.stderr, flush=True)
        watchdog = _watch_postgres(server)
        server.start()
        trio.run(_run_until_signal, server, dev_dir, ports, otlp, reload)
    except KeyboardInterrupt:
        pass
    except BaseExceptionGroup as group:
        _interrupted, rest = group.split(KeyboardInterrupt)
        if rest is not None:
            raise
    finally:
        for signum in STOP_SIGNALS:  # stopping already: a second signal must not cut it short
            signal.signal(signum, signal.SIG_IGN)
        server.stop("fast")
        if watchdog is not None and watchdog.stdin is not None:
            watchdog.stdin.close()  # it finds Postgres stopped and exits
            try:
                watchdog.wait(timeout=WATCHDOG_EXIT)
            except subprocess.TimeoutExpired:
                watchdog.kill()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        print("dataplane dev: stopped", file=sys.stderr, flush=True)
    return 0
