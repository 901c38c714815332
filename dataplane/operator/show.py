"""What ``dataplane jobs show ID`` prints: the job, then each of its attempts with its
outcome, worker, start and duration (when its report came), its error and its
traceback, indented (``--json`` prints the same as one document instead:
:mod:`dataplane.operator.commands`)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from dataplane.operator.attempts import AttemptView
from dataplane.queue import JobRow

INDENT = "    "  # a traceback's lines, under its attempt


def show_lines(job: JobRow, attempts: Sequence[AttemptView]) -> list[str]:
    """The job and its attempts, oldest first, as lines for a terminal."""
    payload = job.payload if isinstance(job.payload, dict) else {}
    found = payload.get("auth")
    auth = found if isinstance(found, dict) else {}
    lines = [
        f"job {job.id}  {job.type}  {job.status}  try {job.dequeue_count} of {job.max_dequeues}",
        f"  operation   {payload.get('operation', '?')} (v{payload.get('version', '?')}),"
        f" client {auth.get('client', '?')}",
        f"  created     {job.created_at}",
    ]
    if job.completed_at is not None:
        lines.append(f"  completed   {job.completed_at}")
    if job.cancellation is not None:  # who cancelled it, before or while it ran, and when
        lines.append(f"  cancelled   {job.cancellation.says()}")
    if job.last_error:
        lines.append(f"  last error  {job.last_error.splitlines()[-1]}")
    lines.append("")
    if not attempts:
        lines.append("no attempt yet")
    for attempt in attempts:
        lines += [*attempt_lines(attempt), ""]
    return lines[:-1] if attempts else lines


def attempt_lines(attempt: AttemptView) -> list[str]:
    head = f"attempt {attempt.attempt}  {attempt.outcome}"
    if attempt.worker:
        head += f"  worker {attempt.worker}"
    if attempt.report is not None:
        head += f"  started {attempt.started}  {attempt.duration_ms:.1f} ms"
    elif attempt.outcome == "running":
        head += "  (running)"
    elif attempt.error is not None:
        head += "  (no report of this attempt)"
    else:
        head += "  (no report of this attempt: its worker may have died, or capcom lost it)"
    lines = [head]
    error = attempt.error
    if error is not None:
        lines.append(f"  {error.type}: {error.message}")
        where = [f"at {error.frame}"] if error.frame else []
        if error.at is not None:
            where.append(f"failed {error.at}")
        if error.trace_id:
            where.append(f"trace {error.trace_id}")
        if where:
            lines.append("  " + "  ".join(where))
        lines += textwrap.indent(error.traceback.rstrip("\n"), INDENT).splitlines()
    return lines
