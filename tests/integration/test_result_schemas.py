"""A worker checks answers against their result schemas as DATAPLANE_RESULT_CHECK says
(issue #40): ``enforce`` answers RESULT_INVALID at once (not retried, not cached),
``count`` lets the answer go and warns once, ``off`` checks nothing; a blob's answer is
never checked."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from dataplane.queue import QueueClient
from dataplane.surfaces.manifest import BlobResult, Operation, OperationContext, surface_of
from dataplane.worker.config import WorkerConfig
from tests.helpers import submit
from tests.integration.test_worker import running_worker, wait_done

PARAMS = {
    "type": "object",
    "properties": {"n": {"description": "what to answer as n"}},
    "additionalProperties": False,
}
RESULT = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
    "additionalProperties": False,
}
runs: list[Any] = []


async def answer_n(ctx: OperationContext) -> Any:
    runs.append(ctx.params.get("n"))
    return {"n": ctx.params.get("n")}


async def answer_blob(ctx: OperationContext) -> Any:
    return BlobResult("application/pdf", b"%PDF-1.4 not a JSON answer")


SURFACE = surface_of(
    Operation("n", 1, PARAMS, answer_n, result=RESULT, ttl_seconds=60),
    Operation("blob", 1, PARAMS, answer_blob, result=RESULT),
    id="typed",
    needs_client_db=False,
)


async def test_enforce_answers_result_invalid_once_and_caches_nothing(
    queue: QueueClient, caplog: pytest.LogCaptureFixture
) -> None:
    runs.clear()
    async with running_worker(queue, SURFACE, result_check="enforce"):
        for value in ("seven", "seven"):  # the second would be a cache hit of the first
            enq = await submit(queue, "typed", "n", {"n": value})
            row = await wait_done(queue, enq.job_id)
            assert row.status == "done" and row.dequeue_count == 1, row
            assert row.result == {
                "error": {
                    "status": 500,
                    "code": "RESULT_INVALID",
                    "message": "result.n: expected integer",
                }
            }
        good = await submit(queue, "typed", "n", {"n": 7})
        assert (await wait_done(queue, good.job_id)).result["data"] == {"n": 7}
    assert runs == ["seven", "seven", 7]  # the refused answer was not cached
    errors = [r for r in caplog.records if "breaks its result schema" in r.getMessage()]
    assert [r.levelno for r in errors] == [logging.ERROR, logging.ERROR]
    assert "result.n: expected integer" in errors[0].getMessage()


async def test_count_lets_the_answer_go_and_warns_once(
    queue: QueueClient, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_worker(queue, SURFACE, result_check="count"):
        for value in ("a", "b"):
            enq = await submit(queue, "typed", "n", {"n": value})
            assert (await wait_done(queue, enq.job_id)).result["data"] == {"n": value}
    warned = [r for r in caplog.records if "breaks its result schema" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING, warned


@pytest.mark.parametrize("mode", ["off", "enforce"])
async def test_off_checks_nothing_and_a_blob_is_never_checked(
    queue: QueueClient, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    async with running_worker(queue, SURFACE, result_check=mode):
        blob = await submit(queue, "typed", "blob", {})
        assert "blobRef" in (await wait_done(queue, blob.job_id)).result
        if mode == "off":
            enq = await submit(queue, "typed", "n", {"n": "not an integer"})
            assert (await wait_done(queue, enq.job_id)).result["data"] == {"n": "not an integer"}
    assert not [r for r in caplog.records if "breaks its result schema" in r.getMessage()]


def test_the_check_is_off_unless_told_and_names_its_choices() -> None:
    from dataplane.core.errors import ConfigError
    from dataplane.core.settings import from_env

    env = {"SURFACE_QUEUE_TYPE": "surface-typed"}
    assert from_env(WorkerConfig, env).result_check == "off"
    assert from_env(WorkerConfig, {**env, "DATAPLANE_RESULT_CHECK": "count"}).result_check == (
        "count"
    )
    with pytest.raises(ConfigError, match="DATAPLANE_RESULT_CHECK"):
        from_env(WorkerConfig, {**env, "DATAPLANE_RESULT_CHECK": "sometimes"})
