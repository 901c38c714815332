"""Worker liveness: a dead worker's claims claimable again in seconds, not at their
leases' end.

Each worker process keeps a row of ``maestro_workers`` (migration 0024), named by
the id its claims write into ``locked_by``: :class:`Liveness` renews it every
``beat`` seconds, one statement per worker however many jobs it holds
(``worker_beat``), to ``lapse`` seconds ahead. The same statement rescues: the rows
of workers whose time lapsed are deleted, their running claims set claimable now
(lease and ``available_at`` = ``now()``: the unchanged claim takes them, and a flow
bound stops counting them at once), and each touched type's wake channel notified.
Every rescue is counted (``dataplane.jobs.rescued``) and logged with the dead
worker's id and its claims.

States of a worker's row: absent (before its first beat; after a graceful stop, or
a rescue) -> alive (``alive_until`` ahead) -> lapsed (no beat for ``lapse``
seconds) -> rescued (deleted by another worker's beat). A worker that comes back
after its row was rescued (SIGSTOP, then SIGCONT) writes it again at its next beat.

Invariants:

* Fencing is unchanged: a rescue keeps ``locked_by`` and ``dequeue_count``, so once a
  rescued row is claimed again the dead worker's late renewal, completion or failure
  matches nothing (``LEASE_LOST``, ``FENCED_OUT``), as after a lapsed lease.
* A claim whose worker has no row (an older release; a worker whose beats never
  reached the database) is not rescued: its lease stays its only liveness, as before.
* Only the plane's roles write ``maestro_workers``: a role that may merely connect
  can neither keep a dead worker's row alive nor make a live worker's row lapse.
* A worker judges others only while it has been seen itself: after a gap in its own
  beats longer than the lapse (the database was out of its reach, its loop was
  blocked, it was stopped), it renews its row but rescues nobody for one lapse, so a
  database outage seen by the whole fleet does not make the first worker back take
  over everyone's jobs before the others had time to beat again. A new process
  rescues from its first beat.

Failure handling: a beat that fails (queue DB out of reach) is logged once, when
beats start failing, and once when they work again; the claims keep their leases
meanwhile. A graceful stop removes the row (``worker_leave``) only once the worker
holds no running claim (each completed, failed or released); otherwise, or on a
crash, the row lapses and another worker rescues what is left.

The numbers (:data:`BEAT_SECONDS`, :data:`LAPSE_SECONDS`): a dead worker's claims
are claimable 10 to 12 s after its last beat (the lapse, then up to one beat of
another worker), so with the seed's 120 s lease a killed worker's job is done by
another within 15 s (a job of a few seconds). A worker whose event loop is blocked
for longer than about the lapse (a CPU-bound handler that never awaits) has its
claims rescued and run again elsewhere; its own late writes are fenced out once
they are re-claimed. A handler must not block the loop that long (it stalls every
other job of that worker, and its heartbeat, already); a surface that must, raises
``DATAPLANE_WORKER_LAPSE_SECONDS``.

The rows are read too: ``dataplane invalidate`` (:mod:`dataplane.operator.invalidate`)
says which live workers will believe a tag it sends (each row names the key ids of
the notify secrets its worker opens with).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import trio

from dataplane.core.errors import DatabaseError, InvalidArgument
from dataplane.db import Database, q
from telemetry.metrics import QUEUE_TYPE, instruments

log = logging.getLogger(__name__)

BEAT_SECONDS = 2.0  # a worker renews its liveness row this often
LAPSE_SECONDS = 10.0  # a row not renewed for this long lapses: its claims are rescued
LEAVE_TIMEOUT = 2.0  # seconds the shielded removal of the row on a graceful stop may take


def check_liveness(beat: float, lapse: float) -> None:
    """A lapse must leave room for a missed beat: at least two beats long."""
    if not 0 < beat or lapse < 2 * beat:
        raise InvalidArgument(
            f"the liveness lapse ({lapse:g}s) must be at least twice the beat ({beat:g}s),"
            " or a worker lapses between two beats"
        )


@dataclass(frozen=True, slots=True)
class Rescue:
    """A lapsed worker whose row a beat removed, and how many running claims it held."""

    worker_id: str
    type: str
    jobs: int
    unseen_seconds: float = field(default=0.0, compare=False)  # since its last beat


@dataclass(frozen=True, slots=True)
class LivenessStatistics:
    beats: int  # beats that reached the database
    failures: int  # beats that did not
    rescued_workers: int  # lapsed workers whose rows this worker's beats removed
    rescued_jobs: int  # the running claims they held, made claimable


class Liveness:
    """One worker's row of ``maestro_workers``: beats, rescues, and leaving."""

    def __init__(
        self,
        db: Database,
        worker_id: str,
        queue_type: str,
        *,
        opens: Sequence[str] | None,
        beat: float = BEAT_SECONDS,
        lapse: float = LAPSE_SECONDS,
    ) -> None:
        check_liveness(beat, lapse)
        self.db = db
        self.worker_id = worker_id
        self.queue_type = queue_type
        self.opens = list(opens) if opens is not None else None
        self.beat = beat
        self.lapse = lapse
        self._seen_at: float | None = None  # trio time of the last beat that landed
        self._back_at: float | None = None  # when it was seen again after a gap
        self._failing = False
        self._beats = self._failures = self._workers = self._jobs = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Beat until cancelled; started once the first beat was tried (so the row
        exists before the worker's first claim, when the database answers)."""
        await self.beat_once()
        task_status.started()
        while True:
            await trio.sleep(self.beat)
            await self.beat_once()

    async def beat_once(self) -> list[Rescue]:
        """Renew the row, and rescue lapsed workers when this one may judge them."""
        now = trio.current_time()
        unseen = None if self._seen_at is None else now - self._seen_at
        if unseen is not None and unseen >= self.lapse:
            self._back_at = now  # out of sight for a lapse: others may have been too
        judging = self._back_at is None or now - self._back_at >= self.lapse
        params = {
            "worker_id": self.worker_id,
            "type": self.queue_type,
            "opens": self.opens,
            "lapse_seconds": self.lapse,
            "rescue": judging,
        }
        try:
            rows = await self.db.fetchall(q("worker_beat"), params)
        except DatabaseError as exc:
            self._failures += 1
            if not self._failing:
                self._failing = True
                log.warning(
                    "liveness: beat failed (%s); this worker's claims keep their leases"
                    " meanwhile; retrying every %gs",
                    exc,
                    self.beat,
                )
            return []
        if unseen is not None and unseen >= self.lapse:
            log.warning(
                "liveness: beating again after %.0fs unseen (longer than the %gs lapse: this"
                " worker's claims may have been rescued); rescuing no other worker for %gs",
                unseen,
                self.lapse,
                self.lapse,
            )
        elif self._failing:
            log.info("liveness: beats reach the database again")
        self._failing = False
        self._seen_at = now
        self._beats += 1
        rescues = [Rescue(r["worker_id"], r["type"], r["jobs"], r["unseen_seconds"]) for r in rows]
        for rescue in rescues:
            self._report(rescue)
        return rescues

    def _report(self, rescue: Rescue) -> None:
        self._workers += 1
        self._jobs += rescue.jobs
        instruments().rescued.add(rescue.jobs, {QUEUE_TYPE: rescue.type})
        log.warning(
            "liveness: worker %s (%s) lapsed (no beat for %.1fs): %d running claim(s)"
            " rescued, claimable now",
            rescue.worker_id,
            rescue.type,
            rescue.unseen_seconds,
            rescue.jobs,
        )

    async def leave(self) -> bool:
        """Remove the row after a graceful stop (shielded, bounded): whether it went.
        It stays, and lapses, while a running claim of this worker is left."""
        with trio.CancelScope(shield=True), trio.move_on_after(LEAVE_TIMEOUT):
            try:
                row = await self.db.fetchone(q("worker_leave"), {"worker_id": self.worker_id})
            except DatabaseError as exc:
                log.warning("liveness: row not removed (%s); it lapses in %gs", exc, self.lapse)
                return False
            if row is None:
                log.warning(
                    "liveness: row kept (a claim of this worker is still running in the"
                    " queue): it lapses in %gs and the claim is rescued",
                    self.lapse,
                )
            return row is not None
        return False

    def statistics(self) -> LivenessStatistics:
        return LivenessStatistics(self._beats, self._failures, self._workers, self._jobs)
