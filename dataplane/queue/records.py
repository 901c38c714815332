"""What the queue hands out and takes in: claimed jobs, rows (and who cancelled one),
completions (blobs: :mod:`dataplane.queue.blobs`).

A :class:`ClaimedJob` carries its *fence*, (``id``, ``worker_id``,
``dequeue_count``): every write by a claimer names it, so a claimer whose lease
lapsed cannot touch a newer claim of the same row. A :class:`Poisoned` row is one a
claim or a maintenance pass parked as poison because the lease of its last attempt
lapsed: no worker is left to say so, so whoever parked it traces, counts and logs it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeGuard

from opentelemetry.context import Context

from dataplane.core.errors import InvalidArgument
from dataplane.queue.blobs import Blob

_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def to_json(value: Any, *, what: str = "value") -> str:
    """Canonical compact JSON for a jsonb column; a clear error when impossible."""
    try:
        text = _COMPACT.encode(value)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"{what} is not JSON-serialisable: {exc}") from None
    if "\\u0000" in text:
        raise InvalidArgument(f"{what} contains a NUL character, which jsonb cannot store")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"{what} contains an unpaired surrogate (not UTF-8)") from None
    return text


class JsonText(str):
    """A result already serialised with :func:`to_json` (passed through as is)."""

    __slots__ = ()


FINISHED_STATUSES = ("done", "poison", "cancelled")


@dataclass(frozen=True, slots=True)
class CancelResult:
    """What a withdrawal did: ``"cancelled"`` (it was the last: ``running`` says whether
    the job was running, ``at`` when); ``"pending"`` or ``"in_progress"`` (other
    requesters keep the job, ``requesters`` of them: its status); ``"withdrawn"`` (this
    requester had withdrawn already: nothing changed); ``"not_requester"`` (the job names
    its requesters and this is not one: nothing changed); or ``None`` (not live: finished
    or unknown). ``requesters``: those still waiting on it; ``running``: it runs (ran)."""

    status: str | None
    requesters: int
    running: bool = False
    at: datetime | None = None


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    job_id: uuid.UUID
    coalesced: bool
    status: str
    traceparent: str | None = None  # of the row's envelope: the executing trace


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A row as this claimer holds it; the fence is (id, worker_id, dequeue_count)."""

    id: uuid.UUID
    type: str
    dedupe_key: str
    payload: dict[str, Any]
    dequeue_count: int
    max_dequeues: int
    created_at: datetime
    ready_at: datetime  # when the row last became claimable (enqueue, backoff end, lapse)
    claimed_at: datetime
    lease_expires_at: datetime
    worker_id: str
    # When this process received the claim (its monotonic clock): with claimed_at (the
    # queue DB's clock), when the job finished (Completion.completed_at).
    received: float = field(default_factory=time.monotonic, compare=False)

    @property
    def queue_wait_ms(self) -> float:
        """Since enqueue (retry backoffs and earlier attempts included)."""
        return (self.claimed_at - self.created_at).total_seconds() * 1000.0

    @property
    def ready_wait_ms(self) -> float:
        """Since the row became claimable: the wait a worker could have shortened."""
        return max(0.0, (self.claimed_at - self.ready_at).total_seconds() * 1000.0)


@dataclass(frozen=True, slots=True)
class Poisoned:
    """A row parked as poison with the lease of its last attempt lapsed (its worker
    died): what its trace, its count and its log line need."""

    id: uuid.UUID
    type: str
    dequeue_count: int  # its attempts, the last one lapsed
    max_dequeues: int
    traceparent: str | None  # the request's producer context (the envelope's)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Poisoned:
        """From a row of ``job_claim`` or ``reap_lapsed_at_cutoff``."""
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True, slots=True)
class ClaimBatch:
    """What one claim statement did: the rows it claimed, oldest first, the claimable
    rows it found with their dequeue budget spent and parked as poison, and the
    operations whose claimable rows it left pending for their flow bound."""

    jobs: list[ClaimedJob]
    poisoned: list[Poisoned]
    deferred: list[str] = field(default_factory=list)  # operation names, each once

    @property
    def taken(self) -> int:
        """Rows the statement took (claimed or poisoned), of the ``limit`` it asked for."""
        return len(self.jobs) + len(self.poisoned)


@dataclass(frozen=True, slots=True)
class Completion:
    """One finished job for :meth:`QueueClient.complete_many`."""

    job: ClaimedJob
    result: Any
    blob: Blob | None = None
    trace: Context | None = None  # the settle span its statement is traced under
    finished: float = field(default_factory=time.monotonic, compare=False)  # monotonic

    @property
    def completed_at(self) -> datetime:
        """When the job finished, on the queue DB's clock: its claim time plus the time
        this process took since receiving the claim (the row's ``completed_at``; fixed
        when the completion is made, so a retried statement writes the same)."""
        job = self.job
        return job.claimed_at + timedelta(seconds=max(0.0, self.finished - job.received))


Who = Literal["requesters", "operator"]


