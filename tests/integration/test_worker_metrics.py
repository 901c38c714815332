"""The worker's metrics as the SDK records them (an in-memory reader): the ready wait
beside the wait since enqueue, error.type on a failed attempt, a lost lease and a
fenced completion each counted once, a lapsed last claim counted and logged where it is
parked."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from dataplane.db import Database
from dataplane.maintenance.leader import LEADER_TERM
from dataplane.maintenance.retention import ReapResult
from dataplane.maintenance.schedule import Maintenance
from dataplane.queue import QueueClient
from dataplane.worker.claims.liveness import Liveness
from telemetry import metrics
from tests.conftest import wait_until
from tests.helpers import liveness_lapsed, submit
from tests.integration.test_worker import running_worker, wait_done


class Recorded:
    def __init__(self, reader: Any) -> None:
        self.reader = reader

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        return [
            point
            for rm in (data.resource_metrics if data else [])
            for sm in rm.scope_metrics
            for metric in sm.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]

    def value(self, name: str, **attributes: str) -> float:
        """The sum over the points of ``name`` whose attributes include ``attributes``."""
        wanted = {key.replace("__", "."): v for key, v in attributes.items()}
        return sum(
            getattr(p, "value", getattr(p, "count", 0))
            for p in self.points(name)
            if wanted.items() <= dict(p.attributes).items()
        )


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorded]:
    """The process's instruments on a meter provider with an in-memory reader."""
    from opentelemetry import metrics as otel_metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    monkeypatch.setattr(otel_metrics, "get_meter", provider.get_meter)
    metrics.instruments.cache_clear()
    try:
        yield Recorded(reader)
    finally:
        metrics.instruments.cache_clear()
        provider.shutdown()


async def test_queue_wait_is_from_ready_and_a_failed_attempt_has_its_error_type(
    queue: QueueClient, recorded: Recorded
) -> None:
    backoff = 0.5
    async with running_worker(queue, fail_backoff_seconds=backoff, idle_ms=100) as (_, _r):
        enq = await submit(queue, "probe", "fail", {"times": 1})
        row = await wait_done(queue, enq.job_id)
    assert row.status == "done" and row.dequeue_count == 2
    (ready,) = recorded.points("dataplane.queue.wait")
    (since_enqueue,) = recorded.points("dataplane.queue.wait_since_enqueue")
    assert ready.count == since_enqueue.count == 2
    assert since_enqueue.max >= backoff  # attempt 2: the back-off included
    assert ready.max < backoff  # ... but not in the wait a worker could shorten
    failed, done = sorted(
        recorded.points("messaging.process.duration"), key=lambda p: "error.type" in p.attributes
    )[::-1]
    assert failed.attributes["error.type"] == "ProbeFailure"
    assert {k: failed.attributes[k] for k in ("messaging.system", "messaging.operation.name")} == {
        "messaging.system": "postgresql",
        "messaging.operation.name": "process",
    }
    assert failed.attributes["messaging.destination.name"] == "surface-probe"
    assert "error.type" not in done.attributes and failed.count == done.count == 1
    assert recorded.value("dataplane.jobs", dataplane__outcome="failed") == 1
    assert recorded.value("dataplane.jobs", dataplane__outcome="done") == 1


async def test_a_lost_lease_and_a_fenced_completion_are_each_counted(
    queue: QueueClient, db: Database, recorded: Recorded
) -> None:
    usurp = "UPDATE maestro_queues SET locked_by = 'usurper', dequeue_count = 2 WHERE id = %(id)s"

    async def in_progress(job_id: Any) -> bool:
        row = await queue.get(job_id)
        return row is not None and row.status == "in_progress"

    # The renewal finds the claim gone: the execution is cancelled.
    async with running_worker(queue, lease_seconds=30, renew_seconds=0.2) as (worker, _r):
        enq = await submit(queue, "probe", "sleep", {"ms": 5000})
        await wait_until(lambda: in_progress(enq.job_id), within=5)
        await db.execute(usurp, {"id": enq.job_id})
        await wait_until(lambda: worker.statistics().lost == 1, within=5)
    assert recorded.value("dataplane.lease.lost") == 1
    assert recorded.value("dataplane.completion.fenced") == 0
    lost = {"dataplane__outcome": "lost", "dataplane__operation": "sleep"}
    assert recorded.value("dataplane.jobs", **lost) == 1

    # The completion is refused by the fence (no renewal came in between).
    async with running_worker(queue, lease_seconds=30, renew_seconds=20) as (worker, _r):
        enq = await submit(queue, "probe", "sleep", {"ms": 400})
        await wait_until(lambda: in_progress(enq.job_id), within=5)
        await db.execute(usurp, {"id": enq.job_id})
        await wait_until(lambda: worker.statistics().lost == 1, within=5)
    assert recorded.value("dataplane.completion.fenced", dataplane__write="complete") == 1
    assert recorded.value("dataplane.lease.lost") == 1
    assert recorded.value("dataplane.jobs", **lost) == 2
    lease_lost = recorded.value("messaging.process.duration", error__type="LeaseLost")
    assert lease_lost == 2


