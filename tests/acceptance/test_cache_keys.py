"""Whose answer a cached or coalesced job is, through the real BFF and a real worker.

* A ``per_user`` operation (``probe.cached``) keys its job, its cache entry and its
  single flight by the caller too: bob never gets alice's answer, while two requests
  of alice's still share one job and then one cache entry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import trio

from tests.acceptance.test_bff import poll_until_done, post
from tests.helpers import token

ALICE = token(sub="alice", branches=["acme-north"])
BOB = token(sub="bob", branches=["acme-north"])  # same client, same scope as alice


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
