"""What a live job's streams hear before its answer: its *updates*, progress and retries.

Two families of channels carry them, one of each per served queue type:
``<type>_progress`` (a running job's progress: :mod:`dataplane.queue.notices.progress`) and
``<type>_retry`` (an attempt failed and the job waits out its backoff before the next:
:mod:`dataplane.queue.notices.retries`). A payload is ``<job id>``, or with the workers' notify
secret ``<job id> <sealed note>``, sealed under the kind's own associated data
(``progress|<job id>``, ``retry|<job id>``), so a note of one kind never opens as
another, nor as an answer.

:class:`UpdateFeed` takes these notifies in for the reply pump
(:mod:`dataplane.bff.reply.pump`, whose LISTEN connection hears them): for a job
nobody here waits on, a notify costs the parse of its id; for a job with waiters, a
note that opens and parses is handed to them at once, and anything else (no note, a
note that does not open or parse, which is also counted as rejected) makes the pump
read the rows of the jobs concerned, once per batch of notifies. A read hands over
only what the row confirms (a progress of a job still running; a retry of a job that
is ``pending`` after a failure with tries left): any role that may connect may send a
notify, and an unsealed one is never more than a hint. A waiter keeps an update only
if it is newer than the one it holds (:class:`~dataplane.bff.reply.waiter.Waiter`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from dataplane.bff.reply.waiter import Update, Waiter
from dataplane.core.errors import DatabaseError
from dataplane.db import Database, Notification
from dataplane.queue import QueueClient, split_done_notify
from dataplane.queue.notices.progress import Progress, read_progress
from dataplane.queue.notices.retries import Retry, read_retries

log = logging.getLogger(__name__)

READ_BATCH = 1000  # job ids per statement


@dataclass(frozen=True, slots=True)
class UpdateKind:
    """How one family of channels carries updates of live jobs."""

    name: str  # the seal's kind: a note sealed as one kind never opens as another
    from_note: Callable[[str], Update | None]
    read: Callable[[Database, Sequence[uuid.UUID]], Awaitable[Mapping[uuid.UUID, Update]]]


PROGRESS = UpdateKind("progress", Progress.from_note, read_progress)
RETRY = UpdateKind("retry", Retry.from_note, read_retries)


class UpdateFeed:
    """The reply pump's intake of update notifies; ``waiters_of`` gives a job's waiters
    (none: nobody here waits on it), ``reject`` counts and logs what fails to open."""

    def __init__(
        self,
        queue: QueueClient,
        waiters_of: Callable[[uuid.UUID], Collection[Waiter]],
        reject: Callable[[str], None],
        *,
        progress_channels: Sequence[str] = (),
        retry_channels: Sequence[str] = (),
    ) -> None:
        self.queue = queue
        self._waiters_of = waiters_of
        self._reject = reject
        self.channels: dict[str, UpdateKind] = {c: PROGRESS for c in progress_channels}
        self.channels.update((c, RETRY) for c in retry_channels)
        self.progress = 0  # progress handed to waiters
        self.retries = 0  # retries handed to waiters

    def kind_of(self, channel: str) -> UpdateKind | None:
        return self.channels.get(channel)

    def take(self, event: Notification, kind: UpdateKind, wanted: set[uuid.UUID]) -> None:
        """One notify of ``kind``: delivered to the job's waiters here when it carries a
        note that opens and parses, else the job is ``wanted`` (:meth:`read`)."""
        try:
            job_id, sealed = split_done_notify(event.payload)  # a done notify's format
        except ValueError:
            self._reject(f"a notify on {event.channel} that names no job")
            return
        if not self._waiters_of(job_id):
            return
        if sealed is not None:
            seal = self.queue.seal
            note = seal.open(str(job_id), sealed, kind=kind.name) if seal is not None else None
            update = kind.from_note(note) if note is not None else None
            if update is not None:
                self.deliver(job_id, update)
                return
            self._reject(f"a {kind.name} note that does not open or parse")
        wanted.add(job_id)

    def deliver(self, job_id: uuid.UUID, update: Update) -> None:
        for waiter in self._waiters_of(job_id):
            if waiter.deliver_update(update):
                if isinstance(update, Retry):
                    self.retries += 1
                else:
                    self.progress += 1

    async def read(self, kind: UpdateKind, ids: Sequence[uuid.UUID]) -> None:
        """The ``kind`` updates the rows of ``ids`` confirm, delivered (a read that fails
        is logged: the next update, or the answer, supersedes it)."""
        try:
            found = await kind.read(self.queue.db, ids[:READ_BATCH])
        except DatabaseError as exc:
            log.warning("pump: could not read the %s of %d job(s) (%s)", kind.name, len(ids), exc)
            return
        for job_id, update in found.items():
            self.deliver(job_id, update)
