"""A BFF believes no notify it cannot verify, and no notify ends its plane.

LISTEN and NOTIFY need no privilege in Postgres: a second role that may only connect
to the queue database and read it (a dashboard's login) hears every done channel and
may send on it. Real processes: a BFF (Hypercorn), a worker, and that role's own
connection sending real notifies."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import trio
from psycopg import sql as pgsql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dataplane.dev.embedded import free_port
from dataplane.queue import done_channel
from dataplane.queue.notices.retries import Retry
from dataplane.queue.notices.seal import NotifySeal
from dataplane.queue.types import retry_channel
from tests.acceptance.test_bff import poll_until_done, post
from tests.conftest import admin_execute, connect_only_role
from tests.helpers import NOTIFY_SECRET, BffProcess, SseEvent, bearer, read_sse, token

CHANNEL = done_channel("surface-probe")
STAFF = token(staff=True, sub="boss")


@pytest.fixture
def reader(queue_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection as a role that may connect and read maestro_queues, nothing more."""
    role = f"dash_{uuid.uuid4().hex[:8]}"
    ident = pgsql.Identifier(role)
    admin_execute(
        queue_dsn,
        pgsql.SQL("CREATE ROLE {} LOGIN PASSWORD 'dash'").format(ident).as_string(),
        pgsql.SQL("GRANT SELECT ON maestro_queues TO {}").format(ident).as_string(),
    )
    params = conninfo_to_dict(queue_dsn)
    params.update(user=role, password="dash")
    with psycopg.connect(make_conninfo(**params), autocommit=True) as conn:  # type: ignore[arg-type]
        yield conn
    admin_execute(
        queue_dsn,
        pgsql.SQL("DROP OWNED BY {}").format(ident).as_string(),
        pgsql.SQL("DROP ROLE {}").format(ident).as_string(),
    )


@pytest.fixture
def bff(bff_env: dict[str, str], tmp_path: Path) -> Iterator[BffProcess]:
    proc = BffProcess(bff_env, str(tmp_path / "bff.log"), port=free_port(), args=("-k", "trio"))
    yield proc
    proc.stop()


def _send(conn: psycopg.Connection[Any], payload: str) -> None:
    conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))


def _note(**fields: Any) -> dict[str, Any]:
    """A carried answer as workers sent it before answers were sealed."""
    return {
        "type": "surface-probe",
        "dequeueCount": 1,
        "maxDequeues": 5,
        "createdAt": "2026-01-01T00:00:00+00:00",
        "claimedAt": "2026-01-01T00:00:00+00:00",
        "completedAt": "2026-01-01T00:00:01+00:00",
        "surface": "probe",
        "traceparent": None,
        "result": {"data": {"echo": "forged"}, "cache": "miss"},
        **fields,
    }


async def _stream_final(http: httpx.AsyncClient, url: str, finals: list[SseEvent]) -> None:
    _, _, events = await read_sse(http, url)
    finals.append(events[-1])


async def test_a_forged_answer_from_a_read_only_role_never_reaches_the_owner(
    bff: BffProcess, reader: psycopg.Connection[Any], spawn_worker: Callable[..., Any]
) -> None:
    """The role reads a pending job's id from the table and forges its done notify while
    the owner's stream waits, then once more after the real answer went by: the stream,
    the token poll and a bearer read all give the worker's answer."""
    await bff.wait_ready()
    async with httpx.AsyncClient(base_url=bff.base, timeout=30) as http:
        job = (await post(http, "probe", "echo", {"value": "genuine"}, STAFF)).json()
        finals: list[SseEvent] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stream_final, http, job["streamUrl"], finals)
            await trio.sleep(0.5)  # the stream waits on the pump
            (pending,) = reader.execute(
                "SELECT id FROM maestro_queues WHERE status = 'pending'"
            ).fetchall()
            assert str(pending[0]) == job["jobId"]
            _send(reader, f"{job['jobId']} {json.dumps(_note())}")
            await trio.sleep(1.0)  # what the pump would do with it, it has done
            assert not finals  # still waiting: the row says pending
            await spawn_worker()
        assert finals[0].name == "done" and finals[0].json["result"]["echo"] == "genuine"
        _send(reader, f"{job['jobId']} {json.dumps(_note())}")
        await trio.sleep(0.5)
        polled = await poll_until_done(http, job["pollUrl"])
        assert polled["result"]["echo"] == "genuine"
        direct = (await http.get(f"/api/probe/q/{job['jobId']}", headers=bearer(STAFF))).json()
        assert direct["result"]["echo"] == "genuine"
    assert "rejected so far" in bff.output()


