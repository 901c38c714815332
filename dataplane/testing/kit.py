"""One test's plane without its BFF: real workers in the test's process, and what they
did.

:class:`Kit` owns, for one test, a pool on its queue DB, the read-only client DB (proven
read-only as a worker's boot proves it, :func:`~dataplane.worker.readonly.open_client_database`),
and one real :class:`~dataplane.worker.Worker` per surface under test, started in the
kit's nursery the first time that surface is asked for. A worker runs every job of its
surface through the real executor: params validated, gates re-enforced, the TTL cache,
single flight, the handler under its timeout, the result schema (always ``enforce``
here), the completion. Jobs get one attempt (``max_dequeues`` 1): a failure or a timeout
answers ``POISON`` at once instead of after retries.

:meth:`Kit.run_operation` is a ``POST /q`` without HTTP: the BFF's checks (400, 403,
404), the envelope the BFF builds, the enqueue (attaching to an identical live job, as
the BFF does), then the answer of the finished row exactly as the BFF renders it.

Every finished attempt is reported as capcom records it, into ``worker_runs``
(:class:`RunsRecorder`); :meth:`Kit.executions` reads them once every worker is idle and
the reports are written, :meth:`Kit.enqueued` reads ``maestro_queues``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import trio
from opentelemetry.context import Context

from dataplane.auth.claims import AuthError
from dataplane.bff.auth.tokens import StreamGrant, StreamTokens, requester_of
from dataplane.bff.jobs import answer
from dataplane.bff.plane import BffServices
from dataplane.capcom.app import insert_reports
from dataplane.core.errors import HttpError, InvalidArgument
from dataplane.db import Database, DatabaseConfig, open_database, q
from dataplane.queue import JobRow, QueueClient, QueueConfig
from dataplane.queue.envelope import Auth, Envelope
from dataplane.surfaces.manifest import Surface
from dataplane.testing.answers import (
    NOTIFY_SECRET,
    STREAM_SECRET,
    Answer,
    caller_of,
    refusal,
)
from dataplane.testing.surfaces import UnderTest
from dataplane.worker import Worker, WorkerConfig
from dataplane.worker.readonly import open_client_database
from telemetry.report import JobReport, check_report, encode_report

ANSWER_SLACK = 10.0  # seconds past an operation's timeout before waiting for it fails
ATTEMPTS = 1  # max_dequeues of the kit's jobs: a failure answers POISON at once
POLL_START, POLL_MAX = 0.002, 0.05  # seconds between reads of a row being waited on


@dataclass(frozen=True, slots=True)
class Enqueued:
    """A row of ``maestro_queues``: ``requesters`` counts the callers attached to it."""

    id: uuid.UUID
    type: str
    status: str
    operation: str
    params: Any
    requesters: int
    dequeue_count: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Execution:
    """A row of ``worker_runs``: one finished attempt (``coalesced``: it shared another
    execution's outcome; ``cache`` ``hit``: it ran nothing)."""

    job_id: uuid.UUID
    type: str
    operation: str
    outcome: str
    cache: str
    coalesced: bool
    dequeue_count: int
    worker_id: str


class RunsRecorder:
    """A :class:`~dataplane.worker.report.Reporter` writing each report into
    ``worker_runs`` as capcom does (:func:`~dataplane.capcom.app.insert_reports`), checked
    as capcom checks a posted report; :meth:`wait_written` returns once all are written."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._pending: list[dict[str, Any]] = []
        self._reported = self._written = 0
        self._wake = trio.Event()
        self._changed = trio.Event()

    def report(self, job: JobReport, *, parent: Context | None = None) -> None:
        self._pending.append(check_report(json.loads(encode_report(job))))
        self._reported += 1
        self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            batch, self._pending = self._pending, []
            if batch:
                await insert_reports(self.db, batch)
                self._written += len(batch)
                self._changed.set()
                self._changed = trio.Event()

    async def wait_written(self) -> None:
        while self._written < self._reported:
            await self._changed.wait()


class Kit:
    """The test's workers and queue (see the module docstring)."""

    def __init__(
        self,
        nursery: trio.Nursery,
        queue: QueueClient,
        under_test: UnderTest,
        client_db: Database | None,
        *,
        suffix: str = "",
    ) -> None:
        self.nursery = nursery
        self.queue = queue
        self.under_test = under_test
        self.client_db = client_db
        self.suffix = suffix  # the tier: "" (live) or "-dev"
        self.recorder = RunsRecorder(queue.db)
        self.workers: dict[str, Worker] = {}
        self._tokens = StreamTokens(STREAM_SECRET.encode())

    async def worker(self, surface: Surface) -> Worker:
        """The running worker of ``surface`` (started on the first call)."""
        if surface.id in self.workers:
            return self.workers[surface.id]
        if surface.needs_client_db and self.client_db is None:
            raise InvalidArgument(
                f"surface {surface.id!r} needs a client DB: give SQL in the "
                "dataplane_client_db_sql fixture, or serve a SurfacePackage with build_demo_db"
            )
        config = WorkerConfig(
            queue_type=surface.queue_type(self.suffix).name,
            worker_id=f"kit-{surface.id}",
            queue=self.queue.config,
            idle_ms=200,
            result_check="enforce",
        )
        worker = Worker(
            config,
            surface,
            self.queue,
            client_db=self.client_db if surface.needs_client_db else None,
            reporter=self.recorder,
        )
        self.workers[surface.id] = worker
        await self.nursery.start(worker.run)
        return worker

    async def start_all(self) -> None:
        for surface in self.under_test.surfaces.values():
            if self.client_db is not None or not surface.needs_client_db:
                await self.worker(surface)

    async def run_operation(
        self,
        surface: Surface | str,
        operation: str,
        params: Any = None,
        *,
        auth: Auth | str | None = None,
    ) -> Answer:
        """Run ``operation`` of ``surface`` as ``POST /api/<surface>/q`` would, through
        the real worker; the :class:`Answer` the browser would get.

        ``params`` defaults to ``{}``; ``auth`` is an :class:`Auth`, a token
        (:func:`~dataplane.testing.token`) or None (that function's default caller).
        """
        target = self.under_test.surface(surface)
        try:
            caller = caller_of(auth)
        except AuthError as exc:
            return refusal(401, str(exc))
        try:
            op = target.operation(operation)
            checked = op.check(caller, {} if params is None else params)
        except HttpError as exc:
            return refusal(exc.status, exc.message)
        env = Envelope(
            target.id, op.name, op.version, checked, caller, tier=self.suffix, per_user=op.per_user
        )
        await self.worker(target)
        requester = requester_of(caller.client, caller.user_id)
        try:
            enqueued = await self.queue.enqueue(
                target.queue_type(self.suffix),
                env.dedupe_key,
                env.to_json(),
                max_dequeues=ATTEMPTS,
                requester=requester,
            )
        except InvalidArgument as exc:  # text Postgres cannot store (NUL, lone surrogates)
            return refusal(400, f"params: {exc}")
        within = op.timeout_seconds * ATTEMPTS + ANSWER_SLACK
        row = await self.wait_finished(enqueued.job_id, within=within)
        grant = StreamGrant(
            str(row.id),
            target.id,
            caller.client,
            caller.scope_key,
            enqueued.coalesced,
            self.suffix,
            requester,
        )
        return Answer(200, answer(self._blob_links(), row, grant))

    async def wait_finished(self, job_id: uuid.UUID | str, *, within: float) -> JobRow:
        """The job's row once it is finished (done, poison or cancelled)."""
        pause = POLL_START
        with trio.fail_after(within):
            while True:
                row = await self.queue.get(job_id)
                if row is not None and row.finished:
                    return row
                await trio.sleep(pause)
                pause = min(pause * 2, POLL_MAX)

    def _blob_links(self) -> BffServices:
        """What :func:`~dataplane.bff.jobs.answer` reads of the BFF: its tier and its
        URL-token key (a blob's ``url``), nothing else."""
        return cast(BffServices, _BlobLinks(_Tier(self.suffix), self._tokens))

    def _types(self, surface: Surface | str | None) -> list[str]:
        chosen = (
            list(self.under_test.surfaces.values())
            if surface is None
            else [self.under_test.surface(surface)]
        )
        return [s.queue_type(self.suffix).name for s in chosen]

    async def enqueued(
        self, surface: Surface | str | None = None, operation: str | None = None
    ) -> list[Enqueued]:
        """The queue's rows of ``surface`` (or of every surface under test), oldest first,
        of ``operation`` only when given."""
        rows = await self.queue.db.fetchall(
            q("kit_enqueued"), {"types": self._types(surface), "operation": operation}
        )
        return [Enqueued(**row) for row in rows]

    async def executions(
        self, surface: Surface | str | None = None, operation: str | None = None
    ) -> list[Execution]:
        """The finished attempts (``worker_runs``) of ``surface`` (or every surface under
        test), of ``operation`` only when given, once every worker is idle and its
        reports are written."""
        with trio.fail_after(ANSWER_SLACK):
            for worker in self.workers.values():
                await worker.held.wait_idle()
            await self.recorder.wait_written()
        rows = await self.queue.db.fetchall(
            q("kit_executions"), {"types": self._types(surface), "operation": operation}
        )
        return [Execution(**row) for row in rows]

    def stop(self) -> None:
        for worker in self.workers.values():
            worker.stop(force=True)


@dataclass(frozen=True, slots=True)
class _Tier:
    queue_suffix: str


@dataclass(frozen=True, slots=True)
class _BlobLinks:
    config: _Tier
    tokens: StreamTokens


@asynccontextmanager
async def open_kit(
    loop: Any,
    queue_dsn: str,
    under_test: UnderTest,
    client_dsn: str | None,
    *,
    suffix: str = "",
) -> AsyncIterator[Kit]:
    """A :class:`Kit` on ``queue_dsn`` (a superuser's: the kit writes ``worker_runs`` as
    capcom would) and ``client_dsn`` (read-only, proven so), on the bridge ``loop``;
    its workers stopped at the end."""
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(
            open_database(
                DatabaseConfig(queue_dsn, pool_size=8, application_name="dataplane-kit"),
                loop=loop,
            )
        )
        client_db = None
        if client_dsn is not None and under_test.needs_client_db:
            config = DatabaseConfig(
                client_dsn, pool_size=4, application_name="dataplane-kit-client", read_only=True
            )
            client_db = await stack.enter_async_context(open_client_database(config, loop=loop))
        queue = QueueClient(db, QueueConfig(notify_secret=NOTIFY_SECRET, fail_backoff_seconds=0.0))
        nursery = await stack.enter_async_context(trio.open_nursery())
        kit = Kit(nursery, queue, under_test, client_db, suffix=suffix)
        await nursery.start(kit.recorder.run)
        try:
            yield kit
        finally:
            kit.stop()
            nursery.cancel_scope.cancel()
