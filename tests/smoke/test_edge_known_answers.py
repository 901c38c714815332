"""A stream or a poll that comes after its job's answer went by in the done notify is
answered from the reply pump, without reading the row (real BFF in this process, real
Postgres, real notifies; the queue DB closed to PUBLIC, so answers ride in them).

Only for a caller with the job's URL token: a bearer JWT's request reads the row, which
matches the owner; a poison park (the notify names the job alone) reads the row too.
The answer is the one the row gives. ``dataplane.end_to_end`` is recorded in seconds,
by queue type and outcome, however the answer is handed over (stream or ``Prefer``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import psycopg
import pytest
import trio
from opentelemetry import metrics as otel_metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader

from dataplane.bff.plane import BffServices
from dataplane.queue import QueueClient, done_channel
from telemetry import metrics
from tests.acceptance.test_bff_faults import plane_of
from tests.conftest import wait_until
from tests.helpers import bearer, complete, read_sse, token
from tests.real_plane import start_bff

STAFF = token(staff=True, sub="boss")
TYPE = "surface-probe"


class Bff:
    def __init__(self, http: httpx.AsyncClient, plane: BffServices) -> None:
        self.http = http
        self.plane = plane


@pytest.fixture
def reader(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemoryMetricReader]:
    """The BFF's metrics, recorded in memory (its instruments made anew)."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    monkeypatch.setattr(otel_metrics, "get_meter", provider.get_meter)
    metrics.instruments.cache_clear()
    yield reader
    metrics.instruments.cache_clear()
    provider.shutdown()


@pytest.fixture
async def bff(
    bff_env: dict[str, str],
    nursery: trio.Nursery,
    queue: QueueClient,
    reader: InMemoryMetricReader,
) -> AsyncIterator[Bff]:
    base, app, shutdown = await start_bff(nursery)
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        yield Bff(http, plane_of(app))
    shutdown.set()


@pytest.fixture
def row_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The job ids the BFF reads an owned row of (the real read still runs)."""
    reads: list[str] = []
    read = QueueClient.get_owned

    async def counted(self: QueueClient, job_id: Any, **kwargs: Any) -> Any:
        reads.append(str(job_id))
        return await read(self, job_id, **kwargs)

    monkeypatch.setattr(QueueClient, "get_owned", counted)
    return reads


async def finished_and_heard(
    bff: Bff, queue: QueueClient, value: str, *, fail: bool = False
) -> Any:
    """POST a probe echo (202), finish its job as a worker would (completed with a small
    answer, or failed for good), and wait until the BFF's pump heard the notify."""
    heard = bff.plane.pump.statistics().notifies
    resp = await bff.http.post(
        "/api/probe/q",
        json={"operation": "echo", "params": {"value": value}},
        headers=bearer(STAFF),
    )
    assert resp.status_code == 202, resp.text
    body = resp.json()
    [job] = await queue.claim(TYPE, "test-worker")
    assert str(job.id) == body["jobId"]
    if fail:  # every attempt fails: parked as poison at the cutoff (its notify: the id)
        while await queue.fail(job, "boom", backoff_seconds=0) != "poison":
            [job] = await queue.claim(TYPE, "test-worker")
    else:
        await complete(queue, job, {"data": {"echo": value}})
    await wait_until(lambda: bff.plane.pump.statistics().notifies > heard, within=10)
    return body


async def test_a_stream_and_a_poll_after_the_answer_went_by_read_no_row(
    bff: Bff, queue: QueueClient, row_reads: list[str]
) -> None:
    body = await finished_and_heard(bff, queue, "went by")
    assert bff.plane.pump.answered(uuid.UUID(body["jobId"])) is not None
    status, _, events = await read_sse(bff.http, body["streamUrl"])
    assert status == 200 and [e.name for e in events] == ["done"]
    streamed = events[0].json
    poll = await bff.http.get(body["pollUrl"])
    assert poll.status_code == 200
    assert row_reads == []  # neither read the row
    # The answer is the row's: the same poll by bearer JWT reads it, and agrees.
    by_jwt = await bff.http.get(f"/api/probe/q/{body['jobId']}", headers=bearer(STAFF))
    assert by_jwt.status_code == 200 and row_reads == [body["jobId"]]
    assert streamed == poll.json() == by_jwt.json()
    assert streamed["result"] == {"echo": "went by"} and streamed["timings"]