MALFORMED = [
    json.dumps(_note(traceparent=["a", "list"])),
    json.dumps(_note(dequeueCount=1e400)).replace("Infinity", "1e400"),
    json.dumps(_note(createdAt=[1])),
    json.dumps(_note(result=None, type=7)),
    "[" * 900 + "]" * 900,
    "not json at all",
    "",
]


async def test_malformed_notifies_leave_the_plane_serving(
    bff: BffProcess, reader: psycopg.Connection[Any], spawn_worker: Callable[..., Any]
) -> None:
    """Malformed carried answers for a job a stream waits on, and payloads naming no
    job: the plane keeps serving (it used to stop for good, every plane route answering
    503 "database pool is closed" while /healthz said 200)."""
    await bff.wait_ready()
    async with httpx.AsyncClient(base_url=bff.base, timeout=30) as http:
        job = (await post(http, "probe", "echo", {"value": "still here"}, STAFF)).json()
        finals: list[SseEvent] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stream_final, http, job["streamUrl"], finals)
            await trio.sleep(0.5)
            for text in MALFORMED:
                _send(reader, f"{job['jobId']} {text}")
            for payload in ("x", "not-a-uuid-but-36-characters-long!!!", "🙂" * 40):
                _send(reader, payload)
            await trio.sleep(1.0)
            assert not finals
            assert (await http.get("/readyz")).status_code == 200
            again = await post(http, "probe", "echo", {"value": "after"}, STAFF)
            assert again.status_code == 202, again.text
            await spawn_worker()
        assert finals[0].name == "done" and finals[0].json["result"]["echo"] == "still here"
        answer = await poll_until_done(http, again.json()["pollUrl"])
        assert answer["result"]["echo"] == "after"
    assert bff.proc.poll() is None


async def test_a_forged_retry_notify_from_a_connect_only_role_is_no_event(
    bff: BffProcess, queue_dsn: str, pg_admin_dsn: str, spawn_worker: Callable[..., Any]
) -> None:
    """A role that may only connect (no grant on any table: it learnt the job's id as a
    leaked URL would give it) sends retry notifies for a pending job a stream waits on:
    the id alone (the row says no attempt failed), a note that is not sealed, one sealed
    with another secret, and one sealed with the plane's secret as a progress note (a
    captured note moved to the retry channel). None is an event: after ``queued`` the
    stream hears the worker's genuine retry, then the answer."""
    await bff.wait_ready()
    forged = Retry(1, 5, "Forged: no worker said so", datetime.now(UTC) + timedelta(minutes=5))
    with (
        connect_only_role(queue_dsn, pg_admin_dsn) as dsn,
        psycopg.connect(dsn, autocommit=True) as outsider,
    ):
        async with httpx.AsyncClient(base_url=bff.base, timeout=30) as http:
            job = (await post(http, "probe", "fail", {"times": 1, "nonce": "forged"}, STAFF)).json()
            job_id = job["jobId"]
            waiting = trio.Event()  # the stream's first event: its waiter is in the pump
            events: list[SseEvent] = []

            async def listen() -> None:
                with trio.fail_after(30):
                    _, _, got = await read_sse(
                        http, job["streamUrl"], on_event=lambda _: waiting.set()
                    )
                events.extend(got)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(listen)
                await waiting.wait()
                other = NotifySeal(["another secret, not the plane's, 40 chars"])
                plane = NotifySeal([NOTIFY_SECRET])
                for payload in (
                    job_id,
                    f"{job_id} {forged.note()}",
                    f"{job_id} {other.seal(job_id, forged.note(), kind='retry')}",
                    f"{job_id} {plane.seal(job_id, forged.note(), kind='progress')}",
                ):
                    outsider.execute(
                        "SELECT pg_notify(%s, %s)", (retry_channel("surface-probe"), payload)
                    )
                await spawn_worker(DATAPLANE_FAIL_BACKOFF_SECONDS="1")
    assert [e.name for e in events] == ["queued", "retry", "done"], events
    assert events[1].json["error"] == "ProbeFailure: probe.fail: attempt 1 of 1"
    assert events[-1].json["result"] == {"succeeded_on_attempt": 2}
    assert "a retry note that does not open or parse" in bff.output()
