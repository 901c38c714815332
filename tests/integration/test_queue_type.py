"""The queue type's names: Python (QueueType) and SQL (one function each) agree."""

from __future__ import annotations

import pytest

from dataplane.db import Database
from dataplane.errors import InvalidArgument
from dataplane.queue import QueueType

TYPES = ["surface-probe", "surface-probe-dev", "surface-learner_views", "surface-x-dev"]


@pytest.mark.parametrize("name", TYPES)
async def test_channel_names_match_the_sql_functions(db: Database, name: str) -> None:
    row = await db.fetchone(
        "SELECT maestro_done_channel(%(t)s) AS done, maestro_wake_channel(%(t)s) AS wake",
        {"t": name},
    )
    parsed = QueueType.parse(name)
    assert row is not None
    assert (row["done"], row["wake"]) == (parsed.done_channel, parsed.wake_channel)


def test_parse_and_format_round_trip() -> None:
    dev = QueueType.parse("surface-probe-dev")
    assert (dev.surface, dev.suffix, dev.dev, dev.name) == (
        "probe",
        "-dev",
        True,
        "surface-probe-dev",
    )
    assert QueueType("probe").name == "surface-probe" and str(QueueType("probe")) == "surface-probe"
    assert QueueType.parse(dev) is dev
    assert dev.done_channel != QueueType("probe").done_channel  # tiers never share a channel


@pytest.mark.parametrize(
    "bad", ["probe", "surface-", "surface-Probe", "surface-a-b", "surface-" + "x" * 60, ""]
)
def test_bad_queue_types_are_refused(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        QueueType.parse(bad)