async def test_a_lapsed_last_claim_is_counted_and_logged_by_the_claim_or_maintenance(
    queue: QueueClient, db: Database, recorded: Recorded, caplog: pytest.LogCaptureFixture
) -> None:
    """A dead worker's last attempt: the next claim of its type parks it (counted once,
    lease_lapsed, one WARNING line), else a maintenance pass does, the same way."""

    async def lapsed(job_id: Any) -> bool:
        row = await db.fetchone(
            "SELECT lease_expires_at <= now() AS lapsed FROM maestro_queues WHERE id = %(id)s",
            {"id": job_id},
        )
        return bool(row and row["lapsed"])

    caplog.set_level(logging.WARNING)
    lease_lapsed = {
        "messaging__destination__name": "surface-probe",
        "dataplane__reason": "lease_lapsed",
    }
    at_claim = await submit(queue, "probe", "echo", {"value": 1}, max_dequeues=1)
    (dead,) = await queue.claim("surface-probe", "dies", lease_seconds=0.05)
    await wait_until(lambda: lapsed(dead.id), within=5)
    async with running_worker(queue, maintenance_seconds=3600) as (worker, _r):
        await wait_until(lambda: worker.statistics().poisoned_at_claim == 1, within=5)
        stats = worker.statistics()
    assert (stats.claimed, stats.poisoned) == (0, 0)
    assert recorded.value("dataplane.poison", **lease_lapsed) == 1
    assert recorded.value("dataplane.poison", dataplane__reason="failed") == 0
    (line,) = [r for r in caplog.records if str(at_claim.job_id) in r.getMessage()]
    assert line.levelno == logging.WARNING and line.name == "dataplane.worker.claims.claimer"
    assert line.getMessage() == (
        f"job {at_claim.job_id} (surface-probe, attempt 1/1): poisoned, the lease of its "
        "last attempt lapsed (reason lease_lapsed, found by a claim of w-test)"
    )

    by_pass = await submit(queue, "probe", "echo", {"value": 2}, max_dequeues=1)
    (dead,) = await queue.claim("surface-probe", "dies", lease_seconds=0.05)
    await wait_until(lambda: lapsed(dead.id), within=5)
    # The stopped worker led the fleet's maintenance; its step-down is best effort, so
    # the pass may wait for its term to lapse.
    passes: list[ReapResult | None] = []

    async def elected() -> bool:
        passes.append(await Maintenance(db).run_once())
        return passes[-1] is not None and passes[-1].elected

    await wait_until(elected, within=LEADER_TERM + 5, interval=0.5)
    result = passes[-1]
    assert result is not None and result.poisoned == 1
    assert [p.id for p in result.poisoned_jobs] == [by_pass.job_id]
    assert recorded.value("dataplane.poison", **lease_lapsed) == 2
    (line,) = [r for r in caplog.records if str(by_pass.job_id) in r.getMessage()]
    assert line.levelno == logging.WARNING and line.name == "dataplane.maintenance.schedule"
    assert line.getMessage().endswith("(reason lease_lapsed, found by maintenance)")
    row = await queue.get(by_pass.job_id)
    assert row is not None and row.status == "poison"


async def test_a_rescue_is_counted_by_the_type_of_the_claims_rescued(
    queue: QueueClient, db: Database, recorded: Recorded
) -> None:
    dead = Liveness(db, "dead", "surface-probe", opens=None, beat=0.05, lapse=0.3)
    await dead.beat_once()
    for n in range(2):
        await submit(queue, "probe", "sleep", {"ms": n})
    assert len(await queue.claim("surface-probe", "dead", limit=2)) == 2
    await wait_until(lambda: liveness_lapsed(db, "dead"), within=5)
    live = Liveness(db, "live", "surface-users", opens=None, beat=0.05, lapse=30)
    await live.beat_once()
    rescued = {"messaging__destination__name": "surface-probe"}
    assert recorded.value("dataplane.jobs.rescued", **rescued) == 2
