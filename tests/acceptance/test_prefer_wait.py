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
from tests.acceptance.conftest import start_bff
from tests.acceptance.test_bff_faults import plane_of
from tests.conftest import wait_until
from tests.helpers import BffProcess, bearer, read_sse, token

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


async def test_a_fast_answer_is_200_with_the_done_body(
    bff: Bff, spawn_worker: Callable[..., Any]
) -> None:
    await spawn_worker()
    resp = await post(bff.http, "echo", {"value": {"hello": "wörld"}}, "wait=4")
    assert resp.status_code == 200, resp.text
    assert applied(resp) == "wait=4" and varies_on_prefer(resp)
    answer = resp.json()
    assert answer["status"] == "done" and answer["jobId"]
    assert answer["result"] == {"echo": {"hello": "wörld"}, "client": "acme"}
    assert answer["cache"] == "bypass" and answer["coalesced"] is False
    # The body is the poll's answer (the stream's done event's data), named by Content-Location.
    poll = await bff.http.get(resp.headers["Content-Location"])
    assert poll.status_code == 200 and poll.json() == answer
    assert f"/q/{answer['jobId']}" in resp.headers["Content-Location"]
    assert bff.plane.pump.statistics().waiters == 0
    # Without Prefer nothing changes: 202, no Preference-Applied (the answer still varies).
    plain = await post(bff.http, "echo", {"value": "plain"})
    assert plain.status_code == 202 and set(plain.json()) == QUEUED_KEYS
    assert applied(plain) is None and varies_on_prefer(plain)


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


async def test_the_wait_is_capped_by_the_server(
    bff_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    nursery: trio.Nursery,
    spawn_worker: Callable[..., Any],
) -> None:
    monkeypatch.setenv("DATAPLANE_MAX_PREFER_WAIT_SECONDS", "1")
    base, _app, shutdown = await start_bff(nursery)
    await spawn_worker()
    async with httpx.AsyncClient(base_url=base, timeout=120) as http:
        started = trio.current_time()
        resp = await post(http, "sleep", {"ms": 6000}, "wait=1000")
        waited = trio.current_time() - started
        assert resp.status_code == 202, resp.text
        assert applied(resp) == "wait=1"  # what was applied: the cap
        assert 0.9 <= waited < 4.0, waited  # near the 1 s cap, far from 1000 s (or the job's 6)
    shutdown.set()


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


async def test_preferences_parse_per_rfc_7240(bff: Bff, spawn_worker: Callable[..., Any]) -> None:
    """Several fields, case-insensitive names, parameters, quoted values, first one wins."""
    await spawn_worker()
    cases = [
        ("foo=bar", "WAIT=3"),  # two Prefer fields
        ('handling=lenient, Wait = "3" ; p=1',),
        ('x="a, wait=0", wait=3, wait=0',),  # a comma inside quotes does not split
    ]
    for i, fields in enumerate(cases):
        resp = await post(bff.http, "echo", {"value": i}, *fields)
        assert resp.status_code == 200, (fields, resp.text)
        assert applied(resp) == "wait=3" and resp.json()["result"]["echo"] == i
    only_async = await post(bff.http, "echo", {"value": "async"}, "respond-async")
    assert only_async.status_code == 202 and applied(only_async) == "respond-async"


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


async def test_expected_errors_and_poison_answer_200_with_the_error(
    bff_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    nursery: trio.Nursery,
    spawn_worker: Callable[..., Any],
) -> None:
    monkeypatch.setenv("DATAPLANE_MAX_DEQUEUES", "1")  # the first failure parks the job
    base, _app, shutdown = await start_bff(nursery)
    await spawn_worker()
    async with httpx.AsyncClient(base_url=base, timeout=120) as http:
        rejected = await post(http, "reject", {"status": 403, "message": "not yours"}, "wait=5")
        assert rejected.status_code == 200, rejected.text
        body = rejected.json()
        assert body["status"] == "done" and body["error"]["status"] == 403
        assert body["error"]["message"] == "not yours" and "result" not in body
        assert (await http.get(rejected.headers["Content-Location"])).json() == body

        parked = await post(http, "fail", {"times": 5}, "wait=5")
        assert parked.status_code == 200, parked.text
        body = parked.json()
        assert body["status"] == "poison" and body["error"]["code"] == "POISON"
        assert body["error"]["status"] == 500 and "ProbeFailure" in body["error"]["message"]
        assert (await http.get(parked.headers["Content-Location"])).json() == body
    shutdown.set()


async def test_a_client_that_goes_away_drops_only_its_waiter(
    bff_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    nursery: trio.Nursery,
    queue: QueueClient,
) -> None:
    monkeypatch.setenv("DATAPLANE_MAX_PREFER_WAIT_SECONDS", "120")  # not what ends the wait
    base, app, shutdown = await start_bff(nursery)
    pump = plane_of(app).pump
    async with httpx.AsyncClient(base_url=base, timeout=180) as http:
        # No worker: the job stays pending. A stream waits on it too, and stays.
        queued = (await post(http, "echo", {"value": "stayer"})).json()
        async with trio.open_nursery() as streams:
            streams.start_soon(read_sse, http, queued["streamUrl"])
            await wait_until(lambda: pump.statistics().waiters == 1, within=10)
            with trio.CancelScope() as leaving:

                async def leave_once_waiting() -> None:
                    await wait_until(lambda: pump.statistics().waiters == 2, within=10)
                    leaving.cancel()  # the client gives up: its connection closes

                streams.start_soon(leave_once_waiting)
                await post(http, "echo", {"value": "stayer"}, "wait=120")
            assert leaving.cancelled_caught
            await wait_until(lambda: pump.statistics().waiters == 1, within=10)
            stats = pump.statistics()
            assert (stats.waiters, stats.jobs_waited) == (1, 1)  # the stream's, nothing else
            streams.cancel_scope.cancel()
    await wait_until(lambda: pump.statistics().waiters == 0, within=10)
    row = await queue.get(queued["jobId"])
    assert row is not None and row.status == "pending"  # the job itself is untouched
    shutdown.set()


async def test_openapi_documents_prefer_and_the_200(bff: Bff) -> None:
    spec = (await bff.http.get("/openapi.json")).json()
    post_op = spec["paths"]["/api/probe/q"]["post"]
    assert any(p["name"] == "Prefer" and p["in"] == "header" for p in post_op["parameters"])
    ok = post_op["responses"]["200"]
    assert ok["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Answer"}
    assert {"Preference-Applied", "Vary", "Content-Location"} <= set(ok["headers"])
    assert "Preference-Applied" in post_op["responses"]["202"]["headers"]


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
