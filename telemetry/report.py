"""The job report: one finished job, as a worker sends it and ``worker_runs`` stores it.

:class:`JobReport` is the one declaration of the report. Its fields, in
``worker_runs`` column order, each carry their check in their metadata; from them
come the sender's JSON encoding (:func:`encode_report`), the receiver's checks
(:func:`check_report`, :func:`check_reports`) and the ``worker_run_insert``
parameters (:func:`insert_params`). The SQL statement names the same columns; a
test holds the two together. ``trace_id`` (the attempt's trace, 32 lowercase hex
digits, or null) is optional: a report without it is stored with none.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_TEXT = 512  # characters of type, operation, worker_id
INT4_MAX = 2**31 - 1
INT8_MAX = 2**63 - 1
MAX_UNIX_SECONDS = 253_402_300_799.0  # 9999-12-31T23:59:59Z, Postgres' usable range
MAX_BATCH = 100  # reports one POST may carry
_TRACE_ID = re.compile(r"[0-9a-f]{32}")


class Outcome(enum.StrEnum):
    """How one claim of a job ended."""

    DONE = "done"  # completed with a result
    ERROR = "error"  # completed with an expected error (HttpError): an answer
    FAILED = "failed"  # an unexpected error: retried after the backoff
    POISON = "poison"  # an unexpected error at the cutoff: parked
    LOST = "lost"  # the lease was lost: the work was dropped
    RELEASED = "released"  # handed back at shutdown, not counted
    CANCELLED = "cancelled"  # an operator cancelled the job: its execution was cancelled


class CacheStatus(enum.StrEnum):
    HIT = "hit"
    MISS = "miss"
    BYPASS = "bypass"  # the operation is not cached (or the job never got that far)


class ReportError(ValueError):
    """A report that cannot be stored; the message names the field."""


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ReportError("expected a non-empty string")
    if len(value) > MAX_TEXT:
        raise ReportError(f"longer than {MAX_TEXT} characters")
    if "\x00" in value:
        raise ReportError("contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ReportError("contains a lone surrogate") from None
    return value


def _choice(allowed: type[enum.StrEnum]) -> Callable[[Any], str]:
    values = frozenset(m.value for m in allowed)

    def check(value: Any) -> str:
        if not isinstance(value, str) or value not in values:
            raise ReportError(f"expected one of {', '.join(sorted(values))}")
        return str(value)

    return check


def _job_id(value: Any) -> uuid.UUID:
    if not isinstance(value, str):
        raise ReportError("expected a UUID string")
    try:
        return uuid.UUID(value)
    except ValueError:
        raise ReportError("expected a UUID string") from None


def _finite(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ReportError(f"expected {what}")
    try:
        number = float(value)
    except OverflowError:  # an integer too large for a float
        raise ReportError(f"expected {what} in range") from None
    if not math.isfinite(number):
        raise ReportError(f"expected {what}, finite")
    return number


def _milliseconds(value: Any) -> float:
    number = _finite(value, "a number")
    if number < 0:
        raise ReportError("expected a finite number >= 0")
    return number


def _integer(maximum: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ReportError("expected an integer")
        if not 0 <= value <= maximum:
            raise ReportError(f"expected an integer from 0 to {maximum}")
        return value

    return check


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ReportError("expected true or false")
    return value


def _unix_seconds(value: Any) -> float:
    number = _finite(value, "unix seconds (a number)")
    if not 0 < number <= MAX_UNIX_SECONDS:
        raise ReportError("expected unix seconds after 1970 and before 10000")
    return number


def _trace_id(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _TRACE_ID.fullmatch(value) or not value.strip("0"):
        raise ReportError("expected 32 lowercase hex digits (not all zero) or null")
    return value


@dataclass(frozen=True, slots=True)
class JobReport:
    """One finished job (a ``worker_runs`` row), fields in column order."""

    job_id: str = field(metadata={"check": _job_id})
    type: str = field(metadata={"check": _text})
    operation: str = field(metadata={"check": _text})
    outcome: Outcome = field(metadata={"check": _choice(Outcome)})
    wall_ms: float = field(metadata={"check": _milliseconds})
    cpu_ms: float = field(metadata={"check": _milliseconds})
    rss_bytes: int = field(metadata={"check": _integer(INT8_MAX)})
    queue_wait_ms: float = field(metadata={"check": _milliseconds})
    cache: CacheStatus = field(metadata={"check": _choice(CacheStatus)})
    coalesced: bool = field(metadata={"check": _boolean})
    dequeue_count: int = field(metadata={"check": _integer(INT4_MAX)})
    worker_id: str = field(metadata={"check": _text})
    finished_at: float = field(metadata={"check": _unix_seconds})  # unix seconds
    trace_id: str | None = field(default=None, metadata={"check": _trace_id, "optional": True})


FIELDS: dict[str, Callable[[Any], Any]] = {
    f.name: f.metadata["check"] for f in dataclasses.fields(JobReport)
}
OPTIONAL = frozenset(f.name for f in dataclasses.fields(JobReport) if f.metadata.get("optional"))


def encode_report(report: JobReport) -> bytes:
    """The report as one compact JSON object (what the sender posts)."""
    body = {name: getattr(report, name) for name in FIELDS}
    return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()


def check_report(body: Any, *, where: str = "report") -> dict[str, Any]:
    """One report, every field checked and converted; :class:`ReportError` otherwise."""
    if not isinstance(body, dict):
        raise ReportError(f"{where}: expected a JSON object of the job report fields")
    unknown = sorted(set(body) - FIELDS.keys())
    if unknown:
        raise ReportError(f"{where}: unknown field(s): {', '.join(unknown)}")
    missing = [name for name in FIELDS if name not in body and name not in OPTIONAL]
    if missing:
        raise ReportError(f"{where}: missing field(s): {', '.join(missing)}")
    checked: dict[str, Any] = {}
    for name, check in FIELDS.items():
        try:
            checked[name] = check(body.get(name))
        except ReportError as exc:
            raise ReportError(f"{where}.{name}: {exc}") from None
    return checked


def check_reports(body: Any) -> list[dict[str, Any]]:
    """A report, or a non-empty array of at most :data:`MAX_BATCH` reports."""
    if isinstance(body, list):
        if not 1 <= len(body) <= MAX_BATCH:
            raise ReportError(f"a batch holds 1 to {MAX_BATCH} reports, got {len(body)}")
        return [check_report(item, where=f"reports[{i}]") for i, item in enumerate(body)]
    return [check_report(body)]


def insert_params(reports: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The ``worker_run_insert`` parameters: one array per column."""
    return {name: [report[name] for report in reports] for name in FIELDS}
