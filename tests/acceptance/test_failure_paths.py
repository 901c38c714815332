"""Queue failure paths through the real BFF and real worker processes: a lapsed last
claim, tiers sharing one queue DB, and cancellation by the requester (backpressure:
tests/smoke/test_failure_paths.py)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trio

from dataplane.queue import QueueClient
from tests.acceptance.test_bff import STAFF, poll_until_done, post
from tests.conftest import wait_until
from tests.helpers import bearer, read_sse, token
from tests.real_plane import start_bff


async def test_a_lapsed_last_claim_poisons_and_the_stream_hears_it(
    bff_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    nursery: trio.Nursery,
    queue: QueueClient,
    spawn_worker: Callable[..., Any],
) -> None:
    monkeypatch.setenv("DATAPLANE_MAX_DEQUEUES", "1")
    base, _app, shutdown = await start_bff(nursery)
    leases = {"MAESTRO_LEASE_SECONDS": "1", "MAESTRO_RENEW_SECONDS": "0.3"}
    doomed = await spawn_worker(**leases)
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        body = (await post(http, "probe", "sleep", {"ms": 60_000})).json()

        async def claimed() -> bool:
            row = await queue.get(body["jobId"])
            return row is not None and row.status == "in_progress"

        await wait_until(claimed, within=10)
        doomed.signal(signal.SIGKILL)  # its one and only attempt dies with it
        doomed.wait(10)
        await spawn_worker(**leases)
        with trio.fail_after(20):
            _, _, events = await read_sse(http, body["streamUrl"])
        assert events[-1].name == "error" and events[-1].json["code"] == "POISON"
        row = await queue.get(body["jobId"])
        assert row is not None and row.status == "poison" and row.dequeue_count == 1
        assert "lease of its last attempt lapsed" in (row.last_error or "")
        # A fresh identical request is a new job, not an attachment to the dead row.
        again = (await post(http, "probe", "sleep", {"ms": 60_000}, token(staff=True))).json()
        assert again["jobId"] != body["jobId"] and not again["coalesced"]
    shutdown.set()


async def test_live_and_dev_tiers_never_share_a_row(
    bff_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    nursery: trio.Nursery,
    spawn_worker: Callable[..., Any],
) -> None:
    live_base, _, live_stop = await start_bff(nursery)
    monkeypatch.setenv("DATAPLANE_QUEUE_SUFFIX", "-dev")
    dev_base, _, dev_stop = await start_bff(nursery)
    async with (
        httpx.AsyncClient(base_url=live_base, timeout=30) as live,
        httpx.AsyncClient(base_url=dev_base, timeout=30) as dev,
    ):
        on_live = (await post(live, "probe", "echo", {"value": "same"})).json()
        on_dev = (await post(dev, "probe", "echo", {"value": "same"})).json()
        assert on_dev["jobId"] != on_live["jobId"] and not on_dev["coalesced"]
        assert (await live.get(on_live["pollUrl"])).status_code == 202
        assert (await dev.get(on_dev["pollUrl"])).status_code == 202
        # Neither tier's URLs read the other tier's job.
        assert (await dev.get(on_live["pollUrl"])).status_code == 404
        assert (await live.get(on_dev["pollUrl"])).status_code == 404
        await spawn_worker("surface-probe")
        await spawn_worker("surface-probe-dev")
        assert (await poll_until_done(live, on_live["pollUrl"]))["result"]["echo"] == "same"
        assert (await poll_until_done(dev, on_dev["pollUrl"]))["result"]["echo"] == "same"
    live_stop.set()
    dev_stop.set()


async def test_only_a_requester_withdraws_and_a_double_attach_withdraws_once(
    bff_env: dict[str, str], nursery: trio.Nursery, queue: QueueClient
) -> None:
    """Issue 38 item 7: the row counted numbers, not requesters. carol, of alice's and
    bob's client and scope, never asked for their job: her DELETE used to withdraw one
    of them and cancel the job under the other; now it is a 403 that changes nothing.
    And dave, who attached twice to his own job, could never withdraw (two counted, one
    withdrawal each): now one DELETE cancels it."""
    alice, bob, carol, dave = (token(staff=True, sub=u) for u in ("alice", "bob", "carol", "dave"))
    base, _app, shutdown = await start_bff(nursery)
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:  # no worker: pending
        mine = (await post(http, "probe", "echo", {"value": "shared"}, alice)).json()
        theirs = (await post(http, "probe", "echo", {"value": "shared"}, bob)).json()
        assert theirs["jobId"] == mine["jobId"]
        job = f"/api/probe/q/{mine['jobId']}"
        for _ in range(2):
            refused = await http.delete(job, headers=bearer(carol))
            assert refused.status_code == 403, refused.text
            assert refused.json()["error"]["code"] == "FORBIDDEN"
        row = await queue.get(mine["jobId"])
        assert row is not None and row.status == "pending"
        withdrawn = await http.delete(mine["pollUrl"])
        assert withdrawn.status_code == 202 and withdrawn.json()["requesters"] == 1
        again = await http.delete(job, headers=bearer(alice))
        assert again.status_code == 202 and again.json()["requesters"] == 1
        cancelled = await http.delete(theirs["pollUrl"])
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"

        first = (await post(http, "probe", "echo", {"value": "dave's"}, dave)).json()
        second = (await post(http, "probe", "echo", {"value": "dave's"}, dave)).json()
        assert second["coalesced"] and second["jobId"] == first["jobId"]
        once = await http.delete(second["pollUrl"])
        assert once.status_code == 200 and once.json()["status"] == "cancelled", once.text
    shutdown.set()


async def test_a_requester_withdraws_once_however_often_it_deletes(
    bff_env: dict[str, str],
    nursery: trio.Nursery,
    spawn_worker: Callable[..., Any],
) -> None:
    """alice and bob (one client, one scope) coalesce on one job; alice's repeated
    DELETEs, with her URL token or her bearer JWT, withdraw her once: bob's stream gets
    the answer. (They used to cancel the job under bob.)"""
    alice = token(staff=True, sub="alice")
    bob = token(staff=True, sub="bob")
    base, _app, shutdown = await start_bff(nursery)
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:  # no worker yet
        mine = (await post(http, "probe", "echo", {"value": "both"}, alice)).json()
        theirs = (await post(http, "probe", "echo", {"value": "both"}, bob)).json()
        assert theirs["coalesced"] and theirs["jobId"] == mine["jobId"]
        async with trio.open_nursery() as streams:
            finals: list[Any] = []

            async def listen() -> None:
                _, _, events = await read_sse(http, theirs["streamUrl"])
                finals.append(events[-1])

            streams.start_soon(listen)
            for delete in (
                http.delete(mine["pollUrl"]),
                http.delete(mine["pollUrl"]),
                http.delete(f"/api/probe/q/{mine['jobId']}", headers=bearer(alice)),
            ):
                withdrawn = await delete
                assert withdrawn.status_code == 202, withdrawn.text
                assert withdrawn.json()["requesters"] == 1
            await spawn_worker()
        assert finals[0].name == "done" and finals[0].json["result"]["echo"] == "both"
    shutdown.set()


async def test_a_coalesced_job_is_not_cancelled_by_one_of_its_requesters(
    bff_env: dict[str, str],
    nursery: trio.Nursery,
    spawn_worker: Callable[..., Any],
) -> None:
    base, _app, shutdown = await start_bff(nursery)
    erin = token(staff=True, sub="erin")  # a second requester (one user is one requester)
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        first = (await post(http, "probe", "echo", {"value": "shared"})).json()
        second = (await post(http, "probe", "echo", {"value": "shared"}, erin)).json()
        assert second["coalesced"] and second["jobId"] == first["jobId"]
        withdrawn = await http.delete(first["pollUrl"])
        assert withdrawn.status_code == 202 and withdrawn.json()["requesters"] == 1
        await spawn_worker()
        answer = await poll_until_done(http, second["pollUrl"])
        assert answer["status"] == "done" and answer["result"]["echo"] == "shared"
        # Only its requesters may cancel: another scope's bearer gets 404.
        other = await http.delete(
            f"/api/probe/q/{first['jobId']}", headers=bearer(token("globex", staff=True))
        )
        assert other.status_code == 404
        assert (
            await http.delete(f"/api/probe/q/{first['jobId']}", headers=bearer(STAFF))
        ).status_code == 409
    shutdown.set()
