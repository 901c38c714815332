"""The data worker: claims one queue type's jobs and runs their operations.

One :class:`Worker` per process, owning one nursery of services, each a module
of this package:

* the :class:`~dataplane.worker.claims.claimer.Claimer`, which claims at most the free
  slots, backs off when idle, and is woken by the enqueue notify, a freed slot or
  a retry this worker scheduled (a failed job's backoff);
* the :class:`~dataplane.db.Listener` for ``dataplane_invalidate``, the type's cancel
  channel and, while this worker is on call, ``<type>_enqueued``, dispatched here (wake
  the claimer, drop cache tags, hand a cancel to the cancel watch; a LISTEN gap drops
  the whole cache, invalidations may have been missed);
* the :class:`~dataplane.worker.claims.cancels.CancelWatch`, which checks a cancel (an
  operator's, or the last requester's withdrawal) of a held claim against its row and
  cancels that job's execution;
* :class:`~dataplane.worker.claims.oncall.OnCall`, which decides whether an enqueue
  notify wakes this worker's claimer and LISTENs on the wake channel only then (one
  worker of the type is on call: no thundering herd);
* the :class:`~dataplane.worker.claims.leases.LeaseKeeper`, renewing held leases;
* its :class:`~dataplane.worker.claims.liveness.Liveness`, the worker's row of
  ``maestro_workers`` renewed every few seconds, whose beat also rescues the claims
  of workers whose rows lapsed (a dead worker's jobs back in seconds, not at their
  leases' end);
* the :class:`~dataplane.worker.pipeline.deadlines.HandlerDeadlines`, cancelling an execution
  past its operation's timeout;
* the :class:`~dataplane.worker.claims.completer.Completer`, committing in batches;
* the :class:`~dataplane.worker.progress.ProgressWriter`, writing running jobs' latest
  progress (at most five times a second each) and notifying it;
* the :class:`~dataplane.maintenance.leader.Leader` of the fleet's maintenance, which
  where it leads (one worker of the fleet) runs the
  :class:`~dataplane.maintenance.schedule.Maintenance` schedule (retention and lapsed
  leases, busy or not), the :class:`~dataplane.maintenance.sampler.QueueSampler` (queue
  depth gauges) and the :class:`~dataplane.maintenance.growth.GrowthWatch` (plans made
  on a small queue, made again);
* the reporter (the capcom sender), when it has a ``run`` of its own;

and, in a nursery of their own, one task per claim, each a
:class:`~dataplane.worker.pipeline.executor.JobExecutor` run.

Shutdown (:meth:`Worker.stop`): stop claiming, let in-flight jobs finish within
the grace period, then release what is still held (not counted toward poison), and
remove the liveness row once no claim of this worker is left running.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio

from dataplane.db import Database, Gap, Notification
from dataplane.db.lock import SessionLock, outsider_holding
from dataplane.maintenance.growth import GrowthWatch
from dataplane.maintenance.leader import Leader
from dataplane.maintenance.sampler import QueueSampler
from dataplane.maintenance.schedule import Maintenance
from dataplane.queue import QueueClient
from dataplane.surfaces.manifest import Surface
from dataplane.worker.claims.cancels import CancelWatch
from dataplane.worker.claims.claimer import Claimer, flow_bounds
from dataplane.worker.claims.completer import Completer
from dataplane.worker.claims.held import HeldJobs
from dataplane.worker.claims.leases import LeaseKeeper
from dataplane.worker.claims.liveness import Liveness
from dataplane.worker.claims.oncall import OnCall
from dataplane.worker.config import WorkerConfig
from dataplane.worker.invalidations import Invalidations
from dataplane.worker.pipeline.cache import INVALIDATE_CHANNEL, TtlCache
from dataplane.worker.pipeline.executor import JobExecutor
from dataplane.worker.progress import ProgressWriter
from dataplane.worker.report import Reporter

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WorkerStatistics:
    claimed: int
    done: int
    errors: int
    failed: int
    poisoned: int  # attempts of this worker that failed at the cutoff
    poisoned_at_claim: int  # rows its claims parked as poison (their last lease lapsed)
    lost: int
    cancelled: int  # executions a cancel (an operator's, or the requesters') stopped
    released: int
    coalesced: int
    cache_hits: int
    in_flight: int
    claims: int
    idle_claims: int
    notify_wakes: int  # enqueue notifies that woke the claimer
    notifies_ignored: int  # enqueue notifies heard while not on call (hand-over moments)
    takeovers: int  # times this worker went on call


class Worker:
    def __init__(
        self,
        config: WorkerConfig,
        surface: Surface,
        queue: QueueClient,
        *,
        client_db: Database | None = None,
        cache: TtlCache | None = None,
        reporter: Reporter | None = None,
    ) -> None:
        self.config = config
        self.surface = surface
        self.queue = queue
        self.reporter = reporter
        self.held = HeldJobs(on_hand_off=self._slot_freed, on_change=self._held_changed)
        self.completer = Completer(queue)
        self.progress = ProgressWriter(queue)
        self.executor = JobExecutor(
            config,
            surface,
            queue,
            self.completer,
            self.held,
            client_db=client_db,
            cache=cache if cache is not None else TtlCache(),
            reporter=reporter,
            on_finished=self._slot_freed,
            progress=self.progress,
        )
        self.claimer = Claimer(
            config,
            queue,
            self.held,
            self.executor.run,
            hears_enqueues=self._hears_enqueues,
            bounds=flow_bounds(surface),
        )
        self.executor.on_retry = self.claimer.retry_due
        self.leases = LeaseKeeper(config, queue, self.held)
        self.liveness = Liveness(
            queue.db,
            config.worker_id,
            config.queue_type,
            opens=queue.seal.key_ids if queue.seal is not None else None,
            beat=config.beat_seconds,
            lapse=config.lapse_seconds,
        )
        # It starts listening on the wake channel too (answering every notify until the
        # on-call lock's connection is up); OnCall then keeps it there only while on call.
        self.cancel_channel = config.parsed_type.cancel_channel
        self.listener = queue.db.listener(
            [config.parsed_type.wake_channel, INVALIDATE_CHANNEL, self.cancel_channel],
        )
        self.cancels = CancelWatch(queue, self.held)
        oncall_key = config.parsed_type.oncall_key
        self.oncall = OnCall(
            SessionLock(queue.db.config, oncall_key, loop=queue.db.loop),
            free_slots=lambda: self.held.free_slots(config.concurrency),
            wake=self.claimer.wake,
            listener=self.listener,
            channel=config.parsed_type.wake_channel,
            outsider=lambda: outsider_holding(queue.db, oncall_key),
        )
        self.invalidations = Invalidations(queue.seal)
        self.notify_wakes = 0
        self.notifies_ignored = 0
        self._build_maintenance(config, queue.db)
        self._stopping = False
        self._starting = trio.CancelScope()  # until every service has started
        self._jobs_scope = trio.CancelScope()

    def _build_maintenance(self, config: WorkerConfig, db: Database) -> None:
        """The fleet's maintenance, run where this worker leads it (one leader of the
        fleet): the pass schedule, the depth sampler and the growth watch."""
        self.leader = Leader(db)
        self.maintenance = Maintenance(
            db,
            interval=config.maintenance_seconds,
            retention=config.retention,
            holder=self.leader.holder,
            keep=self.leader.term,
        )
        self.sampler = QueueSampler(db, interval=config.sample_seconds, types=[config.queue_type])
        for service in (self.maintenance.run, self.sampler.run, GrowthWatch(db).run):
            self.leader.add(service)

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called (it claims no more)."""
        return self._stopping

    @property
    def cache(self) -> TtlCache:
        return self.executor.cache

    # -- lifecycle --------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until :meth:`stop`; returns once in-flight work is finished or released."""
        async with trio.open_nursery() as services:
            # Starting can wait on the queue DB (the listener's first LISTEN); a stop
            # meanwhile ends it, and the worker with it (it has claimed nothing yet).
            with self._starting:
                await services.start(self.listener.run)
                await services.start(self.cancels.run)
                services.start_soon(self._dispatch_notifications)
                await services.start(self.completer.run)
                await services.start(self.liveness.run)  # its row before its first claim
                await services.start(self.oncall.run)
                services.start_soon(self.leases.run)
                services.start_soon(self.executor.deadlines.run)
                services.start_soon(self.progress.run)
                services.start_soon(self.leader.run)
                reporter_run = getattr(self.reporter, "run", None)
                if reporter_run is not None:
                    await services.start(reporter_run)
            if self._stopping:
                log.info("worker %s stopped while starting", self.config.worker_id)
                services.cancel_scope.cancel()
            else:
                await self._serve(services, task_status)
        await self.liveness.leave()  # its beats have stopped; every claim is let go

    async def _serve(self, services: trio.Nursery, task_status: trio.TaskStatus[None]) -> None:
        log.info(
            "worker %s serving %s (concurrency %d)",
            self.config.worker_id,
            self.config.queue_type,
            self.config.concurrency,
        )
        with self._jobs_scope:
            async with trio.open_nursery() as jobs:
                task_status.started()
                await self.claimer.run(jobs)
        log.info("worker %s stopped", self.config.worker_id)
        services.cancel_scope.cancel()

    def stop(self, *, force: bool = False) -> None:
        """Stop claiming; in-flight jobs get the grace period (none if ``force``),
        then are released."""
        if force:
            self._jobs_scope.cancel()
        if self._stopping:
            return
        self._stopping = True
        self._starting.cancel()  # still starting (waiting on the queue DB): stop there
        self._jobs_scope.deadline = trio.current_time() + self.config.shutdown_grace_seconds
        self.claimer.stop()
        self.oncall.stop()
        log.info(
            "worker %s stopping: %d job(s) in flight, grace %gs",
            self.config.worker_id,
            len(self.held),
            self.config.shutdown_grace_seconds,
        )

    def statistics(self) -> WorkerStatistics:
        c = self.executor.counters
        return WorkerStatistics(
            claimed=self.claimer.claimed,
            done=c.done,
            errors=c.errors,
            failed=c.failed,
            poisoned=c.poisoned,
            poisoned_at_claim=self.claimer.poisoned,
            lost=c.lost,
            cancelled=c.cancelled,
            released=c.released,
            coalesced=c.coalesced,
            cache_hits=c.cache_hits,
            in_flight=len(self.held),
            claims=self.claimer.claims,
            idle_claims=self.claimer.idle_claims,
            notify_wakes=self.notify_wakes,
            notifies_ignored=self.notifies_ignored,
            takeovers=self.oncall.takeovers,
        )

    def _hears_enqueues(self) -> bool:
        """Whether the enqueue notify reaches this worker now: on call (or degraded,
        answering every notify) with its LISTEN connection up."""
        return self.oncall.answers_notifies() and self.listener.connected

    def _slot_freed(self) -> None:
        self.claimer.slot_freed()

    def _held_changed(self) -> None:
        self.oncall.slots_changed()

    async def _dispatch_notifications(self) -> None:
        async for event in self.listener.events:
            if isinstance(event, Gap):
                # Invalidations may have been missed: drop the cache; and look for work.
                self.cache.clear()
                self.claimer.wake()
            elif isinstance(event, Notification):
                if event.channel == INVALIDATE_CHANNEL:
                    tag = self.invalidations.tag_of(event.payload)
                    if tag is not None:
                        dropped = self.cache.invalidate_tag(tag)
                        log.info("cache: invalidated tag %r (%d entries)", tag, dropped)
                elif event.channel == self.cancel_channel:
                    self.cancels.heard(event.payload)
                elif self.oncall.answers_notifies():
                    self.notify_wakes += 1
                    self.claimer.wake()
                else:  # heard just before our UNLISTEN: the worker on call claims
                    self.notifies_ignored += 1
