"""The test kit (dataplane.testing, issue #40): ``run_operation`` answers as a browser
would be answered, through the real worker (400, 403, 404, the result schema, the cache,
the timeout); ``plane`` serves a real BFF whose streams are read event by event, and
``enqueued`` / ``executions`` make coalescing visible; a client DB built from a test's
SQL is read through a credential the worker's read-only proof accepts."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from dataplane import HttpError, Operation, OperationContext, surface
from dataplane.testing import Answer, AnswerError, Plane, RunOperation, token

PARAMS = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0}},
    "required": ["n"],
    "additionalProperties": False,
}
RESULT = {
    "type": "object",
    "properties": {"twice": {"type": "integer"}},
    "required": ["twice"],
    "additionalProperties": False,
}
release = trio.Event()  # what the `slow` operation waits for (a test sets it)


async def double(ctx: OperationContext) -> Any:
    if ctx.params["n"] == 404:
        raise HttpError(404, "no such number")
    return {"twice": 2 * ctx.params["n"]}


async def wrong(ctx: OperationContext) -> Any:
    return {"twice": "two"}  # breaks its result schema


async def slow(ctx: OperationContext) -> Any:
    await release.wait()
    return {"twice": 2 * ctx.params["n"]}


async def counted(ctx: OperationContext) -> Any:
    for step in range(1, ctx.params["n"] + 1):
        await ctx.progress(done=step, total=ctx.params["n"], message=f"step {step}")
        await trio.sleep(0.3)  # past the writer's 200 ms: every report reaches the stream
    return {"twice": 2 * ctx.params["n"]}


async def stuck(ctx: OperationContext) -> Any:
    await trio.sleep_forever()


async def pets(ctx: OperationContext) -> Any:
    rows = await ctx.require_client_db().fetchall("SELECT name FROM pets ORDER BY name")
    return [row["name"] for row in rows]


SURFACE = surface(
    Operation("double", 1, PARAMS, double, result=RESULT),
    Operation("staffDouble", 1, PARAMS, double, gates=["staff"], result=RESULT),
    Operation("wrong", 1, PARAMS, wrong, result=RESULT),
    Operation("cached", 1, PARAMS, double, ttl_seconds=60, result=RESULT),
    Operation("slow", 1, PARAMS, slow, result=RESULT),
    Operation("stuck", 1, PARAMS, stuck, timeout_seconds=0.2),
    Operation("counted", 1, PARAMS, counted, result=RESULT),
    id="kit",
    needs_client_db=False,
)
PETS = surface(
    Operation("pets", 1, {"type": "object"}, pets), id="pets", description="reads the client DB"
)
PETS_SQL = "CREATE TABLE pets (name text); INSERT INTO pets VALUES ('rex'), ('ada');"
pytestmark = pytest.mark.dataplane(surfaces=SURFACE)  # what the kit's fixtures serve


async def test_run_operation_answers_as_the_browser_gets_it(run_operation: RunOperation) -> None:
    answer = await run_operation(SURFACE, "double", {"n": 21})
    assert answer.status == 200 and answer.result == {"twice": 42}
    assert answer.body["status"] == "done" and answer.cache == "bypass"
    assert not answer.coalesced and set(answer.body["timings"]) == {"queueMs", "runMs"}
    missing = await run_operation("kit", "double", {"n": 404})  # by id, too
    assert missing.status == 200 and missing.error == {"status": 404, "message": "no such number"}
    with pytest.raises(AnswerError, match="no such number"):
        missing.result  # noqa: B018 - the property raises


async def test_bad_params_and_unknown_operations_are_refused_like_the_bff(
    run_operation: RunOperation,
) -> None:
    bad = await run_operation(SURFACE, "double", {"n": -1})
    assert bad.status == 400 and bad.body == {
        "error": {"status": 400, "code": "BAD_REQUEST", "message": "params.n: must be >= 0"}
    }
    unknown = await run_operation(SURFACE, "triple", {"n": 1})
    assert unknown.status == 404 and unknown.error is not None
    assert unknown.error["code"] == "NOT_FOUND"
    expired = await run_operation(SURFACE, "double", {"n": 1}, auth=token(ttl=-3600))
    assert expired.status == 401


async def test_a_gate_refuses_with_403_and_lets_staff_through(run_operation: RunOperation) -> None:
    refused = await run_operation(SURFACE, "staffDouble", {"n": 1}, auth=token(sub="u2"))
    assert refused.status == 403 and refused.error is not None
    assert refused.error["code"] == "FORBIDDEN"
    staff = await run_operation(SURFACE, "staffDouble", {"n": 1}, auth=token(staff=True))
    assert staff.result == {"twice": 2}


async def test_the_result_schema_is_always_enforced(run_operation: RunOperation) -> None:
    answer = await run_operation(SURFACE, "wrong", {"n": 1})
    assert answer.status == 200 and answer.error is not None
    assert answer.error["code"] == "RESULT_INVALID"
    assert answer.error["message"] == "result.twice: expected integer"


async def test_a_cached_answer_runs_once(run_operation: RunOperation, dataplane_kit: Any) -> None:
    first = await run_operation(SURFACE, "cached", {"n": 2})
    second = await run_operation(SURFACE, "cached", {"n": 2})
    assert (first.cache, second.cache) == ("miss", "hit") and second.result == {"twice": 4}
    runs = await dataplane_kit.executions(SURFACE, "cached")
    assert [(r.outcome, r.cache) for r in runs] == [("done", "miss"), ("done", "hit")]


async def test_past_its_timeout_an_operation_answers_poison(run_operation: RunOperation) -> None:
    answer = await run_operation(SURFACE, "stuck", {"n": 1})
    assert answer.error is not None and answer.error["code"] == "POISON"
    assert "TIMEOUT" in answer.error["message"]


async def test_the_plane_streams_every_event_and_shows_coalescing(plane: Plane) -> None:
    global release
    release = trio.Event()
    answers: list[Answer] = []

    async def ask(user: str) -> None:
        answers.append(await plane.query(SURFACE, "slow", {"n": 5}, auth=token(sub=user)))

    async with trio.open_nursery() as nursery:
        for i in range(5):
            nursery.start_soon(ask, f"u{i}")
        with trio.fail_after(10):  # all five attached to one row, which waits for release
            while True:
                rows = await plane.enqueued(SURFACE, "slow")
                if rows and rows[0].requesters == 5:
                    break
                await trio.sleep(0.01)
        release.set()
    assert [a.result for a in answers] == [{"twice": 10}] * 5
    assert sorted(a.coalesced for a in answers) == [False] + [True] * 4
    for answer in answers:  # a stream opened after the job finished has its answer only
        assert [e.name for e in answer.events] in (["queued", "done"], ["done"])
        assert [e.id for e in answer.events][-1] == "3"
    (row,) = await plane.enqueued(SURFACE)
    assert row.status == "done" and row.params == {"n": 5} and row.requesters == 5
    (run,) = await plane.executions(SURFACE, "slow")
    assert run.outcome == "done" and not run.coalesced and run.job_id == row.id


async def test_the_plane_refuses_as_the_bff_does(plane: Plane) -> None:
    bad = await plane.query(SURFACE, "double", {"n": "x"})
    assert bad.status == 400 and not bad.events and bad.error is not None
    poisoned = await plane.query(SURFACE, "stuck", {"n": 1})
    assert poisoned.status == 200 and poisoned.events[-1].name == "error"
    assert poisoned.error is not None and poisoned.error["code"] == "POISON"


async def test_progress_reaches_the_plane_s_stream_in_order(plane: Plane) -> None:
    answer = await plane.query(SURFACE, "counted", {"n": 3})
    assert answer.result == {"twice": 6}
    progress = [e for e in answer.events if e.name == "progress"]
    assert [e.json["done"] for e in progress] == [1, 2, 3], answer.events
    assert [e.json["message"] for e in progress][-1] == "step 3"
    assert all(e.id is None for e in progress) and answer.events[-1].name == "done"


async def test_run_operation_runs_a_handler_that_reports_progress(
    run_operation: RunOperation,
) -> None:
    answer = await run_operation(SURFACE, "counted", {"n": 2})
    assert answer.result == {"twice": 4}


@pytest.mark.dataplane(surfaces=[PETS], client_db_sql=PETS_SQL)
async def test_a_client_db_from_sql_is_read_only_and_read(
    run_operation: RunOperation, dataplane_client_dsn: str
) -> None:
    assert "user=dataplane_kit_ro" in dataplane_client_dsn
    answer = await run_operation(PETS, "pets")
    assert answer.result == ["ada", "rex"]
