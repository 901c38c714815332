"""Versioned rollouts: a worker serves every version its surface still declares, and
answers 400 (naming what it serves) for one it does not; a BFF enqueues the latest."""

from __future__ import annotations

from typing import Any

from dataplane import Operation, OperationContext, surface
from dataplane.queue import QueueClient
from tests.helpers import envelope
from tests.integration.test_worker import running_worker, wait_done

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}}


def _versions(*declared: int) -> Any:
    def make(version: int) -> Any:
        async def handler(ctx: OperationContext) -> Any:
            return {"served_by": version}

        return Operation("get", version, SCHEMA, handler)

    return surface(*(make(v) for v in declared), id="rolling", needs_client_db=False)


async def _ask(queue: QueueClient, version: int) -> Any:
    env = envelope("rolling", "get", {"n": version}, version=version)
    enq = await queue.enqueue("surface-rolling", env.dedupe_key, env.to_json())
    return (await wait_done(queue, enq.job_id)).result


async def test_workers_serve_every_declared_version(queue: QueueClient) -> None:
    # Workers are upgraded first: they declare the old and the new version.
    async with running_worker(queue, _versions(1, 2)):
        assert (await _ask(queue, 1))["data"] == {"served_by": 1}  # an old BFF's request
        assert (await _ask(queue, 2))["data"] == {"served_by": 2}  # an upgraded BFF's


async def test_a_version_the_worker_does_not_declare_is_a_400_answer(queue: QueueClient) -> None:
    # A BFF upgraded before its workers (against the documented order), or a version
    # retired too early: an answer naming what is served, never a retry.
    async with running_worker(queue, _versions(1)):
        error = (await _ask(queue, 2))["error"]
    assert error["status"] == 400 and "served at version(s) [1], not 2" in error["message"]
    async with running_worker(queue, _versions(2, 3)):
        error = (await _ask(queue, 1))["error"]
    assert error["status"] == 400 and "[2, 3]" in error["message"]
