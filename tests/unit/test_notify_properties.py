"""Properties of what the reply pump does with a done notify, whatever it carries
(hypothesis): no payload ends the pump, and none changes an answer. Only a note the
worker sealed for that job opens; anything else is counted and the row is read.

The pump here is not running (no Postgres): each example is handed to the step that
takes one notify in, as its dispatch loop does."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from dataplane.bff.reply.answers import ANSWER_MAX_AGE
from dataplane.bff.reply.pump import ReplyPump
from dataplane.db import Database, DatabaseConfig, Notification
from dataplane.queue import JobRow, QueueClient, QueueConfig, done_channel
from dataplane.queue.notices.done import done_note
from dataplane.queue.notices.seal import NotifySeal
from dataplane.queue.records import ClaimedJob
from tests.helpers import NOTIFY_SECRET

CHANNEL = done_channel("surface-probe")
QUEUE = QueueClient(
    Database(DatabaseConfig("host=nowhere"), loop=None), QueueConfig(notify_secret=NOTIFY_SECRET)
)
WORKER = NotifySeal([NOTIFY_SECRET])  # a worker process's own seal (its own salt)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
NOTE_KEYS = (
    "type",
    "dequeueCount",
    "maxDequeues",
    "createdAt",
    "claimedAt",
    "completedAt",
    "surface",
    "traceparent",
    "result",
)
NOTES = st.dictionaries(st.sampled_from(NOTE_KEYS), JSON)
SETTINGS = settings(max_examples=300, deadline=None)


def _genuine(job_id: uuid.UUID, *, age: float = 0.0) -> tuple[str, str]:
    """A worker's sealed note for ``job_id`` (completed ``age`` seconds ago), and the
    note itself."""
    now = datetime.now(UTC) - timedelta(seconds=age)
    job = ClaimedJob(
        id=job_id,
        type="surface-probe",
        dedupe_key="k",
        payload={"surface": "probe", "traceparent": None},
        dequeue_count=1,
        max_dequeues=5,
        created_at=now,
        ready_at=now,
        claimed_at=now,
        lease_expires_at=now,
        worker_id="w",
    )
    note = done_note(job, '{"data":{"echo":"real"}}', now)
    return WORKER.seal(str(job_id), note), note


CHANGED_JOB = uuid.uuid4()
CHANGED_SEALED = _genuine(CHANGED_JOB)[0]  # one length for every example


def _take(pump: ReplyPump, payload: str) -> set[uuid.UUID]:
    wanted: set[uuid.UUID] = set()
    pump._take(Notification(CHANNEL, payload), wanted)
    return wanted


@SETTINGS
@given(
    text=st.text()
    | JSON.map(json.dumps)
    | st.dictionaries(st.sampled_from(NOTE_KEYS), JSON).map(json.dumps)
)
@example(text='{"traceparent": ["a"], "result": 1}')
@example(text='{"dequeueCount": 1e400}')
def test_no_carried_text_is_delivered_or_ends_the_pump(text: str) -> None:
    pump = ReplyPump(QUEUE, [CHANNEL])
    job_id = uuid.uuid4()
    waiter = pump.add(job_id)
    wanted = _take(pump, f"{job_id} {text}")
    assert waiter.row is None and wanted == {job_id}  # read the row instead
    assert pump.statistics().rejected == 1
    assert pump.answered(job_id) is None


@SETTINGS
@given(payload=st.text(max_size=200))
def test_no_payload_ends_the_pump(payload: str) -> None:
    pump = ReplyPump(QUEUE, [CHANNEL])
    _take(pump, payload)
    stats = pump.statistics()
    assert stats.delivered == 0 and stats.carried == 0


@SETTINGS
@given(data=st.data())
def test_a_changed_sealed_answer_never_opens(data: st.DataObject) -> None:
    """Any byte of the sealed answer changed, dropped or added: it does not open."""
    job_id = CHANGED_JOB
    raw = bytearray(base64.urlsafe_b64decode(CHANGED_SEALED + "=" * (-len(CHANGED_SEALED) % 4)))
    index = data.draw(st.integers(0, len(raw) - 1))
    flip = data.draw(st.integers(1, 255))
    changed = [bytes(raw[:index]) + bytes([raw[index] ^ flip]) + bytes(raw[index + 1 :])]
    changed.append(bytes(raw[:index]) + bytes(raw[index + 1 :]))
    changed.append(bytes(raw[:index]) + bytes([flip]) + bytes(raw[index:]))
    for text in (base64.urlsafe_b64encode(c).rstrip(b"=").decode() for c in changed):
        pump = ReplyPump(QUEUE, [CHANNEL])
        waiter = pump.add(job_id)
        assert _take(pump, f"{job_id} {text}") == {job_id}
        assert waiter.row is None and pump.statistics().rejected == 1


@SETTINGS
@given(later=st.lists(st.text(max_size=300) | JSON.map(json.dumps), min_size=1, max_size=5))
def test_no_later_notify_changes_a_remembered_answer(later: list[str]) -> None:
    """The genuine answer went by; whatever follows for the same job, a later caller
    gets that answer or none (then reads the row), never another."""
    job_id = uuid.uuid4()
    sealed, _ = _genuine(job_id)
    pump = ReplyPump(QUEUE, [CHANNEL])
    _take(pump, f"{job_id} {sealed}")
    genuine = pump.answered(job_id)
    assert genuine is not None and genuine.result == {"data": {"echo": "real"}}
    for text in later:
        _take(pump, f"{job_id} {text}")
        answered = pump.answered(job_id)
        assert answered is None or answered == genuine


def test_a_sealed_answer_opens_and_is_delivered() -> None:
    """The property above would pass with a pump that delivers nothing: this one
    must deliver the worker's sealed answer."""
    job_id = uuid.uuid4()
    sealed, note = _genuine(job_id)
    pump = ReplyPump(QUEUE, [CHANNEL])
    waiter = pump.add(job_id)
    assert _take(pump, f"{job_id} {sealed}") == set()
    assert waiter.row == JobRow.from_done_note(job_id, note)
    assert pump.statistics().carried == 1 and pump.statistics().rejected == 0


@SETTINGS
@given(note=st.dictionaries(st.sampled_from(NOTE_KEYS), JSON, min_size=7))
def test_a_note_of_any_shape_parses_to_a_sound_row_or_none(note: dict[str, Any]) -> None:
    row = JobRow.from_done_note(uuid.uuid4(), json.dumps(note))
    if row is not None:
        assert isinstance(row.type, str) and type(row.dequeue_count) is int
        assert row.created_at.tzinfo is not None and row.completed_at is not None
        assert row.payload["traceparent"] is None or isinstance(row.payload["traceparent"], str)


def test_an_old_answer_is_not_answered_from_memory() -> None:
    """A genuine notify replayed long after its job finished (the row may be gone)."""
    job_id = uuid.uuid4()
    sealed, _ = _genuine(job_id, age=ANSWER_MAX_AGE + 5)
    pump = ReplyPump(QUEUE, [CHANNEL])
    _take(pump, f"{job_id} {sealed}")
    assert pump.answered(job_id) is None
    fresh_id = uuid.uuid4()
    _take(pump, f"{fresh_id} {_genuine(fresh_id, age=ANSWER_MAX_AGE - 5)[0]}")
    assert pump.answered(fresh_id) is not None