@dataclass(frozen=True, slots=True)
class Cancellation:
    """Who cancelled a job (migration 0025): its ``requesters`` (the last one's
    withdrawal, ``job_cancel``) or an ``operator`` (``job_operator_cancel``), named by
    the audit row's actor; whether it was running (its handler was stopped); and when
    (``completed_at``). A row an older release cancelled records none: None."""

    by: Who
    running: bool
    at: datetime | None
    operator: str | None = None

    @classmethod
    def of_row(cls, row: Mapping[str, Any]) -> Cancellation | None:
        """The cancellation a row's columns record; None when they record none (a row
        that is not cancelled, or that an older release cancelled)."""
        by = row["cancelled_by"]
        if by == "requesters":
            return cls("requesters", bool(row["cancelled_running"]), row["completed_at"])
        if by == "operator":
            operator = row["cancelled_operator"]
            return cls("operator", bool(row["cancelled_running"]), row["completed_at"], operator)
        return None

    def says(self) -> str:
        """One sentence: who, before or while it ran, and when."""
        if self.by == "requesters":
            who = "by its requesters (every one withdrew)"
        else:
            who = f"by the operator {self.operator}" if self.operator else "by an operator"
        when = "while it ran" if self.running else "before it ran"
        return f"the job was cancelled {who} {when}" + (f", at {iso(self.at)}" if self.at else "")

    def to_json(self) -> dict[str, Any]:
        """``{by, operator?, whileRunning, at}``: what a program reads of it."""
        out: dict[str, Any] = {"by": self.by}
        if self.operator is not None:
            out["operator"] = self.operator
        out["whileRunning"] = self.running
        if self.at is not None:
            out["at"] = iso(self.at)
        return out


def iso(at: datetime) -> str:
    """RFC 3339 in UTC, to the millisecond: ``2025-06-01T12:00:00.123Z``."""
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class JobRow:
    """A queue row as readers (BFF, operators) see it."""

    id: uuid.UUID
    type: str
    status: str
    dedupe_key: str
    payload: dict[str, Any]
    result: Any
    last_error: str | None
    locked_by: str | None
    dequeue_count: int
    max_dequeues: int
    available_at: datetime
    lease_expires_at: datetime | None
    created_at: datetime
    claimed_at: datetime | None
    completed_at: datetime | None
    progress: Any = None  # a running job's last progress (dataplane.queue.notices.progress)
    cancellation: Cancellation | None = None  # who cancelled it, and when (0025)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> JobRow:
        fields = {name: row[name] for name in cls.__dataclass_fields__ if name != "cancellation"}
        return cls(**fields, cancellation=Cancellation.of_row(row))

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @classmethod
    def from_done_note(cls, job_id: uuid.UUID, text: str) -> JobRow | None:
        """The row a done notify's opened note holds
        (:func:`~dataplane.queue.notices.done.done_note`), or None if ``text`` is not
        such a note: anything unexpected (not JSON, a field missing or
        of another type, a count out of range, a naive timestamp) is None, never an
        error. It holds what an answer and its trace need: of the envelope, only
        ``surface`` and ``traceparent``; ``dedupe_key`` is empty, ``locked_by`` None and
        ``available_at`` the creation time (not carried)."""
        try:
            d = json.loads(text)
        except (ValueError, RecursionError):
            return None
        if not isinstance(d, dict) or "result" not in d:
            return None
        type_, surface, traceparent = d.get("type"), d.get("surface"), d.get("traceparent")
        if not isinstance(type_, str):
            return None
        if not all(v is None or isinstance(v, str) for v in (surface, traceparent)):
            return None
        dequeue_count, max_dequeues = d.get("dequeueCount"), d.get("maxDequeues")
        if not is_count(dequeue_count) or not is_count(max_dequeues):
            return None
        created = parse_timestamp(d.get("createdAt"))
        claimed = parse_timestamp(d.get("claimedAt"))
        completed = parse_timestamp(d.get("completedAt"))
        if created is None or claimed is None or completed is None:
            return None
        return cls(
            id=job_id,
            type=type_,
            status="done",
            dedupe_key="",
            payload={"surface": surface, "traceparent": traceparent},
            result=d["result"],
            last_error=None,
            locked_by=None,
            dequeue_count=dequeue_count,
            max_dequeues=max_dequeues,
            available_at=created,
            lease_expires_at=None,
            created_at=created,
            claimed_at=claimed,
            completed_at=completed,
        )


MAX_COUNT = 2**31 - 1  # dequeue counts are Postgres integers


def is_count(value: object) -> TypeGuard[int]:
    return type(value) is int and 0 <= value <= MAX_COUNT


def parse_timestamp(value: Any) -> datetime | None:
    """An ISO 8601 timestamp with its offset, else None."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def job_uuid(value: uuid.UUID | str) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise InvalidArgument(f"not a job id: {value!r}") from None


# -- flow control ---------------------------------------------------------------------
# Flow control: the bounds a claim enforces on an operation's running attempts.
#
# A :class:`FlowBound` says how many attempts of one operation may run at once across
# every worker of a queue type (``max``) and of one client's (``per_client``); either
# may be None (no bound of that kind). The worker passes the bounds of its surface's
# operations to every claim (:meth:`QueueClient.claim_batch`), as the jsonb
# ``maestro_claim`` reads (migration 0015): the claim counts the operation's running
# rows (``in_progress`` with an unexpired lease) and leaves the rows over a bound
# pending, reporting each operation it deferred. No bounds: the claim of 0008, unchanged.


@dataclass(frozen=True, slots=True)
class FlowBound:
    max: int | None = None  # attempts of the operation running at once, fleet-wide
    per_client: int | None = None  # of one client's

    def __post_init__(self) -> None:
        for name in ("max", "per_client"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 1
            ):
                raise InvalidArgument(f"flow bound {name} must be an integer >= 1 or None")

    @property
    def bounded(self) -> bool:
        return self.max is not None or self.per_client is not None


FlowBounds = Mapping[str, FlowBound]  # operation name -> its bound


def bounds_json(bounds: FlowBounds | None) -> str | None:
    """``maestro_claim``'s ``p_bounds``: the bounded operations only; None when none is."""
    if not bounds:
        return None
    out = {}
    for operation, bound in sorted(bounds.items()):
        if not isinstance(operation, str) or not operation:
            raise InvalidArgument("a flow bound's operation must be a non-empty string")
        if bound.bounded:
            out[operation] = {"max": bound.max, "per_client": bound.per_client}
    return to_json(out, what="flow bounds") if out else None
