"""A failed attempt's record, as its job row keeps it (``errors``, migration 0023).

Like the job report (:mod:`telemetry.report`), one attempt told by the worker that ran
it, which makes it (:mod:`dataplane.worker.pipeline.failures`) and hands it to
``QueueClient.fail``, whose fenced statement appends it with the queue DB's time
(``at``) and keeps the newest :data:`FAILURES_KEPT`; operators read it back
(:mod:`dataplane.operator.attempts`). ``str()`` of it is the row's ``last_error``
(``KeyError: 'oops'``).

Every text in it is storable: jsonb and text hold neither NUL nor an unpaired
surrogate, so :func:`storable` writes those as escapes rather than lose the record (or
the row's failure write with it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
FAILURES_KEPT: Final = 20  # records a row keeps, the newest (the oldest dropped)


def storable(text: str) -> str:
    """``text`` as Postgres can store it (text and jsonb): a NUL written ``\\x00``, an
    unpaired surrogate as its escape."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


@dataclass(frozen=True, slots=True)
class AttemptFailure:
    """One attempt's unexpected exception (a timeout included)."""

    attempt: int  # the claim's dequeue count (it starts again after an operator's retry)
    worker: str  # the worker id that ran it
    type: str  # the exception's qualified name (``KeyError``, ``pkg.errors.Boom``)
    message: str
    traceback: str  # formatted, bounded; the surface's frames begin with ``>``
    frame: str | None = None  # the innermost frame of the surface's code: file:line in func
    trace_id: str | None = None  # the attempt's trace (32 hex), when tracing is on
    at: datetime | None = None  # the queue DB's time of the write (set by job_fail)

    def __str__(self) -> str:
        """``KeyError: 'oops'``: the class's own name and the message (``last_error``)."""
        name = self.type.rsplit(".", 1)[-1]
        return f"{name}: {self.message}" if self.message else name

    def to_json(self) -> str:
        """The record as job_fail takes it (``at`` is the statement's own)."""
        return _COMPACT.encode(
            {
                "attempt": self.attempt,
                "worker": storable(self.worker),
                "type": storable(self.type),
                "message": storable(self.message),
                "traceback": storable(self.traceback),
                "frame": None if self.frame is None else storable(self.frame),
                "trace_id": self.trace_id,
            }
        )

    @classmethod
    def from_json(cls, data: Any) -> AttemptFailure | None:
        """A stored record (None for anything that is not one)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("attempt"), int):
            return None
        at = data.get("at")
        try:
            when = datetime.fromisoformat(at) if isinstance(at, str) else None
        except ValueError:
            when = None
        return cls(
            attempt=data["attempt"],
            worker=str(data.get("worker") or "?"),
            type=str(data.get("type") or "?"),
            message=str(data.get("message") or ""),
            traceback=str(data.get("traceback") or ""),
            frame=_text_or_none(data.get("frame")),
            trace_id=_text_or_none(data.get("trace_id")),
            at=when,
        )


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
