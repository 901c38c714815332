"""From a latency alert to a trace (issue 43, item 5), on real processes: a BFF and a
worker exporting their spans to a real OTLP receiver, and a ``dataplane console`` on
the same queue DB. Jobs of differing durations run through the plane; the alerts'
``trace_url`` (``/jobs/slowest?since=1h``) answers 303 to the slowest one's page, and
that page links the trace the receiver holds the job's spans under."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio

from dataplane.dev.embedded import free_port
from tests.conftest import wait_until
from tests.console import TRACE_URL, console_env, console_process, viewer_token
from tests.helpers import BffProcess, WorkerProcess, bearer, read_sse, token
from tests.otlp import Received, attrs, otlp

__all__ = ["otlp"]  # the fixture, imported to be found

OTEL = {"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_METRIC_EXPORT_INTERVAL": "500"}
SLEEPS_MS = (150, 1200, 400)  # one job each, run one after another: the second is slowest


@pytest.fixture
async def plane(
    otlp: tuple[str, Received], bff_env: dict[str, str], queue_dsn: str, tmp_path: Path
) -> AsyncIterator[tuple[BffProcess, BffProcess, Received]]:
    """(BFF, console, what the receiver got): all three processes ready."""
    endpoint, received = otlp
    env = {**bff_env, **OTEL, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
    bff = BffProcess(env, str(tmp_path / "bff.log"), port=free_port(), args=("-k", "trio"))
    worker = WorkerProcess(
        {**env, "SURFACE_QUEUE_TYPE": "surface-probe"}, str(tmp_path / "worker.log")
    )
    console = console_process(console_env(queue_dsn), tmp_path / "console.log")
    try:
        await bff.wait_ready()
        await worker.wait_ready()
        await console.wait_ready()
        yield bff, console, received
    finally:
        for proc in (bff, console):  # killed: the receiver is gone by now (test_tracing)
            proc.kill()
            proc.stop()
        worker.stop()


async def _run(http: httpx.AsyncClient, ms: int) -> str:
    """A ``probe.sleep`` job of ``ms`` posted and streamed to its answer; its id."""
    body = (
        await http.post(
            "/api/probe/q",
            json={"operation": "sleep", "params": {"ms": ms}},
            headers=bearer(token(staff=True)),
        )
    ).json()
    with trio.fail_after(30):
        _, _, events = await read_sse(http, body["streamUrl"])
    assert events[-1].name == "done", events
    return str(body["jobId"])


async def test_the_alert_link_reaches_the_slowest_job_s_trace(
    plane: tuple[BffProcess, BffProcess, Received],
) -> None:
    bff, console, received = plane
    async with httpx.AsyncClient(base_url=bff.base, timeout=30) as http:
        jobs = [await _run(http, ms) for ms in SLEEPS_MS]
    slowest = jobs[SLEEPS_MS.index(max(SLEEPS_MS))]
    headers = {**bearer(viewer_token()), "Accept": "text/html"}
    async with httpx.AsyncClient(base_url=console.base, headers=headers, timeout=10) as ui:
        resp = await ui.get("/jobs/slowest", params={"since": "1h"})
        assert resp.status_code == 303, resp.text
        assert resp.headers["Location"] == f"/jobs/{slowest}"
        typed = await ui.get("/jobs/slowest", params={"since": "1h", "type": "surface-probe"})
        assert typed.headers["Location"] == f"/jobs/{slowest}"
        none = await ui.get("/jobs/slowest", params={"type": "surface-other"})
        assert none.status_code == 404 and "no job of type surface-other" in none.text
        page = await ui.get(resp.headers["Location"])
    assert page.status_code == 200
    link = re.search(r'data-testid="trace" href="([^"]+)"', page.text)
    assert link is not None, page.text
    trace_id = link.group(1).removeprefix(TRACE_URL.removesuffix("{trace_id}"))

    def processed(job: str) -> list[str]:
        return [
            s.trace_id.hex()
            for _, s in received.named("process surface-probe")
            if attrs(s)["messaging.message.id"] == job
        ]

    await wait_until(lambda: all(processed(job) for job in jobs), within=20)
    assert processed(slowest) == [trace_id]  # the link is the trace the job ran in
    assert len({processed(job)[0] for job in jobs}) == len(jobs)  # each job its own trace