async def test_a_token_for_another_surface_or_an_unheard_job_reads_as_before(
    bff: Bff, queue: QueueClient, row_reads: list[str]
) -> None:
    body = await finished_and_heard(bff, queue, "checked")
    elsewhere = body["pollUrl"].replace("/api/probe/", "/api/users/")
    assert (await bff.http.get(elsewhere)).status_code == 404  # the token names probe
    failed = await finished_and_heard(bff, queue, "parked", fail=True)
    status, _, events = await read_sse(bff.http, failed["streamUrl"])
    assert status == 200 and [e.name for e in events] == ["error"]
    assert events[0].json["code"] == "POISON"
    assert row_reads == [failed["jobId"]]  # the poison notify carried no answer: read


def _end_to_end(reader: InMemoryMetricReader) -> list[HistogramDataPoint]:
    data = reader.get_metrics_data()
    assert data is not None
    return [
        point
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "dataplane.end_to_end"
        for point in m.data.data_points  # type: ignore[union-attr]
    ]


async def test_end_to_end_is_seconds_by_queue_type_and_outcome_either_way(
    bff: Bff, queue: QueueClient, reader: InMemoryMetricReader
) -> None:
    t0 = time.monotonic()
    body = await finished_and_heard(bff, queue, "streamed")
    status, _, _ = await read_sse(bff.http, body["streamUrl"])
    assert status == 200

    async def finish_when_waited() -> None:
        await wait_until(lambda: bff.plane.pump.statistics().waiters == 1, within=10)
        [job] = await queue.claim(TYPE, "test-worker")
        await complete(queue, job, {"data": 1})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(finish_when_waited)
        resp = await bff.http.post(
            "/api/probe/q",
            json={"operation": "echo", "params": {"value": "preferred"}},
            headers={**bearer(STAFF), "Prefer": "wait=10"},
        )
    elapsed = time.monotonic() - t0
    assert resp.status_code == 200, resp.text
    [point] = _end_to_end(reader)  # one series: both answers, the same attributes
    assert dict(point.attributes or {}) == {
        "messaging.destination.name": TYPE,
        "dataplane.outcome": "done",
    }
    assert point.count == 2
    assert 0 < point.sum <= elapsed  # seconds (milliseconds would exceed the wall time)


async def test_a_note_re_sent_after_its_row_was_deleted_is_not_served(
    bff: Bff, queue: QueueClient, queue_dsn: str
) -> None:
    """Anyone who may connect hears a sealed done note and may send it again: after the
    row's deletion (the token poll says 404), the same note re-sent must not revive the
    answer from the pump's memory."""
    channel = done_channel(TYPE)
    with psycopg.connect(queue_dsn, autocommit=True) as spy:
        spy.execute(f'LISTEN "{channel}"')
        body = await finished_and_heard(bff, queue, "kept")
        captured = next(spy.notifies(timeout=5))
        assert captured.payload.startswith(body["jobId"] + " ")  # it carries the answer
        assert (await bff.http.get(body["pollUrl"])).status_code == 200
        spy.execute("DELETE FROM maestro_queues WHERE id = %s", (body["jobId"],))
        await wait_until(lambda: _poll_status(bff, body["pollUrl"], 404), within=10)
        heard = bff.plane.pump.statistics().notifies
        spy.execute("SELECT pg_notify(%s, %s)", (channel, captured.payload))
        await wait_until(lambda: bff.plane.pump.statistics().notifies > heard, within=10)
    assert (await bff.http.get(body["pollUrl"])).status_code == 404
    status, _, events = await read_sse(bff.http, body["streamUrl"])
    assert not (status == 200 and [e.name for e in events] == ["done"])


async def _poll_status(bff: Bff, url: str, status: int) -> bool:
    return (await bff.http.get(url)).status_code == status
