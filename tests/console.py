"""A real ``dataplane console`` process on a queue DB of its own, and rows to show it:
shared by tests/acceptance/test_console.py and tests/browser/test_console.py (both
synchronous: httpx's and Playwright's sync clients, psycopg's sync connections)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg

from dataplane.db import with_params
from dataplane.dev.embedded import free_port
from tests.helpers import JWT_SECRET, BffProcess, token

TRACE_URL = "https://traces.example/trace/{trace_id}"
OPERATOR = ["dataplane:operator"]
VIEWER = ["dataplane:viewer"]


def operator_token(**kw: Any) -> str:
    return token(sub="ops-1", roles=OPERATOR, **kw)


def viewer_token(**kw: Any) -> str:
    return token(sub="viewer-1", roles=VIEWER, **kw)


@dataclass
class Console:
    base: str
    dsn: str
    proc: BffProcess

    def client(self, tok: str | None = None, **kw: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {tok}"} if tok else {}
        return httpx.Client(base_url=self.base, headers=headers, timeout=10, **kw)

    def execute(self, sql: str, params: Any = None) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql, params)  # type: ignore[arg-type]

    def one(self, sql: str, params: Any = None) -> Any:
        """The first row of a read, as a tuple."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return conn.execute(sql, params).fetchone()  # type: ignore[arg-type]

    def add_job(
        self,
        queue_type: str,
        status: str,
        *,
        client: str = "acme",
        operation: str = "list",
        error: str | None = None,
        created_at: datetime | None = None,
        params: Mapping[str, Any] | None = None,
        traceparent: str | None = None,
        available_in: float = 0.0,
        completed_at: datetime | None = None,
    ) -> str:
        """One row as the BFF and a worker would have left it (a finished one completed
        ``completed_at``, default now); its id."""
        job_id = str(uuid.uuid4())
        payload: dict[str, Any] = {
            "v": 1,
            "surface": queue_type.removeprefix("surface-").removesuffix("-dev"),
            "operation": operation,
            "version": 1,
            "params": dict(params or {}),
            "auth": {
                "client": client,
                "actorEmail": "ops@acme.test",
                "staff": True,
                "branches": ["*"],
                "scopeKey": "scope-k1",
                "userId": "42",
            },
        }
        if traceparent:
            payload["traceparent"] = traceparent
        now = datetime.now(UTC)
        created = created_at or now
        finished = status in ("done", "poison", "cancelled")
        self.execute(
            "INSERT INTO maestro_queues (id, type, status, dedupe_key, payload, client,"
            " last_error, created_at, completed_at, available_at, lease_expires_at,"
            " locked_by, claimed_at, dequeue_count)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                job_id,
                queue_type,
                status,
                f"dk-{job_id}",
                json.dumps(payload),
                client,
                error,
                created,
                (completed_at or now) if finished else None,
                now + timedelta(seconds=available_in if status == "pending" else 60),
                now + timedelta(seconds=60) if status == "in_progress" else None,
                "worker-1" if status == "in_progress" else None,
                now if status != "pending" else None,
                1 if status != "pending" else 0,
            ),
        )
        return job_id

    def add_run(self, queue_type: str, job_id: str, **kw: Any) -> None:
        row = {
            "operation": "list",
            "outcome": "done",
            "wall_ms": 10.0,
            "queue_wait_ms": 5.0,
            "cache": "miss",
            "coalesced": False,
            "trace_id": None,
            "dequeue_count": 1,
            "worker_id": "worker-1",
            "finished_at": datetime.now(UTC),
            **kw,
        }
        self.execute(
            "INSERT INTO worker_runs (job_id, type, operation, outcome, wall_ms, cpu_ms,"
            " rss_bytes, queue_wait_ms, cache, coalesced, dequeue_count, worker_id,"
            " finished_at, trace_id) VALUES (%s, %s, %s, %s, %s, 1, 1, %s, %s, %s, %s,"
            " %s, %s, %s)",
            (
                job_id,
                queue_type,
                row["operation"],
                row["outcome"],
                row["wall_ms"],
                row["queue_wait_ms"],
                row["cache"],
                row["coalesced"],
                row["dequeue_count"],
                row["worker_id"],
                row["finished_at"],
                row["trace_id"],
            ),
        )

    def clear(self) -> None:
        self.execute(
            "DELETE FROM maestro_queues; DELETE FROM worker_runs; DELETE FROM maestro_paused;"
        )


def _admin(admin_dsn: str, statement: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(statement)  # type: ignore[arg-type]


def wait_ready(proc: BffProcess, within: float = 30.0) -> None:
    proc.wait_ready_blocking(within)


def console_env(dsn: str) -> dict[str, str]:
    """A console's environment on the queue DB ``dsn``: tokens signed with the tests'
    secret, job pages linking traces to :data:`TRACE_URL`."""
    return {
        "MAESTRO_QUEUES_URL": dsn,
        "DATAPLANE_JWT_SECRET": JWT_SECRET,
        "DATAPLANE_JWT_PUBLIC_KEY": "",
        "DATAPLANE_JWT_JWKS_URL": "",
        "DATAPLANE_TRACE_URL": TRACE_URL,
        "DATAPLANE_CONSOLE_REFRESH_SECONDS": "0.2",
        "PYTHONUNBUFFERED": "1",
    }


def console_process(env: Mapping[str, str], log: Path) -> BffProcess:
    """A ``dataplane console`` process started (not yet ready) with ``env``."""
    return BffProcess(env, str(log), port=free_port(), command=("-m", "dataplane", "console"))


@contextmanager
def running_console(
    admin_dsn: str,
    template: str,
    logs: Path,
    env: Mapping[str, str] | None = None,
    *,
    login: tuple[str, str] | None = None,
) -> Iterator[Console]:
    """A console on a fresh copy of the migrated template, until the block ends; as the
    login role ``login`` (user, password) when given, else as the superuser."""
    name = f"t_console_{uuid.uuid4().hex[:12]}"
    _admin(admin_dsn, f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    dsn = with_params(admin_dsn, dbname=name)
    if login is not None:
        env = {
            **(env or {}),
            "DATAPLANE_CONSOLE_DB_URL": with_params(dsn, user=login[0], password=login[1]),
            "DATAPLANE_ALLOW_OWNER": "0",
        }
    proc = console_process({**console_env(dsn), **(env or {})}, logs / f"{name}.log")
    try:
        wait_ready(proc)
        yield Console(proc.base, dsn, proc)
    finally:
        proc.stop()
        _admin(admin_dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
