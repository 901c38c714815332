"""Operators' actions against a real Postgres (issue 41): filters never reach a type,
tier or client they do not name; a dry run writes nothing; each action writes one audit
row with its count; pause is honoured by the claim and the depth."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dataplane.core.errors import InvalidArgument
from dataplane.db import Database
from dataplane.operator import jobs, list_audit, pause
from dataplane.operator.audit import Operator
from dataplane.queue import QueueClient
from tests.helpers import STAFF, submit

OPS = Operator("ops@acme.example", "console")
BETA = dataclasses.replace(STAFF, client="beta")


async def poison(
    queue: QueueClient, surface: str, value: Any, *, suffix: str = "", **kw: Any
) -> uuid.UUID:
    job = await submit(queue, surface, "echo", {"value": value}, suffix=suffix, **kw)
    await queue.db.execute(
        "UPDATE maestro_queues SET status = 'poison', dequeue_count = max_dequeues,"
        " completed_at = now(), last_error = %(err)s WHERE id = %(id)s",
        {"id": job.job_id, "err": f"boom {value}"},
    )
    return job.job_id


async def statuses(db: Database) -> dict[uuid.UUID, str]:
    return {
        r["id"]: r["status"] for r in await db.fetchall("SELECT id, status FROM maestro_queues")
    }


async def test_a_bulk_retry_takes_only_what_its_filter_names(queue: QueueClient) -> None:
    db = queue.db
    mine = [await poison(queue, "probe", i) for i in range(3)]
    dev = await poison(queue, "probe", "d", suffix="-dev")
    other_client = await poison(queue, "probe", "n", auth=BETA)
    other_type = await poison(queue, "demo", "x")
    other_error = await poison(queue, "probe", "e")
    await db.execute(
        "UPDATE maestro_queues SET last_error = 'else' WHERE id = %(id)s", {"id": other_error}
    )
    live = (await submit(queue, "probe", "echo", {"value": "live"})).job_id
    flt = jobs.JobFilter(queue_type="surface-probe", client=STAFF.client, error="boom")

    assert await jobs.count(db, flt) == 3
    assert await jobs.retry(db, OPS, flt, dry_run=True) == 3
    assert set((await statuses(db)).values()) == {"poison", "pending"}
    assert await list_audit(db) == []  # a dry run writes nothing

    assert await jobs.retry(db, OPS, flt) == 3
    now = await statuses(db)
    assert {now[i] for i in mine} == {"pending"}
    assert {now[i] for i in (dev, other_client, other_type, other_error)} == {"poison"}
    assert now[live] == "pending"
    row = await db.fetchone(
        "SELECT dequeue_count FROM maestro_queues WHERE id = %(id)s", {"id": mine[0]}
    )
    assert row is not None and row["dequeue_count"] == 0  # a fresh budget
    [audit] = await list_audit(db)
    assert (audit.action, audit.rows, audit.actor) == ("retry", 3, OPS.actor)
    assert audit.target == {  # the filter as applied: every field, the status defaulted
        "status": "poison",
        "queue_type": "surface-probe",
        "client": "acme",
        "operation": None,
        "error": "boom",
        "since": None,
        "until": None,
        "job_id": None,
        "all": False,
        "limit": None,
    }
    assert await jobs.retry(db, OPS, flt) == 0  # nothing matches: recorded, 0 rows
    assert [a.rows for a in await list_audit(db)] == [0, 3]


async def test_a_retry_leaves_a_request_that_is_live_again(queue: QueueClient) -> None:
    old = await poison(queue, "probe", "same")
    again = (await submit(queue, "probe", "echo", {"value": "same"})).job_id  # re-requested
    assert again != old
    assert await jobs.retry(queue.db, OPS, jobs.JobFilter(queue_type="surface-probe")) == 0
    assert (await statuses(queue.db))[old] == "poison"


async def test_discard_deletes_finished_rows_and_their_blobs_only(queue: QueueClient) -> None:
    db = queue.db
    gone = [await poison(queue, "probe", i) for i in range(2)]
    kept = await poison(queue, "probe", "dev", suffix="-dev")
    live = (await submit(queue, "probe", "echo", {"value": "live"})).job_id
    await db.execute(
        "INSERT INTO surface_result_blobs (job_id, content_type, data, size, expires_at)"
        " SELECT id, 'text/plain', 'x', 1, now() + interval '1 hour' FROM maestro_queues"
    )
    with pytest.raises(InvalidArgument):
        await jobs.discard(db, OPS, jobs.JobFilter(status="pending"))
    flt = jobs.JobFilter(queue_type="surface-probe")
    assert await jobs.discard(db, OPS, flt, dry_run=True) == 2
    assert await jobs.discard(db, OPS, flt) == 2
    assert set(await statuses(db)) == {kept, live}
    blobs = {r["job_id"] for r in await db.fetchall("SELECT job_id FROM surface_result_blobs")}
    assert blobs == {kept, live} and not blobs & set(gone)
    [audit] = await list_audit(db)
    assert (audit.action, audit.rows) == ("discard", 2)


async def test_a_bulk_action_over_the_bound_needs_a_limit(
    queue: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs, "BULK_MAX", 2)
    ids = [await poison(queue, "probe", i) for i in range(3)]
    flt = jobs.JobFilter()
    with pytest.raises(InvalidArgument, match="give a limit"):
        await jobs.retry(queue.db, OPS, flt, every=True)
    assert await list_audit(queue.db) == []
    assert await jobs.retry(queue.db, OPS, flt, limit=2, every=True) == 2
    now = await statuses(queue.db)
    assert [now[i] for i in ids] == ["pending", "pending", "poison"]  # the oldest two
    assert (await list_audit(queue.db))[0].target["limit"] == 2


async def test_every_job_of_every_type_takes_an_explicit_all(queue: QueueClient) -> None:
    probe = await poison(queue, "probe", 1)
    demo = await poison(queue, "demo", 2)
    for act in (jobs.retry, jobs.discard):
        with pytest.raises(jobs.Unfiltered, match="choose all"):
            await act(queue.db, OPS, jobs.JobFilter())
        with pytest.raises(InvalidArgument, match="without a filter"):
            await act(queue.db, OPS, jobs.JobFilter(queue_type="surface-probe"), every=True)
        assert await act(queue.db, OPS, jobs.JobFilter(), dry_run=True) == 2  # a count
    assert set((await statuses(queue.db)).values()) == {"poison"}
    assert await list_audit(queue.db) == []

    assert await jobs.retry(queue.db, OPS, jobs.JobFilter(), every=True) == 2
    now = await statuses(queue.db)
    assert (now[probe], now[demo]) == ("pending", "pending")
    [audit] = await list_audit(queue.db)
    assert audit.rows == 2 and audit.target["all"] is True
    assert audit.target["status"] == "poison" and audit.target["queue_type"] is None


def test_a_time_utc_cannot_hold_is_refused() -> None:
    assert jobs.parse_time("2026-01-01T01:00+01:00", "since") == datetime(2026, 1, 1, tzinfo=UTC)
    assert jobs.parse_time("2026-01-01T00:00", "since").tzinfo is UTC  # naive: UTC
    for bad in ("0001-01-01T00:00+14:00", "9999-12-31T23:59-14:00", "soon"):
        with pytest.raises(InvalidArgument, match="since"):
            jobs.parse_time(bad, "since")


async def test_the_listing_pages_newest_first_by_keyset(queue: QueueClient) -> None:
    ids = [await poison(queue, "probe", i) for i in range(7)]
    seen: list[uuid.UUID] = []
    before = None
    while page := await jobs.list_jobs(queue.db, jobs.JobFilter(), limit=3, before=before):
        seen += [job.id for job in page]
        before = (page[-1].created_at, page[-1].id)
    assert seen == ids[::-1]
    since = datetime.now(UTC) + timedelta(hours=1)
    assert await jobs.list_jobs(queue.db, jobs.JobFilter(since=since)) == []


def test_a_filter_is_checked_when_built() -> None:
    for bad in (
        {"status": "failed"},
        {"queue_type": "probe"},
        {"queue_type": "surface-Probe"},
        {"client": ""},
        {"since": datetime(2024, 1, 1)},  # naive
        {"since": datetime(2024, 1, 2, tzinfo=UTC), "until": datetime(2024, 1, 1, tzinfo=UTC)},
    ):
        with pytest.raises(InvalidArgument):
            jobs.JobFilter(**bad)
    assert jobs.JobFilter(queue_type="surface-nobody_declares-dev").queue_type


async def test_a_paused_type_claims_nothing_and_reports_no_depth(queue: QueueClient) -> None:
    db = queue.db
    job = (await submit(queue, "probe", "echo", {"value": 1})).job_id
    dev = (await submit(queue, "probe", "echo", {"value": 2}, suffix="-dev")).job_id

    async def depth(t: str) -> int:
        row = await db.fetchone("SELECT maestro_queue_depth(%(t)s) AS n", {"t": t})
        assert row is not None
        return int(row["n"])

    assert await pause.pause(db, OPS, "surface-probe") is True
    assert await pause.pause(db, OPS, "surface-probe") is False
    [p] = await pause.paused(db)
    assert (p.type, p.paused_by) == ("surface-probe", OPS.actor)
    assert await depth("surface-probe") == 0 and await depth("surface-probe-dev") == 1
    assert await queue.claim("surface-probe", "w1") == []
    assert [j.id for j in await queue.claim("surface-probe-dev", "w1")] == [dev]
    assert (await statuses(db))[job] == "pending"

    assert await pause.resume(db, OPS, "surface-probe") is True
    assert await pause.resume(db, OPS, "surface-probe") is False
    assert await pause.paused(db) == []
    assert await depth("surface-probe") == 1
    assert [j.id for j in await queue.claim("surface-probe", "w1")] == [job]
    actions = [(a.action, a.target, a.rows) for a in await list_audit(db)]
    assert actions == [  # newest first; an action that changed nothing is recorded too
        ("resume", {"type": "surface-probe"}, 0),
        ("resume", {"type": "surface-probe"}, 1),
        ("pause", {"type": "surface-probe"}, 0),
        ("pause", {"type": "surface-probe"}, 1),
    ]
    with pytest.raises(InvalidArgument):
        await pause.pause(db, OPS, "probe")
