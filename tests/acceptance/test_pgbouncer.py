"""The stack through Debian's PgBouncer: it serves in session mode; in transaction
mode, where LISTEN silently breaks, the worker refuses to boot (non-zero, one line)
and the BFF's plane routes answer 503 saying why.

Each test starts its own ``pgbouncer`` on a free port in front of the session's
Postgres. PgBouncer refuses to run as root: as root, it runs as the embedded
Postgres's system user, with its config and auth file in a directory of that user.
Skipped only when the ``pgbouncer`` binary is absent (CI installs it).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
import trio
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dataplane.dev.embedded import SYSTEM_USER, free_port
from tests.helpers import WorkerProcess, bearer, read_sse, token
from tests.real_plane import start_bff

PGBOUNCER = shutil.which("pgbouncer") or (
    "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None
)
START_WITHIN = 10.0  # seconds for pgbouncer to accept connections

pytestmark = pytest.mark.skipif(PGBOUNCER is None, reason="pgbouncer is not installed")


class PgBouncer:
    """A real ``pgbouncer`` in front of the server of ``admin_dsn``, until :meth:`stop`."""

    def __init__(self, admin_dsn: str, pool_mode: str) -> None:
        assert PGBOUNCER is not None
        server = conninfo_to_dict(admin_dsn)
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
        ids = None
        if os.geteuid() == 0:  # pgbouncer will not run as root
            entry = pwd.getpwnam(SYSTEM_USER)  # created by the embedded Postgres
            ids = (entry.pw_uid, entry.pw_gid)
        user = server.get("user", "postgres")
        # The server asks for the password (scram-sha-256): PgBouncer logs in with it.
        (self.dir / "users.txt").write_text(f'"{user}" "{server.get("password", "")}"\n')
        (self.dir / "pgbouncer.ini").write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = host=127.0.0.1 port={server['port']}",
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {self.port}",
                    "unix_socket_dir =",
                    "auth_type = trust",
                    f"auth_file = {self.dir / 'users.txt'}",
                    f"pool_mode = {pool_mode}",
                    "max_client_conn = 1000",
                    "default_pool_size = 100",
                    f"logfile = {self.dir / 'pgbouncer.log'}",
                    "ignore_startup_parameters = extra_float_digits,options",
                    "",
                ]
            )
        )
        if ids:
            for path in (self.dir, *self.dir.iterdir()):
                os.chown(path, *ids)
        self.user = user
        self.proc = subprocess.Popen(
            [PGBOUNCER, str(self.dir / "pgbouncer.ini")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            user=ids[0] if ids else None,
            group=ids[1] if ids else None,
        )

    def dsn(self, dbname: str) -> str:
        return make_conninfo(host="127.0.0.1", port=self.port, user=self.user, dbname=dbname)

    def log(self) -> str:
        path = self.dir / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    async def wait_ready(self, dbname: str) -> None:
        with trio.fail_after(START_WITHIN):
            while True:
                if self.proc.poll() is not None:
                    raise AssertionError(f"pgbouncer exited early:\n{self.log()}")
                try:
                    with psycopg.connect(self.dsn(dbname), connect_timeout=1) as conn:
                        conn.execute("SELECT 1")
                    return
                except psycopg.OperationalError:
                    await trio.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def pgbouncer(pg_admin_dsn: str) -> Iterator[Callable[[str], PgBouncer]]:
    started: list[PgBouncer] = []

    def start(pool_mode: str) -> PgBouncer:
        bouncer = PgBouncer(pg_admin_dsn, pool_mode)
        started.append(bouncer)
        return bouncer

    yield start
    for bouncer in started:
        bouncer.stop()


def _dbname(dsn: str) -> str:
    return str(conninfo_to_dict(dsn)["dbname"])


async def test_the_stack_answers_through_a_session_pooling_pgbouncer(
    pgbouncer: Callable[[str], PgBouncer],
    queue_dsn: str,
    bff_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    nursery: trio.Nursery,
    tmp_path: Path,
) -> None:
    bouncer = pgbouncer("session")
    await bouncer.wait_ready(_dbname(queue_dsn))
    through = bouncer.dsn(_dbname(queue_dsn))
    monkeypatch.setenv("MAESTRO_QUEUES_URL", through)
    base, _app, shutdown = await start_bff(nursery)
    worker = WorkerProcess(
        {
            "MAESTRO_QUEUES_URL": through,
            "SURFACE_QUEUE_TYPE": "surface-probe",
            "DATAPLANE_PROBE": "1",
        },
        str(tmp_path / "worker.log"),
    )
    try:
        await worker.wait_ready()
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            assert (await http.get("/readyz")).status_code == 200
            headers = bearer(token(staff=True))
            resp = await http.post(
                "/api/probe/q",
                json={"operation": "echo", "params": {"value": "through pgbouncer"}},
                headers=headers,
            )
            assert resp.status_code == 202, resp.text
            with trio.fail_after(20):
                status, _, events = await read_sse(http, resp.json()["streamUrl"])
        assert status == 200
        assert [e.name for e in events][-1] == "done", events
        assert "through pgbouncer" in events[-1]["data"]
    finally:
        worker.stop()
        shutdown.set()
    # It all went through the bouncer: it saw the BFF and the worker log in.
    assert "login attempt" in bouncer.log()


def test_the_worker_refuses_transaction_pooling_with_one_line(
    pgbouncer: Callable[[str], PgBouncer], queue_dsn: str
) -> None:
    bouncer = pgbouncer("transaction")
    trio.run(bouncer.wait_ready, _dbname(queue_dsn))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAESTRO_", "DATAPLANE_"))}
    env.update(
        MAESTRO_QUEUES_URL=bouncer.dsn(_dbname(queue_dsn)),
        SURFACE_QUEUE_TYPE="surface-probe",
        DATAPLANE_PROBE="1",
    )
    result = subprocess.run(
        [sys.executable, "-m", "dataplane", "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("dataplane worker: LISTEN does not work through 127.0.0.1:")
    assert "transaction-pooling PgBouncer" in lines[0]


async def test_the_bff_answers_503_saying_why_behind_transaction_pooling(
    pgbouncer: Callable[[str], PgBouncer],
    queue_dsn: str,
    bff_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    nursery: trio.Nursery,
) -> None:
    bouncer = pgbouncer("transaction")
    await bouncer.wait_ready(_dbname(queue_dsn))
    monkeypatch.setenv("MAESTRO_QUEUES_URL", bouncer.dsn(_dbname(queue_dsn)))
    base, _app, shutdown = await start_bff(nursery)
    try:
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            resp = await http.post(
                "/api/probe/q",
                json={"operation": "echo", "params": {}},
                headers=bearer(token(staff=True)),
            )
            assert resp.status_code == 503, resp.text
            message = resp.json()["error"]["message"]
            assert "LISTEN does not work" in message and "transaction-pooling" in message
            assert (await http.get("/readyz")).status_code == 503
            assert (await http.get("/healthz")).status_code == 200
    finally:
        shutdown.set()
