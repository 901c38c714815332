"""``POST /q`` with ``Prefer: wait=N`` (RFC 7240): the answer in one round trip.

A real BFF (Hypercorn serving the app in this process, so the reply pump's
statistics can be read) and real ``dataplane worker`` processes.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from dataplane.bff.config import MAX_PREFER_WAIT_SECONDS
from dataplane.bff.plane import BffServices
from dataplane.dev.embedded import free_port
from dataplane.queue import QueueClient
from tests.acceptance.test_bff_faults import plane_of
from tests.helpers import BffProcess, bearer, read_sse, token
from tests.real_plane import start_bff

STAFF = token(staff=True, sub="boss")
QUEUED_KEYS = {"jobId", "streamUrl", "pollUrl", "coalesced"}


async def post(
    http: httpx.AsyncClient, operation: str, params: Any, *prefer: str
) -> httpx.Response:
    """POST a probe query; each of ``prefer`` is sent as a Prefer field of its own."""
    headers = [*bearer(STAFF).items(), *(("Prefer", value) for value in prefer)]
    return await http.post(
        "/api/probe/q", json={"operation": operation, "params": params}, headers=headers
    )


class Bff:
    def __init__(self, http: httpx.AsyncClient, plane: BffServices) -> None:
        self.http = http
        self.plane = plane


@pytest.fixture
async def bff(bff_env: dict[str, str], nursery: trio.Nursery) -> AsyncIterator[Bff]:
    base, app, shutdown = await start_bff(nursery)
    async with httpx.AsyncClient(base_url=base, timeout=120) as http:
        yield Bff(http, plane_of(app))
    shutdown.set()


def applied(resp: httpx.Response) -> str | None:
    return resp.headers.get("Preference-Applied")


def varies_on_prefer(resp: httpx.Response) -> bool:
    return "prefer" in {v.strip().lower() for v in resp.headers.get("Vary", "").split(",")}


async def test_a_slow_answer_is_202_after_the_wait_then_streams(
    bff: Bff, spawn_worker: Callable[..., Any]
) -> None:
    await spawn_worker()
    started = trio.current_time()
    resp = await post(bff.http, "sleep", {"ms": 3000}, "respond-async, wait=1")
    waited = trio.current_time() - started
    assert resp.status_code == 202, resp.text
    body = resp.json()
    assert set(body) == QUEUED_KEYS and resp.headers["Location"] == body["pollUrl"]
    assert applied(resp) == "respond-async, wait=1" and varies_on_prefer(resp)
    assert waited >= 0.9  # it did wait (the job needs 3 s)
    assert bff.plane.pump.statistics().waiters == 0  # the POST's waiter went with it
    _, _, events = await read_sse(bff.http, body["streamUrl"])
    assert events[-1].name == "done" and events[-1].json["result"] == {"slept_ms": 3000}


def test_the_default_cap_is_a_few_seconds() -> None:
    assert 1 <= MAX_PREFER_WAIT_SECONDS <= 10


@pytest.mark.parametrize(
    "prefer",
    [
        "wait=abc",
        "wait=-1",
        "wait=",
        "wait",
        "wait=1.5",
        'wait="soon"',
        "wait=0",  # valid, but nothing to wait for
        "wait=abc, wait=3",  # only the first instance of a preference counts
        ",;=\"',,",
        "return=minimal",
    ],
)
async def test_a_wait_that_cannot_be_honoured_is_ignored(bff: Bff, prefer: str) -> None:
    # No worker: a wait that was applied would hold the POST for its full length.
    with trio.fail_after(MAX_PREFER_WAIT_SECONDS - 0.5):
        resp = await post(bff.http, "echo", {"value": prefer}, prefer)
    assert resp.status_code == 202, resp.text
    assert set(resp.json()) == QUEUED_KEYS
    assert applied(resp) is None and varies_on_prefer(resp)


async def test_coalesced_posts_wait_on_the_same_job(
    bff: Bff, spawn_worker: Callable[..., Any], queue: QueueClient
) -> None:
    await spawn_worker()
    n = 8
    answers: list[httpx.Response] = []

    async def one() -> None:
        answers.append(await post(bff.http, "sleep", {"ms": 1500}, "wait=5"))

    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(one)
    assert [r.status_code for r in answers] == [200] * n, [r.text for r in answers]
    bodies = [r.json() for r in answers]
    assert len({b["jobId"] for b in bodies}) == 1
    assert all(b["result"] == {"slept_ms": 1500} for b in bodies)
    assert sorted(b["coalesced"] for b in bodies) == [False] + [True] * (n - 1)
    rows = await queue.list_jobs()
    assert len(rows) == 1 and rows[0].dequeue_count == 1  # one execution
    assert bff.plane.pump.statistics().waiters == 0


async def test_sigterm_answers_a_waiting_post_202_with_its_urls(
    bff_env: dict[str, str], tmp_path: Path
) -> None:
    """A POST waiting (``Prefer: wait=30``, no worker) when a real ``dataplane bff`` gets
    SIGTERM with a 3 s grace: it used to be cut at the grace's end with no response
    although its job was enqueued; now it answers 202 with its URLs at once."""
    env = {
        **bff_env,
        "DATAPLANE_SHUTDOWN_GRACE_SECONDS": "3",
        "DATAPLANE_MAX_PREFER_WAIT_SECONDS": "30",
    }
    log = str(tmp_path / "bff.log")
    proc = BffProcess(env, log, port=free_port(), command=("-m", "dataplane", "bff"))
    got: list[httpx.Response] = []
    answered = trio.Event()
    try:
        await proc.wait_ready()
        async with httpx.AsyncClient(base_url=proc.base, timeout=30) as http:

            async def ask() -> None:
                got.append(await post(http, "sleep", {"ms": 1}, "wait=30"))
                answered.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(ask)
                await trio.sleep(1.0)  # the POST is enqueued and waits on the pump
                assert not got, proc.output()[-3000:]
                proc.proc.send_signal(signal.SIGTERM)
                with trio.fail_after(2.5):  # well before the grace ends
                    await answered.wait()
        (resp,) = got
        assert resp.status_code == 202, resp.text
        assert QUEUED_KEYS <= set(resp.json()) and resp.headers["Location"]
        assert proc.proc.wait(20) == 0, proc.output()
    finally:
        proc.stop()
