"""A failed attempt told as it happened: its record, its log record, its span's event.

:func:`failure_of` makes the record the row keeps
(:class:`~telemetry.failures.AttemptFailure`) from the exception: its qualified
type, its message (at most :data:`MESSAGE_MAX_CHARS`), and its traceback formatted by
the standard library's :mod:`traceback` without local variables, chained causes
included. The traceback is bounded: at most :data:`TRACEBACK_MAX_BYTES` of UTF-8, the
innermost frames kept and a first line saying how many outer frames were cut (a frame
or message alone over :data:`PART_MAX_BYTES` is cut itself). A frame from the
surface's own files (:mod:`dataplane.surfaces.sources`) begins with ``>`` instead of
the first space of its indent. The record's ``frame`` is the innermost of them where
the exception was raised (in an exception group, where its first member with one was;
else in its cause or context), ``file:line in function``, the file as the import
system finds it (``pkg/handlers.py``): a timeout's is where the handler was when its
deadline cancelled it (the :class:`HandlerTimeout`'s cause).

:func:`log_failure` writes the attempt's one ERROR record on the logger
``dataplane.worker.failures``: a first line naming the job, its surface and operation,
the attempt, that frame and the exception, and the traceback as the record's
``traceback`` field (the text format prints it under the line; the JSON format
carries it with ``job_id``, ``surface``, ``operation``, ``attempt``, ``error_type``,
``frame``, and the trace and span ids). ``dataplane dev`` prints that first line in
its terminal as it happens (:mod:`dataplane.dev.failures`).

Every text is made storable first (a NUL or a lone surrogate written as its escape:
:func:`~telemetry.failures.storable`), so the record, the log line and the span
carry the same text and none of them can fail on it.
"""

from __future__ import annotations

import logging
import re
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from dataplane.queue import ClaimedJob
from dataplane.surfaces.sources import SurfaceSources
from telemetry.failures import AttemptFailure, storable

LOGGER: Final = "dataplane.worker.failures"  # the failed attempts' records, alone on it
log = logging.getLogger(LOGGER)

TRACEBACK_MAX_BYTES: Final = 16 * 1024
PART_MAX_BYTES: Final = 4 * 1024  # one frame, or the exception's lines, at most
MESSAGE_MAX_CHARS: Final = 4000  # as last_error keeps it (its str())
LINE_MESSAGE_MAX_CHARS: Final = 300  # of the message, on the log record's first line
# A frame's first line: '  File "<file>", line <n>, in <function>' (in an exception
# group, after its '|' margin); the first space of the indent takes the mark ('>').
_FRAME = re.compile(r'^(?P<lead>.*?)(?P<space>[ >]) File "(?P<file>.+)", line \d+, in .+$')


@dataclass(frozen=True, slots=True)
class Frame:
    """The innermost frame of the surface's code in a traceback."""

    path: str  # as the frame names it (absolute, usually)
    shown: str  # relative to where the import system finds it: pkg/handlers.py
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.shown}:{self.line} in {self.function}"


def qualified_type(exc: BaseException) -> str:
    """``KeyError``, ``pkg.errors.Boom``: the module named unless it is ``builtins``."""
    kind = type(exc)
    module = kind.__module__
    return (
        kind.__qualname__ if module in ("builtins", "__main__") else f"{module}.{kind.__qualname__}"
    )


