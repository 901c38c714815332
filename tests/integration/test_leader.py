"""One leader of the fleet's maintenance: it alone runs the room's services, steps
down when it cannot renew its term, and its passes keep the election they run under."""

from __future__ import annotations

from typing import LiteralString

import psycopg
import trio

from dataplane.db import Database
from dataplane.maintenance.elections import MAINTENANCE
from dataplane.maintenance.leader import Leader
from dataplane.maintenance.retention import RetentionConfig
from dataplane.maintenance.schedule import Maintenance
from dataplane.queue import QueueClient
from tests.conftest import wait_until
from tests.helpers import complete, submit

TERM, RENEW = 1.0, 0.1  # seconds


class Counting:
    """A service that counts its runs and whether it is running now."""

    def __init__(self) -> None:
        self.started = 0
        self.running = False

    async def run(self) -> None:
        self.started += 1
        self.running = True
        try:
            await trio.sleep_forever()
        finally:
            self.running = False


def _leader(db: Database) -> tuple[Leader, Counting]:
    leader, service = Leader(db, term=TERM, renew=RENEW), Counting()
    leader.add(service.run)
    return leader, service


def _set_election(dsn: str, assignments: LiteralString) -> None:
    """``UPDATE dataplane_elections SET <assignments>`` for the maintenance row, as
    another process (or a pass) would."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        query = "UPDATE dataplane_elections SET " + assignments + " WHERE name = %s"
        conn.execute(query, (MAINTENANCE,))


def _term_left(dsn: str) -> tuple[str, float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT holder, extract(epoch FROM until - now())::float8"
            " FROM dataplane_elections WHERE name = %s",
            (MAINTENANCE,),
        ).fetchone()
    assert row is not None
    return str(row[0]), float(row[1])


async def test_one_of_two_leads_and_the_other_takes_over_when_it_stops(
    db: Database, nursery: trio.Nursery
) -> None:
    (first, one), (second, two) = _leader(db), _leader(db)
    first_scope = trio.CancelScope()

    async def run_first() -> None:
        with first_scope:
            await first.run()

    nursery.start_soon(run_first)
    await wait_until(lambda: one.running, within=10)
    nursery.start_soon(second.run)
    await trio.sleep(5 * RENEW)  # the second tried several times
    assert first.leading and not second.leading and two.started == 0
    first_scope.cancel()  # it steps down: the second need not wait for the term
    await wait_until(lambda: two.running, within=TERM)
    assert not one.running and second.leading and (one.started, two.started) == (1, 1)


async def test_a_leader_whose_term_was_taken_stops_its_services(
    db: Database, queue_dsn: str, nursery: trio.Nursery
) -> None:
    leader, service = _leader(db)
    nursery.start_soon(leader.run)
    await wait_until(lambda: service.running, within=10)
    # Another holder took it, past a lapse.
    _set_election(queue_dsn, "holder = 'other', until = now() + interval '1 hour'")
    await wait_until(lambda: not service.running, within=10 * RENEW)
    assert not leader.leading
    _set_election(queue_dsn, "until = now()")  # the other steps down
    await wait_until(lambda: service.running, within=10)
    assert leader.terms == 2 and service.started == 2


async def test_a_leaders_pass_keeps_the_election_and_gives_back_its_term(
    db: Database, queue: QueueClient, queue_dsn: str, nursery: trio.Nursery
) -> None:
    enq = await submit(queue, "probe", "echo", {"value": 1})
    (job,) = await queue.claim("surface-probe", "w")
    await complete(queue, job, {"data": 1})
    leader, _ = _leader(db)
    nursery.start_soon(leader.run)
    await wait_until(lambda: leader.leading, within=10)
    schedule = Maintenance(
        db, retention=RetentionConfig(done_seconds=0), holder=leader.holder, keep=TERM
    )
    result = await schedule.run_once()
    assert result is not None and result.elected and result.done_deleted == 1
    assert await queue.get(enq.job_id) is None
    holder, left = _term_left(queue_dsn)
    assert holder == leader.holder and 0 < left <= TERM  # kept, and no longer the pass's
    # Another contender's pass (`dataplane maintenance --once`) does nothing meanwhile.
    other = await Maintenance(db).run_once()
    assert other is not None and not other.elected
    assert leader.leading


async def test_a_renewal_does_not_shorten_a_longer_term(
    db: Database, queue_dsn: str, nursery: trio.Nursery
) -> None:
    leader, _ = _leader(db)
    nursery.start_soon(leader.run)
    await wait_until(lambda: leader.leading, within=10)
    _set_election(queue_dsn, "until = now() + interval '300 seconds'")  # as a pass takes it
    await trio.sleep(3 * RENEW)  # renewed meanwhile
    holder, left = _term_left(queue_dsn)
    assert holder == leader.holder and left > 200
