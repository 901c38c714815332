"""Whose answer a cached or coalesced job is, through the real BFF and a real worker.

* A ``per_user`` operation (``probe.cached``) keys its job, its cache entry and its
  single flight by the caller too: bob never gets alice's answer, while two requests
  of alice's still share one job and then one cache entry.
* A ``per_user`` job is read by its caller only: bob's bearer token reads (poll,
  stream, blob) answer 404 for alice's job id, as for an unknown id, though the two
  share a client and a scope.
* A staff caller's ``u:<user>`` invalidation drops only its own client's entries;
  the service token (and ``QueueClient.invalidate``) still drops every client's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trio

from dataplane.queue import QueueClient
from tests.acceptance.test_bff import poll_until_done, post
from tests.conftest import wait_until
from tests.helpers import bearer, token
from tests.real_plane import start_bff

ALICE = token(sub="alice", branches=["acme-north"])
BOB = token(sub="bob", branches=["acme-north"])  # same client, same scope as alice
HEARD = "cache: invalidated"  # the worker's log line for each invalidation it hears


async def answer_of(http: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    with trio.fail_after(30):
        done: dict[str, Any] = await poll_until_done(http, body["pollUrl"])
    return done


async def test_a_per_user_answer_is_never_served_to_another_user(
    http: httpx.AsyncClient, spawn_worker: Callable[..., Any]
) -> None:
    # No worker yet: the rows stay pending, so who coalesces with whom is plain.
    first = (await post(http, "probe", "cached", {"value": "v"}, ALICE)).json()
    again = (await post(http, "probe", "cached", {"value": "v"}, ALICE)).json()
    bobs = (await post(http, "probe", "cached", {"value": "v"}, BOB)).json()
    assert again["coalesced"] is True and again["jobId"] == first["jobId"]
    assert bobs["coalesced"] is False and bobs["jobId"] != first["jobId"]

    await spawn_worker()
    alice_answer = await answer_of(http, first)
    assert alice_answer["result"] == {"cached": "v", "user": "alice"}
    assert (await answer_of(http, again))["result"] == alice_answer["result"]
    bob_answer = await answer_of(http, bobs)
    assert bob_answer["result"] == {"cached": "v", "user": "bob"}

    # Cached per caller: each one's next request is a hit on their own entry.
    for tok, user in ((ALICE, "alice"), (BOB, "bob"), (ALICE, "alice")):
        body = (await post(http, "probe", "cached", {"value": "v"}, tok)).json()
        later = await answer_of(http, body)
        assert later["result"] == {"cached": "v", "user": user}
        assert later["cache"] == "hit"


async def test_bob_asking_after_alice_gets_his_own_answer_not_her_cache_hit(
    http: httpx.AsyncClient, spawn_worker: Callable[..., Any]
) -> None:
    """The issue's reproduction: alice asks, then bob (one after the other)."""
    await spawn_worker()
    alice = await answer_of(http, (await post(http, "probe", "cached", {"value": 1}, ALICE)).json())
    bob = await answer_of(http, (await post(http, "probe", "cached", {"value": 1}, BOB)).json())
    assert alice["result"]["user"] == "alice" and alice["cache"] == "miss"
    assert bob["result"]["user"] == "bob" and bob["cache"] == "miss"


async def test_another_user_reads_nothing_of_a_per_user_job(
    http: httpx.AsyncClient, spawn_worker: Callable[..., Any]
) -> None:
    await spawn_worker()
    body = (await post(http, "probe", "cached", {"value": "mine"}, ALICE)).json()
    assert (await answer_of(http, body))["result"]["user"] == "alice"
    job = f"/api/probe/q/{body['jobId']}"
    for path in (job, f"{job}/stream", f"{job}/blob"):
        resp = await http.get(path, headers=bearer(BOB))
        assert resp.status_code == 404, (path, resp.status_code, resp.text)
        assert "no such job" in resp.text, (path, resp.text)
    mine = await http.get(job, headers=bearer(ALICE))
    assert mine.status_code == 200 and mine.json()["result"]["user"] == "alice"
    # Not a shared job's withdrawal either: bob's DELETE is an unknown id's.
    assert (await http.delete(job, headers=bearer(BOB))).status_code == 404


async def cache_of(http: httpx.AsyncClient, tok: str) -> str:
    body = (await post(http, "probe", "cached", {"value": "shared"}, tok)).json()
    done = await answer_of(http, body)
    cache: str = done["cache"]
    return cache


async def test_a_staff_u_tag_drops_only_its_own_clients_entries(
    bff_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    nursery: trio.Nursery,
    queue: QueueClient,
    spawn_worker: Callable[..., Any],
) -> None:
    service = "a-service-token-for-invalidation"
    monkeypatch.setenv("DATAPLANE_INVALIDATE_TOKEN", service)
    base, _app, shutdown = await start_bff(nursery)
    worker = await spawn_worker()
    acme_42 = token("acme", sub="42", branches=["acme-north"])
    globex_42 = token("globex", sub="42", branches=["globex-north"])
    globex_staff = token("globex", sub="ops", staff=True)
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        for tok in (acme_42, globex_42):
            assert await cache_of(http, tok) == "miss"
            assert await cache_of(http, tok) == "hit"

        # globex's staff invalidates u:42: globex's entry goes, acme's stays.
        resp = await http.post(
            "/api/probe/invalidate", json={"tags": ["u:42"]}, headers=bearer(globex_staff)
        )
        assert resp.status_code == 202, resp.text
        assert resp.json() == {"invalidated": ["u:42"]}
        await wait_until(lambda: worker.output().count(HEARD) == 1, within=10)
        assert await cache_of(http, globex_42) == "miss"
        assert await cache_of(http, acme_42) == "hit"

        # The service token drops u:42 of every client.
        assert await cache_of(http, globex_42) == "hit"
        resp = await http.post(
            "/api/probe/invalidate", json={"tags": ["u:42"]}, headers=bearer(service)
        )
        assert resp.status_code == 202, resp.text
        await wait_until(lambda: worker.output().count(HEARD) == 2, within=10)
        assert await cache_of(http, acme_42) == "miss"
        assert await cache_of(http, globex_42) == "miss"

        # And so does the Python API the BFF's own code calls.
        assert await cache_of(http, acme_42) == "hit"
        await queue.invalidate("u:42")
        await wait_until(lambda: worker.output().count(HEARD) == 3, within=10)
        assert await cache_of(http, acme_42) == "miss"
    shutdown.set()
