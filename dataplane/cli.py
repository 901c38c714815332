"""The ``dataplane`` command line."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import trio

from dataplane.bff.openapi import command as openapi_command
from dataplane.compat import install_process
from dataplane.core.errors import DataPlaneError
from dataplane.core.settings import from_env
from dataplane.db import Database, open_bridge, with_params
from dataplane.deploy import command as deploy_command
from dataplane.dev.ports import HELP as DEV_PORTS_HELP
from dataplane.operator import commands as operator_commands
from dataplane.operator import invalidate as invalidate_command
from dataplane.queue import QueueConfig, open_queue_database
from dataplane.queue import roles as roles_command
from dataplane.queue.migrations import migrate
from telemetry.logs import configure_logging

log = logging.getLogger("dataplane")


def _queue_db(name: str) -> AbstractAsyncContextManager[Database]:
    return open_queue_database(from_env(QueueConfig).url, name)


async def _cmd_migrate(args: argparse.Namespace) -> int:
    async with open_bridge(), _queue_db("migrate") as db:
        applied = await migrate(db)
    print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'none pending'}")
    return 0


async def _cmd_worker(args: argparse.Namespace) -> int:
    from dataplane.worker.config import WorkerProcessConfig
    from dataplane.worker.main import serve_worker

    return await serve_worker(from_env(WorkerProcessConfig))


async def _cmd_maintenance(args: argparse.Namespace) -> int:
    from dataplane.maintenance.schedule import Maintenance

    async with open_bridge(), _queue_db("maintenance") as db:
        maintenance = Maintenance(db, interval=args.interval)
        if not args.once:
            await maintenance.run()  # until Ctrl-C / SIGTERM ends the process
        result = await maintenance.run_once()
    if result is None:
        return 1
    print(result if result.elected else "another process holds the maintenance lock")
    return 0


async def _cmd_bff(args: argparse.Namespace) -> int:
    return await _serve("dataplane.app:app", args)


async def _cmd_capcom(args: argparse.Namespace) -> int:
    # By name: dataplane never imports telemetry (the layering contract).
    return await _serve("dataplane.capcom.app:app", args)


async def _cmd_console(args: argparse.Namespace) -> int:
    return await _serve("dataplane.console.app:app", args)


async def _serve(target: str, args: argparse.Namespace) -> int:
    """Serve ``target`` in this process until SIGINT/SIGTERM (then 0); an exception
    that ends the server propagates, so the process exits non-zero."""
    from dataplane.http import ServeConfig, serve_app

    config = from_env(ServeConfig)
    binds = {"bff": config.bff_bind, "capcom": config.capcom_bind}
    default_bind = binds.get(args.command, config.console_bind)
    await serve_app(
        target,
        bind=args.bind or [default_bind],
        keep_alive_seconds=(
            config.keep_alive_seconds if args.keep_alive is None else args.keep_alive
        ),
        shutdown_grace_seconds=(
            config.shutdown_grace_seconds
            if args.graceful_timeout is None
            else args.graceful_timeout
        ),
    )
    return 0


def _cmd_surfaces(args: argparse.Namespace) -> int:
    from dataplane.surfaces import SurfacesConfig
    from dataplane.surfaces.listing import operation_rows, table_lines

    rows = operation_rows(from_env(SurfacesConfig).registry())
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no surfaces registered (install a surface package, or set DATAPLANE_SURFACES)")
        return 0
    for line in table_lines(rows):
        print(line)
    return 0


def _cmd_new_surface(args: argparse.Namespace) -> int:
    from pathlib import Path

    from dataplane.surfaces import SurfacesConfig
    from dataplane.surfaces.scaffold import scaffold

    registry = from_env(SurfacesConfig, probe_enabled=True).registry()
    registered = {sid: entry.origin for sid, entry in registry.entries.items()}
    root = scaffold(args.name, Path(args.dir), registered)
    print(f"wrote {root}: pip install -e '{root}[test]' && python -m pytest {root}")
    return 0


async def _cmd_demo_db(args: argparse.Namespace) -> int:
    from dataplane.core.errors import ConfigError
    from dataplane.surfaces import SurfacesConfig

    builders = from_env(SurfacesConfig).registry().demo_db_builders()
    if not builders:
        raise ConfigError(
            "no installed surface package ships a demo client DB "
            "(for the demo LMS: pip install -e examples/lms)"
        )
    package, build = builders[0]
    print(f"building the demo client DB of {package.name}", file=sys.stderr)
    async with open_bridge():
        ro_dsn = await build(
            args.admin_dsn,
            name=args.name,
            ro_password=args.ro_password,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
    # The caller chose the password: the DSN goes to stdout (a container's log) without it.
    print(with_params(ro_dsn, password="***"))
    return 0


def _cmd_token(args: argparse.Namespace) -> int:
    from dataplane.auth.config import JwtConfig
    from dataplane.auth.verifier import mint_token
    from dataplane.core.errors import ConfigError

    jwt = from_env(JwtConfig)
    if not jwt.secret:
        raise ConfigError("DATAPLANE_JWT_SECRET is not set (dataplane token mints HS256 tokens)")
    branches = [b.strip() for b in args.branches.split(",") if b.strip()] if args.branches else None
    print(
        mint_token(
            jwt.secret,
            client=args.client,
            sub=args.sub,
            staff=args.staff,
            branches=branches,
            email=args.email,
            ttl=args.ttl,
            audience=jwt.audience,
            issuer=jwt.issuer,
            roles=args.role or None,
        )
    )
    return 0


def _cmd_dev(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.ha:
        from dataplane.dev.ha import run_ha

        return run_ha(Path(args.dir) / "ha")
    from dataplane.dev.supervisor import run_dev

    return run_dev(
        fresh=args.fresh,
        port=args.port,
        dev_dir=Path(args.dir),
        otlp=args.otlp,
        reload=args.reload,
        base_port=args.base_port,
    )


def _add_serve_parsers(sub: Any) -> None:
    for role, what, bind in (
        ("bff", "the surface BFF", "DATAPLANE_BIND, else 127.0.0.1:8000"),
        ("capcom", "the telemetry receiver", "DATAPLANE_CAPCOM_BIND, else 127.0.0.1:8001"),
        ("console", "the operator console", "DATAPLANE_CONSOLE_BIND, else 127.0.0.1:8002"),
    ):
        serve = sub.add_parser(
            role,
            help=f"serve {what} (Hypercorn, Trio, HTTP/1.1) until SIGTERM; a crash exits non-zero",
        )
        serve.add_argument(
            "--bind", action="append", metavar="HOST:PORT", help=f"repeatable (default: {bind})"
        )
        serve.add_argument(
            "--keep-alive",
            type=float,
            metavar="SECONDS",
            help="close idle keep-alive connections after this "
            "(default: DATAPLANE_KEEP_ALIVE_SECONDS, else 75)",
        )
        serve.add_argument(
            "--graceful-timeout",
            type=float,
            metavar="SECONDS",
            help="on SIGTERM, requests in flight may take this long, then their connections "
            "are closed (default: DATAPLANE_SHUTDOWN_GRACE_SECONDS, else 5)",
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dataplane", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("migrate", help="apply sql/ migrations to MAESTRO_QUEUES_URL")

    operator_commands.add_parsers(sub)  # jobs, queue, audit

    sub.add_parser("worker", help="one data worker for SURFACE_QUEUE_TYPE")

    _add_serve_parsers(sub)

    surf = sub.add_parser("surfaces", help="every registered surface and operation")
    surf.add_argument("--json", action="store_true", help="one JSON array, for tooling")

    new = sub.add_parser("new-surface", help="write a minimal, tested surface package")
    new.add_argument("name", help="the surface id (lower-case letters, digits, _)")
    new.add_argument("--dir", default=".", help="where to write it")

    maint = sub.add_parser(
        "maintenance",
        help="retention and lapsed leases (workers run it too; one process at a time)",
    )
    maint.add_argument("--once", action="store_true", help="one pass, then exit")
    maint.add_argument("--interval", type=float, default=60.0, help="seconds between passes")

    demo = sub.add_parser(
        "demo-db", help="create and seed the demo client DB; print its read-only DSN"
    )
    demo.add_argument("--admin-dsn", required=True, help="a superuser DSN on the target server")
    demo.add_argument("--name", default="dataplane_demo", help="database name")
    demo.add_argument(
        "--ro-password", default="dataplane_ro", help="password of dataplane_ro (not printed)"
    )

    tok = sub.add_parser("token", help="mint a JWT with DATAPLANE_JWT_SECRET (development, tests)")
    tok.add_argument("--client", required=True)
    tok.add_argument("--staff", action="store_true")
    tok.add_argument("--branches", help="comma-separated branch ids (staff default: *)")
    tok.add_argument("--sub", default="dev-user", help="the user id (sub claim)")
    tok.add_argument("--email")
    tok.add_argument("--ttl", type=int, default=3600, help="seconds")
    tok.add_argument(
        "--role",
        action="append",
        choices=["dataplane:operator", "dataplane:viewer"],
        help="a console role in the roles claim (repeatable)",
    )

    dev = sub.add_parser("dev", help="the whole stack on an embedded Postgres")
    dev.add_argument("--fresh", action="store_true", help="start over from an empty .dataplane/")
    ports = dev.add_mutually_exclusive_group()
    ports.add_argument("--port", type=int, default=8000, help="the BFF's port (default: 8000)")
    ports.add_argument("--base-port", type=int, metavar="N", help=DEV_PORTS_HELP)
    dev.add_argument("--dir", default=".dataplane", help="where the embedded state lives")
    dev.add_argument("--ha", action="store_true", help="only an HA Postgres (Patroni); its DSNs")
    dev.add_argument(
        "--reload",
        action="store_true",
        help="restart a surface's workers (and the BFF when what it serves changed) when a "
        "file of its package changes (editable installs; needs the dev extra: watchfiles)",
    )
    dev.add_argument(
        "--otlp",
        metavar="URL",
        help="send every process's traces and metrics to this OTLP/HTTP endpoint "
        "(e.g. http://127.0.0.1:4318)",
    )

    deploy_command.add_parser(sub)
    openapi_command.add_parser(sub)
    roles_command.add_parser(sub)
    invalidate_command.add_parser(sub)
    return parser


OPENS_DATABASES = frozenset(
    {"migrate", "jobs", "queue", "audit", "maintenance", "demo-db", "invalidate", "dev"}
)
SYNC_COMMANDS = {
    "token": _cmd_token,
    "dev": _cmd_dev,
    "deploy": deploy_command.run,
    "openapi": openapi_command.run,
    "roles": roles_command.run,
    "surfaces": _cmd_surfaces,
    "new-surface": _cmd_new_surface,
}
COMMANDS = {
    "bff": _cmd_bff,
    "capcom": _cmd_capcom,
    "console": _cmd_console,
    "migrate": _cmd_migrate,
    **operator_commands.COMMANDS,
    "worker": _cmd_worker,
    "maintenance": _cmd_maintenance,
    "demo-db": _cmd_demo_db,
    "invalidate": invalidate_command.run,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        configure_logging(level=logging.DEBUG if args.verbose else logging.INFO)
        if args.command in OPENS_DATABASES:  # worker, bff, capcom: in their own startup
            install_process()  # psycopg and OpenTelemetry (dataplane.compat)
        if args.command in SYNC_COMMANDS:
            return SYNC_COMMANDS[args.command](args)
        code: int = trio.run(COMMANDS[args.command], args)
        return code
    except DataPlaneError as exc:
        print(f"dataplane {args.command}: {exc}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:
        # Nurseries wrap errors in groups: a configuration error is still one line.
        matched, rest = group.split(DataPlaneError)
        if matched is None or rest is not None:
            raise
        print(f"dataplane {args.command}: {_first_leaf(matched)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (`dataplane jobs show ID | head`): stop quietly,
        # as a shell tool does. Point stdout at /dev/null so the interpreter's own flush
        # at exit cannot fail again. Servers never write stdout, so this is the commands'.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what the shell reports for a command killed by it


def _first_leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


if __name__ == "__main__":
    sys.exit(main())
