"""What a handler may report as progress, and how reports are ordered and kept."""

from __future__ import annotations

import json
import math
import uuid

import pytest
import trio

from dataplane.bff.reply.waiter import Waiter
from dataplane.queue.envelope import Auth
from dataplane.queue.notices.progress import MAX_MESSAGE_CHARS, Progress, progress_report
from dataplane.surfaces.manifest import OperationContext


def test_a_report_is_a_fraction_or_done_of_total_with_a_message_and_a_partial() -> None:
    assert progress_report(0.5) == {"fraction": 0.5}
    assert progress_report(done=1, total=3) == {"done": 1, "total": 3, "fraction": 0.3333}
    report = progress_report(message="x" * 1000, partial={"rows": [1, 2]})
    assert len(report["message"]) == MAX_MESSAGE_CHARS and report["partial"] == {"rows": [1, 2]}


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"fraction": 1.5},
        {"fraction": -0.1},
        {"fraction": math.nan},
        {"fraction": True},
        {"fraction": "half"},
        {"done": 1},
        {"done": 4, "total": 3},
        {"done": -1, "total": 3},
        {"done": 0, "total": 0},
        {"message": 7},
        {"partial": {"blob": "x" * 5000}},
        {"partial": {1, 2}},
    ],
)
def test_a_bad_report_is_a_value_error(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="progress"):
        progress_report(**kwargs)  # type: ignore[arg-type]


def test_a_note_round_trips_and_anything_else_is_none() -> None:
    p = Progress(2, 5, progress_report(done=5, total=10, message="é"))
    assert Progress.from_note(p.note()) == p
    assert p.event("j")["jobId"] == "j" and p.event("j")["seq"] == 5
    for bad in (
        "",
        "[]",
        '{"attempt": 1}',
        '{"attempt": -1, "seq": 1}',
        '{"attempt": 1.0, "seq": 1}',
    ):
        assert Progress.from_note(bad) is None
    assert Progress.from_value(json.loads(p.note())) == p


async def test_a_context_without_a_worker_checks_reports_and_with_one_hands_them_over() -> None:
    auth = Auth(client="acme", user_id="u", actor_email="u@x", staff=False, branches=("b",))
    alone = OperationContext({}, auth, job_id="j", dequeue_count=1, client_db=None)
    await alone.progress(0.5)
    with pytest.raises(ValueError):
        await alone.progress(2.0)
    got: list[dict[str, object]] = []
    ctx = OperationContext(
        {},
        auth,
        job_id="j",
        dequeue_count=1,
        client_db=None,
        progress_sink=lambda **r: got.append(r),
    )
    await ctx.progress(done=1, total=2, message="m")
    assert got == [{"fraction": None, "done": 1, "total": 2, "message": "m", "partial": None}]


async def test_a_waiter_keeps_the_newest_progress_and_wakes_its_stream() -> None:
    waiter = Waiter(job_id=uuid.uuid4())
    woke: list[tuple[int, int]] = []

    async def stream() -> None:
        await waiter.changed((-1, -1))
        woke.append(waiter.seen())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stream)
        await trio.sleep(0.01)
        assert woke == []
        assert waiter.deliver_progress(Progress(1, 2, {"fraction": 0.2}))
    assert woke == [(1, 2)]
    assert not waiter.deliver_progress(Progress(1, 1, {"fraction": 0.1}))
    assert waiter.deliver_progress(Progress(2, 1, {"fraction": 0.0}))