def message_of(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # a broken __str__ must not lose the record
        text = "<the exception's str() failed>"
    text = text if len(text) <= MESSAGE_MAX_CHARS else text[:MESSAGE_MAX_CHARS] + "…"
    return storable(text)


def surface_frame(exc: BaseException, sources: SurfaceSources) -> Frame | None:
    """The innermost frame of the surface's code: where an exception group's first
    member that has one was raised (a nursery's child task), else in the exception's
    own traceback, else in what it was raised from (its cause or context)."""
    return _innermost(exc, sources, set())


def _innermost(exc: BaseException, sources: SurfaceSources, seen: set[int]) -> Frame | None:
    if id(exc) in seen:
        return None
    seen.add(id(exc))
    for member in getattr(exc, "exceptions", ()):
        found = _innermost(member, sources, seen)
        if found is not None:
            return found
    for summary in reversed(traceback.extract_tb(exc.__traceback__)):
        shown = sources.shown(summary.filename)
        if shown is not None:
            return Frame(summary.filename, shown, summary.lineno or 0, summary.name)
    for origin in (exc.__cause__, exc.__context__):
        found = None if origin is None else _innermost(origin, sources, seen)
        if found is not None:
            return found
    return None


def format_traceback(exc: BaseException, sources: SurfaceSources) -> str:
    """The bounded, marked traceback (see the module docstring)."""
    parts = [_cut(_marked(storable(part), sources)) for part in _parts(exc)]
    if sum(len(p.encode()) for p in parts) <= TRACEBACK_MAX_BYTES:
        return "".join(parts)
    kept: list[str] = []
    budget = TRACEBACK_MAX_BYTES - 100  # the note about the cut
    for part in reversed(parts):
        size = len(part.encode())
        if size > budget:
            break
        kept.append(part)
        budget -= size
    cut = parts[: len(parts) - len(kept)]
    frames = sum(1 for p in cut if _FRAME.match(p.partition("\n")[0]))
    note = (
        f"[{frames} outer frame(s) cut: the traceback is over "
        f"{TRACEBACK_MAX_BYTES // 1024} KiB, the innermost are kept]\n"
    )
    return note + "".join(reversed(kept))


def failure_of(
    exc: BaseException, job: ClaimedJob, sources: SurfaceSources, trace_id: str | None
) -> tuple[AttemptFailure, Frame | None]:
    """The attempt's record, and its surface frame (for the span's ``code.*``)."""
    frame = surface_frame(exc, sources)
    failure = AttemptFailure(
        attempt=job.dequeue_count,
        worker=job.worker_id,
        type=qualified_type(exc),
        message=message_of(exc),
        traceback=format_traceback(exc, sources),
        frame=None if frame is None else str(frame),
        trace_id=trace_id,
    )
    return failure, frame


def log_failure(
    job: ClaimedJob, surface: str, operation: str, exc: BaseException, failure: AttemptFailure
) -> None:
    """The attempt's one ERROR record (see the module docstring)."""
    where = f" at {failure.frame}" if failure.frame else ""
    first = failure.message.split("\n", 1)[0][:LINE_MESSAGE_MAX_CHARS]
    error = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    log.error(
        "job %s (%s.%s, attempt %d/%d) failed%s: %s",
        job.id,
        surface,
        operation,
        job.dequeue_count,
        job.max_dequeues,
        where,
        error,
        extra={
            "job_id": str(job.id),
            "queue_type": job.type,
            "surface": surface,
            "operation": operation,
            "attempt": job.dequeue_count,
            "max_dequeues": job.max_dequeues,
            "error_type": failure.type,
            "frame": failure.frame,
            "traceback": failure.traceback,
        },
    )


def span_attributes(failure: AttemptFailure, frame: Frame | None) -> dict[str, Any]:
    """The attributes the span's ``exception`` event adds to the SDK's (OpenTelemetry's
    exception and code conventions): the qualified type, the bounded, marked
    traceback, the surface's frame."""
    attrs: dict[str, Any] = {
        "exception.type": failure.type,
        "exception.message": failure.message,
        "exception.stacktrace": failure.traceback,
    }
    if frame is not None:
        attrs["code.file.path"] = frame.path
        attrs["code.line.number"] = frame.line
        attrs["code.function.name"] = frame.function
    return attrs


def _parts(exc: BaseException) -> Iterator[str]:
    """The traceback as the standard library formats it, a frame (or a header, or an
    exception's lines) a part; no local variables."""
    formatted = traceback.TracebackException.from_exception(exc, capture_locals=False)
    yield from formatted.format(chain=True)


def _marked(part: str, sources: SurfaceSources) -> str:
    """A frame of the surface's files with ``>`` in the first space of its indent."""
    first, newline, rest = part.partition("\n")
    found = _FRAME.match(first)
    if found is None or sources.shown(found["file"]) is None:
        return part
    start, end = found.span("space")
    return first[:start] + ">" + first[end:] + newline + rest


def _cut(part: str) -> str:
    """One part at most :data:`PART_MAX_BYTES` (a huge message, a long source line)."""
    data = part.encode()
    if len(data) <= PART_MAX_BYTES:
        return part
    return data[:PART_MAX_BYTES].decode(errors="ignore") + f" …[{len(data)} bytes, cut]\n"
