"""TTL cache and single-flight, with deterministic time."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from dataplane import Auth, Operation, OperationContext
from dataplane.core.errors import InvalidArgument
from dataplane.queue.types import check_tag, client_tag
from dataplane.worker.pipeline.cache import SingleFlight, TtlCache


def test_cap_evicts_oldest_first_and_re_put_refreshes_order() -> None:
    now = [0.0]
    cache = TtlCache(cap=3, clock=lambda: now[0])
    for key in "abcd":
        cache.put(key, key.upper(), 10, tags=[f"t:{key}", "all"])
    assert cache.keys() == ["b", "c", "d"]
    assert cache.get("a") == (False, None) and cache.get("b") == (True, "B")
    cache.put("b", "B2", 10)  # re-put: newest, and without its old tags
    cache.put("e", "E", 10, tags=["all"])
    assert cache.keys() == ["d", "b", "e"]
    assert cache.statistics().evictions == 2


def test_expiry_and_tag_invalidation() -> None:
    now = [0.0]
    cache = TtlCache(cap=10, clock=lambda: now[0])
    cache.put("x", 1, 5, tags=["c:acme", "u:1"])
    cache.put("y", 2, 50, tags=["c:acme"])
    cache.put("z", 3, 50, tags=["c:globex"])
    now[0] = 6
    assert cache.get("x") == (False, None)  # expired
    assert cache.invalidate_tag("c:acme") == 1  # only y is left under it
    assert cache.keys() == ["z"]
    assert cache.invalidate_tag("u:1") == 0
    assert cache.invalidate_tag("never") == 0
    with pytest.raises(InvalidArgument):
        cache.put("w", 1, 0)


async def test_single_flight_shares_one_execution(
    autojump_clock: trio.testing.MockClock,
) -> None:
    flight: SingleFlight[int] = SingleFlight()
    runs: list[int] = []
    results: list[tuple[int, bool]] = []

    async def work() -> int:
        runs.append(1)
        await trio.sleep(1)  # virtual time (autojump_clock): the callers pile up meanwhile
        return 42

    async def call() -> None:
        results.append(await flight.run("k", work))

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(call)
    assert runs == [1]
    assert sorted(results) == [(42, False)] + [(42, True)] * 4
    assert flight.in_flight() == 0


async def test_single_flight_shares_errors_and_recovers_from_a_cancelled_leader(
    autojump_clock: trio.testing.MockClock,
) -> None:
    flight: SingleFlight[int] = SingleFlight()

    async def boom() -> int:
        await trio.sleep(1)  # virtual time (autojump_clock)
        raise ValueError("boom")

    errors: list[BaseException] = []

    async def call() -> None:
        try:
            await flight.run("k", boom)
        except ValueError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        nursery.start_soon(call)
    assert len(errors) == 2

    # A cancelled leader hands over: the follower runs the work itself.
    runs: list[str] = []

    async def slow() -> int:
        runs.append("run")
        await trio.sleep(10)  # virtual time (autojump_clock)
        return 7

    got: list[tuple[int, bool]] = []
    async with trio.open_nursery() as nursery:
        leader = trio.CancelScope()

        async def lead() -> None:
            with leader:
                await flight.run("k2", slow)

        async def follow() -> None:
            got.append(await flight.run("k2", slow))

        nursery.start_soon(lead)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(follow)
        await trio.testing.wait_all_tasks_blocked()
        leader.cancel()
    assert got == [(7, False)] and runs == ["run", "run"]


def test_a_client_scoped_user_tag_drops_that_clients_entries_only() -> None:
    async def handler(ctx: OperationContext) -> Any:
        return None

    op = Operation("me", 1, {"type": "object"}, handler, ttl_seconds=60, per_user=True)
    cache = TtlCache()
    for client in ("acme", "globex"):
        auth = Auth(client, "42", "", False, ())
        cache.put(client, client, 60, op.cache_tags(auth, {}))
    assert cache.invalidate_tag(client_tag("globex", "u:42")) == 1
    assert cache.keys() == ["acme"]
    cache.put("globex", "globex", 60, op.cache_tags(Auth("globex", "42", "", False, ()), {}))
    assert cache.invalidate_tag("u:42") == 2  # every client's (a service, the Python API)
    for bad in ("", "u:\ud800", "u:\x00", "u:" + "x" * 2000, 42):
        with pytest.raises(InvalidArgument):
            check_tag(bad)
    with pytest.raises(InvalidArgument):
        client_tag("a|b", "u:1")  # a client id holds no '|': no two clients' tags meet
