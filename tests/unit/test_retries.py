"""A failed attempt the job waits out: what the row confirms, what a retry note may
carry, how it orders among a stream's progress, and what the reply pump does with a
retry notify whatever it carries (the pump is not running: each notify is handed to
the step that takes one in, as its dispatch loop does)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.bff.reply.pump import ReplyPump
from dataplane.bff.reply.updates import RETRY
from dataplane.bff.reply.waiter import Waiter
from dataplane.db import Database, DatabaseConfig, Notification
from dataplane.queue import QueueClient, QueueConfig, done_channel
from dataplane.queue.notices.progress import Progress
from dataplane.queue.notices.retries import MAX_ERROR_LINE, Retry, error_line, retry_notice
from dataplane.queue.notices.seal import NotifySeal
from dataplane.queue.records import ClaimedJob
from dataplane.queue.types import retry_channel
from tests.helpers import NOTIFY_SECRET

TYPE = "surface-probe"
CHANNEL = retry_channel(TYPE)
QUEUE = QueueClient(
    Database(DatabaseConfig("host=nowhere"), loop=None), QueueConfig(notify_secret=NOTIFY_SECRET)
)
DUE = datetime(2026, 1, 1, 12, 0, 5, tzinfo=UTC)
ROW: dict[str, Any] = {
    "status": "pending",
    "dequeue_count": 1,
    "max_dequeues": 5,
    "last_error": "KeyError: 'oops'",
    "available_at": DUE,
}


def test_the_row_confirms_a_retry_only_while_it_waits_out_a_failure() -> None:
    assert Retry.of(**ROW) == Retry(1, 5, "KeyError: 'oops'", DUE)
    for change in (
        {"status": "in_progress"},  # tried again already
        {"status": "done"},
        {"dequeue_count": 0},  # never claimed: enqueued, or re-driven by an operator
        {"dequeue_count": 5},  # no try left: poison at the next claim
        {"last_error": None},  # nothing failed
    ):
        assert Retry.of(**(ROW | change)) is None, change


def test_an_event_says_what_failed_and_when_the_next_try_is_due() -> None:
    retry = Retry.of(**(ROW | {"last_error": "Traceback ...\n  File x\nValueError: no"}))
    assert retry is not None
    assert retry.event("j", now=DUE - timedelta(seconds=2)) == {
        "jobId": "j",
        "attempt": 1,
        "maxAttempts": 5,
        "error": "ValueError: no",
        "retryAt": "2026-01-01T12:00:05+00:00",
        "retryInMs": 2000,
    }
    assert retry.event("j", now=DUE + timedelta(seconds=1))["retryInMs"] == 0  # due: now


def test_the_error_shown_is_the_last_line_cut_as_a_poison_answer_cuts_it() -> None:
    assert error_line("A: b\nC: d") == "C: d"
    assert error_line(None) == error_line("") == "unknown error"
    assert len(error_line("E: " + "x" * 5000)) == MAX_ERROR_LINE


def test_a_retry_orders_after_its_attempts_progress_and_before_the_next_attempts() -> None:
    waiter = Waiter(uuid.uuid4())
    assert waiter.deliver_progress(Progress(1, 3, {"fraction": 0.3}))
    assert waiter.deliver_retry(Retry(1, 5, "E: x", DUE))
    assert waiter.latest() == Retry(1, 5, "E: x", DUE)
    assert not waiter.deliver_progress(Progress(1, 4, {"fraction": 0.4}))  # heard late
    assert waiter.deliver_progress(Progress(2, 1, {"fraction": 0.0}))
    assert not waiter.deliver_retry(Retry(1, 5, "E: x", DUE))  # replayed
    assert waiter.latest() == Progress(2, 1, {"fraction": 0.0})
    assert waiter.deliver_retry(Retry(2, 5, "E: y", DUE))


def _claimed(job_id: uuid.UUID, dequeue_count: int = 1) -> ClaimedJob:
    now = datetime.now(UTC)
    return ClaimedJob(
        id=job_id,
        type=TYPE,
        dedupe_key="k",
        payload={},
        dequeue_count=dequeue_count,
        max_dequeues=5,
        created_at=now,
        ready_at=now,
        claimed_at=now,
        lease_expires_at=now,
        worker_id="w",
    )


def _take(pump: ReplyPump, payload: str) -> set[uuid.UUID]:
    wanted: set[uuid.UUID] = set()
    pump.updates.take(Notification(CHANNEL, payload), RETRY, wanted)
    return wanted


def test_a_sealed_retry_note_opens_as_a_retry_of_its_job_only() -> None:
    job_id = uuid.uuid4()
    notice = retry_notice(NotifySeal([NOTIFY_SECRET]), _claimed(job_id), "E: x\nKeyError: 'k'", 2)
    assert notice["retry_channel"] == "surface_probe_retry"
    pump = ReplyPump(QUEUE, [done_channel(TYPE)], retry_channels=[CHANNEL])
    waiter = pump.add(job_id)
    assert _take(pump, f"{job_id} {notice['retry_note']}") == set()  # no read
    assert waiter.retry is not None and waiter.retry.error == "KeyError: 'k'"
    assert waiter.retry.attempt == 1 and waiter.retry.max_attempts == 5
    assert pump.statistics().retries == 1
    # Not as a progress note, not as an answer, not for another job.
    seal = QUEUE.seal
    assert seal is not None
    for kind in ("progress", "done"):
        assert seal.open(str(job_id), notice["retry_note"], kind=kind) is None
    other = uuid.uuid4()
    pump.add(other)
    assert _take(pump, f"{other} {notice['retry_note']}") == {other}  # read the row
    assert pump.statistics().rejected == 1


def test_the_last_attempt_seals_no_retry_note() -> None:
    notice = retry_notice(NotifySeal([NOTIFY_SECRET]), _claimed(uuid.uuid4(), 5), "E: x", 2)
    assert notice["retry_note"] is None  # job_fail parks it: its done notify says so
    assert retry_notice(None, _claimed(uuid.uuid4()), "E: x", 2)["retry_note"] is None


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
KEYS = ("attempt", "maxAttempts", "error", "retryAt")


@settings(max_examples=300, deadline=None)
@given(
    text=st.text()
    | JSON.map(json.dumps)
    | st.dictionaries(st.sampled_from(KEYS), JSON).map(json.dumps)
)
def test_an_unsealed_retry_notify_is_only_ever_a_row_read(text: str) -> None:
    """Whatever a notify carries in the clear, it hands nothing to the waiters (it is
    not sealed) and ends nothing: the row is read, which must confirm a retry."""
    pump = ReplyPump(QUEUE, [done_channel(TYPE)], retry_channels=[CHANNEL])
    job_id = uuid.uuid4()
    waiter = pump.add(job_id)
    assert _take(pump, f"{job_id} {text}") == {job_id}
    assert waiter.retry is None and pump.statistics().rejected == 1
    Retry.from_note(text)  # never raises either


@pytest.mark.parametrize(
    "note",
    [
        {"attempt": 0, "maxAttempts": 5, "error": "E", "retryAt": DUE.isoformat()},
        {"attempt": 5, "maxAttempts": 5, "error": "E", "retryAt": DUE.isoformat()},
        {"attempt": 1, "maxAttempts": 5, "error": 7, "retryAt": DUE.isoformat()},
        {"attempt": 1, "maxAttempts": 5, "error": "E", "retryAt": "2026-01-01T12:00:05"},
        {"attempt": True, "maxAttempts": 5, "error": "E", "retryAt": DUE.isoformat()},
    ],
)
def test_a_note_that_is_not_a_retry_parses_as_none(note: dict[str, Any]) -> None:
    assert Retry.from_note(json.dumps(note)) is None
