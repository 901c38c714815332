"""The queue type's names: Python (QueueType) and SQL (one function each) agree, and
the longest surface id's names are ones Postgres really takes."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from dataplane.core.errors import InvalidArgument
from dataplane.db import Database
from dataplane.queue import QueueType
from dataplane.queue.types import MAX_SURFACE_ID_LENGTH

LONGEST = "l" * MAX_SURFACE_ID_LENGTH
TYPES = [
    "surface-probe",
    "surface-probe-dev",
    "surface-learner_views",
    "surface-x-dev",
    f"surface-{LONGEST}",
    f"surface-{LONGEST}-dev",
]


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
    "bad",
    [
        "probe",
        "surface-",
        "surface-Probe",
        "surface-a-b",
        "surface-" + "x" * 60,
        f"surface-{LONGEST}x",  # its live names fit, its dev tier's would not
        f"surface-{LONGEST}x-dev",
        "surface-x_dev",  # its done channel is surface-x-dev's
        "",
    ],
)
def test_bad_queue_types_are_refused(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        QueueType.parse(bad)


def test_postgres_takes_every_channel_of_the_longest_id_and_refuses_one_byte_more(
    queue_dsn: str,
) -> None:
    """The limit is Postgres's own: the longest id's channels are heard, whole; one
    character more and ``pg_notify`` refuses the dev tier's wake channel."""
    channels = [
        name
        for tier in ("", "-dev")
        for name in (QueueType(LONGEST, tier).done_channel, QueueType(LONGEST, tier).wake_channel)
    ]
    assert max(len(c.encode()) for c in channels) == 63
    with psycopg.connect(queue_dsn, autocommit=True) as listener:
        for channel in channels:
            listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        with psycopg.connect(queue_dsn, autocommit=True) as sender:
            for channel in channels:
                sender.execute("SELECT pg_notify(%s, 'x')", (channel,))
            heard = [n.channel for n in listener.notifies(timeout=5, stop_after=len(channels))]
            too_long = "surface-" + LONGEST + "x-dev_enqueued"
            with pytest.raises(psycopg.errors.InvalidParameterValue):
                sender.execute("SELECT pg_notify(%s, 'x')", (too_long,))
    assert heard == channels
