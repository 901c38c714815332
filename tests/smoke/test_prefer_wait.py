"""``POST /q`` with ``Prefer: wait=N`` (RFC 7240): the answer in one round trip."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trio

from dataplane.queue import QueueClient
from tests.acceptance import test_prefer_wait as prefer_wait
from tests.acceptance.test_bff_faults import plane_of
from tests.acceptance.test_prefer_wait import (
    QUEUED_KEYS,
    Bff,
    applied,
    post,
    varies_on_prefer,
)
from tests.conftest import wait_until
from tests.helpers import read_sse
from tests.real_plane import start_bff

# The fixture these tests take (a Bff), over tests.real_plane's `bff` (a URL).
bff = prefer_wait.bff


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
    # probe declares every result: its answers are typed (probe.Answer, issue #40)
    assert ok["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/probe.Answer"
    }
    assert {"Preference-Applied", "Vary", "Content-Location"} <= set(ok["headers"])
    assert "Preference-Applied" in post_op["responses"]["202"]["headers"]
