"""Jobs parked as poison with no worker left to say so.

A job whose last attempt's worker died (its lease lapsed with the dequeue budget
spent) is parked by whoever finds it: the next claim of its type (``job_claim``)
or a maintenance pass (``reap_lapsed_at_cutoff``). Both statements return the
rows they parked (:class:`~dataplane.queue.records.Poisoned`), and
:func:`report_lapsed` tells of each as the failing last attempt would have: a
``poison <type>`` span in the request's trace, ``dataplane.poison`` counted with
``dataplane.reason`` ``lease_lapsed``, and a WARNING line naming the job, its type,
its attempts and the reason, logged inside that span (so it carries the request's
trace id). It does not block.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from dataplane.queue.records import Poisoned
from telemetry.metrics import QUEUE_TYPE, REASON, instruments
from telemetry.tracing import poison_span

LEASE_LAPSED = "lease_lapsed"  # dataplane.reason: its last attempt's lease lapsed
CAUSE = "LEASE_LAPSED"  # error.type of the POISON event (the fail path's: the exception's)


def report_lapsed(jobs: Iterable[Poisoned], log: logging.Logger, *, found_by: str) -> None:
    """Trace, count and log each job parked as poison because its lease lapsed;
    ``found_by`` says who parked it ("a claim", "maintenance") in the log line."""
    poison = instruments().poison
    for job in jobs:
        with poison_span(
            job.type,
            str(job.id),
            job.traceparent,
            attempt=job.dequeue_count,
            max_dequeues=job.max_dequeues,
            reason=LEASE_LAPSED,
            cause=CAUSE,
        ):
            log.warning(
                "job %s (%s, attempt %d/%d): poisoned, the lease of its last attempt lapsed "
                "(reason %s, found by %s)",
                job.id,
                job.type,
                job.dequeue_count,
                job.max_dequeues,
                LEASE_LAPSED,
                found_by,
            )
        poison.add(1, {QUEUE_TYPE: job.type, REASON: LEASE_LAPSED})
