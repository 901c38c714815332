"""Where a worker's finished-job reports go.

A :class:`Reporter` takes one :class:`~telemetry.report.JobReport`
per finished claim and must never block or raise (the capcom sender,
:class:`~dataplane.worker.sender.CapcomSender`, queues it with ``send_nowait``).
With no reporter, no report is built at all (its RSS is a ``/proc`` read).
"""

from __future__ import annotations

import os
import resource
from typing import Protocol

from opentelemetry.context import Context

from telemetry.report import JobReport


class Reporter(Protocol):
    """Where finished-job reports go; ``report`` must never block or raise.

    ``parent`` is the attempt's ``process`` span (when traced): a reporter that
    sends the report on puts that send in the job's trace.
    """

    def report(self, job: JobReport, *, parent: Context | None = None) -> None: ...


def rss_bytes() -> int:
    """Resident set size now (Linux /proc; falls back to the peak)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
