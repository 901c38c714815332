"""Worker liveness on a real Postgres (``dataplane/worker/claims/liveness.py``, migration 0024):
a lapsed worker's running claims made claimable by another worker's beat and fenced as
after a lapsed lease, once however many beat at once; a claim whose worker has no row
keeps its lease; a worker back from a gap judges nobody for a lapse; a graceful leave
waits for the last running claim; and ``dataplane invalidate`` says, from the rows,
which live workers will believe what it sends."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from dataplane.core.errors import LeaseLost
from dataplane.db import Database, Notification
from dataplane.queue import INVALIDATE_CHANNEL, QueueClient, wake_channel
from dataplane.surfaces import probe
from dataplane.worker import Worker, WorkerConfig
from dataplane.worker.claims.liveness import Liveness, Rescue
from tests.conftest import wait_until
from tests.helpers import NOTIFY_SECRET, complete, liveness_lapsed, submit

T = "surface-probe"
BEAT, LAPSE = 0.05, 0.3  # seconds: lapses within the test


def _liveness(db: Database, worker_id: str, lapse: float = LAPSE) -> Liveness:
    return Liveness(db, worker_id, T, opens=None, beat=BEAT, lapse=lapse)


async def _rows(db: Database) -> list[str]:
    rows = await db.fetchall("SELECT worker_id FROM maestro_workers ORDER BY worker_id")
    return [r["worker_id"] for r in rows]


async def _held(db: Database, job_id: Any) -> dict[str, Any]:
    row = await db.fetchone(
        "SELECT status, locked_by, dequeue_count, lease_expires_at > now() AS leased,"
        " available_at <= now() AS claimable FROM maestro_queues WHERE id = %(id)s",
        {"id": job_id},
    )
    assert row is not None
    return dict(row)


async def test_a_lapsed_worker_s_claims_are_claimable_at_once_and_its_late_writes_fenced(
    queue: QueueClient, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    wakes: list[str] = []
    listener = db.listener([wake_channel(T)])

    async def record() -> None:
        async for event in listener.events:
            if isinstance(event, Notification):
                wakes.append(event.channel)

    dead, live = _liveness(db, "dead"), _liveness(db, "live", lapse=30)  # alive throughout
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        nursery.start_soon(record)
        await dead.beat_once()
        await live.beat_once()
        mine = await submit(queue, "probe", "sleep", {"ms": 1})
        (job,) = await queue.claim(T, "dead")  # the seed's 120 s lease
        older = await submit(queue, "probe", "sleep", {"ms": 2})
        (old_job,) = await queue.claim(T, "old")  # a worker without a row (older release)
        assert await live.beat_once() == []  # "dead" is alive still: nothing to rescue
        await wait_until(lambda: liveness_lapsed(db, "dead"), within=5)
        wakes.clear()
        with caplog.at_level(logging.WARNING, logger="dataplane.worker.claims.liveness"):
            assert await live.beat_once() == [Rescue("dead", T, 1)]
        await wait_until(lambda: wakes == [wake_channel(T)], within=5)
        nursery.cancel_scope.cancel()

    # Claimable now, the claim's fence kept; the row of "dead" gone; "old" untouched.
    assert await _held(db, mine.job_id) == {
        "status": "in_progress",
        "locked_by": "dead",
        "dequeue_count": 1,
        "leased": False,
        "claimable": True,
    }
    assert (await _held(db, older.job_id))["leased"] is True
    assert await _rows(db) == ["live"]
    assert live.statistics().rescued_jobs == 1
    (line,) = [r.getMessage() for r in caplog.records if "lapsed" in r.getMessage()]
    assert "worker dead (surface-probe)" in line and "1 running claim(s) rescued" in line

    (again,) = await queue.claim(T, "live")
    assert (again.id, again.dequeue_count) == (job.id, 2)
    assert await queue.renew([job]) == set()  # the dead worker's renewal finds nothing
    with pytest.raises(LeaseLost):
        await complete(queue, job, {"late": True})  # nor may it complete
    await complete(queue, again, {"ok": True})
    assert await queue.renew([old_job]) == {old_job.id}  # the lease stays its liveness


async def test_many_beats_at_once_rescue_a_lapsed_worker_once(
    queue: QueueClient, db: Database
) -> None:
    dead = _liveness(db, "dead")
    await dead.beat_once()
    for n in range(3):
        await submit(queue, "probe", "sleep", {"ms": n})
    assert len(await queue.claim(T, "dead", limit=3)) == 3
    beaters = [_liveness(db, f"live-{n}", lapse=30) for n in range(6)]  # alive throughout
    for beater in beaters:
        await beater.beat_once()
    await wait_until(lambda: liveness_lapsed(db, "dead"), within=5)
    rescues: list[Rescue] = []

    async def beat(beater: Liveness) -> None:
        rescues.extend(await beater.beat_once())

    async with trio.open_nursery() as nursery:
        for beater in beaters:
            nursery.start_soon(beat, beater)
    assert rescues == [Rescue("dead", T, 3)]
    assert "dead" not in await _rows(db)


async def test_a_worker_back_from_a_gap_judges_nobody_for_a_lapse(
    queue: QueueClient, db: Database
) -> None:
    """A worker unseen for a lapse itself (its loop stalled, the database out of its
    reach) may be looking at a fleet that was cut off with it: it renews its own row at
    once, and rescues others only once it has been seen for a whole lapse again."""
    dead, back = _liveness(db, "dead"), _liveness(db, "back")
    await dead.beat_once()
    await back.beat_once()
    enq = await submit(queue, "probe", "sleep", {"ms": 1})
    await queue.claim(T, "dead")
    await trio.sleep(LAPSE)  # wall clock: "back" is unseen for a lapse (the subject here)
    await wait_until(lambda: liveness_lapsed(db, "dead"), within=5)
    returned = trio.current_time()
    assert await back.beat_once() == []
    assert (await _held(db, enq.job_id))["leased"] is True
    assert not await liveness_lapsed(db, "back")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(back.run)
        await wait_until(lambda: back.statistics().rescued_jobs == 1, within=5)
        nursery.cancel_scope.cancel()
    assert trio.current_time() - returned >= LAPSE
    assert (await _held(db, enq.job_id))["leased"] is False


async def test_leaving_waits_for_the_last_running_claim(queue: QueueClient, db: Database) -> None:
    worker = _liveness(db, "leaving")
    await worker.beat_once()
    await submit(queue, "probe", "sleep", {"ms": 1})
    (job,) = await queue.claim(T, "leaving")
    assert await worker.leave() is False  # a claim still runs: the row stays, to lapse
    assert await _rows(db) == ["leaving"]
    await complete(queue, job, {"ok": True})
    assert await worker.leave() is True
    assert await _rows(db) == []


# -- dataplane invalidate --------------------------------------------------------------


@asynccontextmanager
async def _serving(queue: QueueClient) -> AsyncIterator[Worker]:
    """A real worker in this process (the tests' notify secret: sealed tags only)."""
    worker = Worker(WorkerConfig(queue_type=T, worker_id="w-cli"), probe.SURFACE, queue)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        yield worker
        worker.stop()


async def _invalidate(queue_dsn: str, secret: str | None) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "DATAPLANE_NOTIFY_SECRET"}
    env["MAESTRO_QUEUES_URL"] = queue_dsn
    if secret is not None:
        env["DATAPLANE_NOTIFY_SECRET"] = secret
    done = await trio.run_process(
        [sys.executable, "-m", "dataplane", "invalidate", "c:acme"],
        env=env,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    return done.returncode, (done.stdout + done.stderr).decode()


async def test_invalidate_says_which_live_workers_will_believe_it(
    queue: QueueClient, db: Database, queue_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Without the workers' notify secret (or with another) nothing is sent and the
    command fails saying why; with it, the tag is sealed and the line counts the live
    workers that drop their entries; with no worker alive it says so."""
    heard: list[str] = []
    listener = db.listener([INVALIDATE_CHANNEL])

    async def record() -> None:
        async for event in listener.events:
            if isinstance(event, Notification):
                heard.append(event.payload)

    async def sent_nothing(marker: str) -> None:
        await queue.notify(INVALIDATE_CHANNEL, marker)  # heard after anything sent before
        await wait_until(lambda: marker in heard, within=5)
        assert heard == [marker]
        heard.clear()

    caplog.set_level(logging.INFO, logger="dataplane.worker.service")
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        nursery.start_soon(record)
        async with _serving(queue) as worker:
            code, output = await _invalidate(queue_dsn, None)
            assert code == 1, output
            assert output.strip() == (
                "dataplane invalidate: 1 live worker(s) believe only sealed invalidations and"
                " DATAPLANE_NOTIFY_SECRET is not set (set it to the workers' notify secret);"
                " nothing sent"
            )
            await sent_nothing("marker-1")

            code, output = await _invalidate(queue_dsn, "another-secret-" + "x" * 32)
            assert code == 1 and "another notify secret" in output and "nothing sent" in output
            await sent_nothing("marker-2")
            await wait_until(lambda: worker.invalidations.refused == 2, within=5)  # markers

            code, output = await _invalidate(queue_dsn, NOTIFY_SECRET)
            assert (code, output.strip()) == (
                0,
                "sent 1 tag(s) (sealed); 1 live worker(s) drop their entries",
            )
            await wait_until(
                lambda: any("invalidated tag 'c:acme'" in r.getMessage() for r in caplog.records),
                within=5,
            )
        assert await _rows(db) == []  # stopped: its row went with it
        code, output = await _invalidate(queue_dsn, None)
        assert (code, output.strip()) == (
            0,
            "sent 1 tag(s); no worker is alive, so no cache holds an entry to drop",
        )
        nursery.cancel_scope.cancel()
