"""The queue type: which surface a row is for, on which tier, and its channel names.

A queue type is ``surface-<id>`` (live) or ``surface-<id>-dev`` (dev tier). Each
has two notification channels: the *done* channel the BFF's reply pump listens
on (``surface_<id>_done``, ``surface_<id>_dev_done``) and the *wake* channel an
enqueue notifies so an idle worker claims at once (``<type>_enqueued``). The SQL
side computes the same names with one function each, ``maestro_done_channel``
and ``maestro_wake_channel`` (migrations 0001 and 0004); a test holds them equal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from dataplane.db import MAX_IDENTIFIER_BYTES
from dataplane.errors import InvalidArgument

PREFIX = "surface-"
DEV_SUFFIX = "-dev"
SUFFIXES = ("", DEV_SUFFIX)  # live, dev
STATUSES = ("pending", "in_progress", "done", "poison", "cancelled")
LIVE_STATUSES = ("pending", "in_progress")
INVALIDATE_CHANNEL = "dataplane_invalidate"  # cache tags dropped on every worker
ROWS_DELETED_CHANNEL = "maestro_rows_deleted"  # rows deleted (migration 0009's trigger)

_SURFACE_ID = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True, slots=True)
class QueueType:
    """``surface-<surface><suffix>``: parse it once, then ask it for its names."""

    surface: str
    suffix: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.surface, str) or not _SURFACE_ID.fullmatch(self.surface):
            raise InvalidArgument(
                f"surface id must be lower-case letters, digits and _, got {self.surface!r}"
            )
        if self.suffix not in SUFFIXES:
            raise InvalidArgument(f"queue suffix must be '' or '-dev', got {self.suffix!r}")
        for channel in (self.done_channel, self.wake_channel):
            if len(channel.encode()) > MAX_IDENTIFIER_BYTES:
                raise InvalidArgument(f"queue type {self.name!r} is too long for its channels")

    @classmethod
    def parse(cls, text: str | QueueType) -> QueueType:
        """``surface-<id>`` or ``surface-<id>-dev``; :class:`InvalidArgument` otherwise."""
        if isinstance(text, QueueType):
            return text
        return _parse(text)

    @classmethod
    def _from_text(cls, text: str) -> QueueType:
        if not isinstance(text, str) or not text.startswith(PREFIX):
            raise InvalidArgument(
                f"queue type must look like surface-<id>[-dev] (e.g. 'surface-probe'), got {text!r}"
            )
        rest, suffix = text.removeprefix(PREFIX), ""
        if rest.endswith(DEV_SUFFIX):
            rest, suffix = rest.removesuffix(DEV_SUFFIX), DEV_SUFFIX
        return cls(rest, suffix)

    @property
    def name(self) -> str:
        """The ``type`` column's value."""
        return f"{PREFIX}{self.surface}{self.suffix}"

    @property
    def dev(self) -> bool:
        return self.suffix == DEV_SUFFIX

    @property
    def done_channel(self) -> str:
        """``surface-x`` -> ``surface_x_done``; ``surface-x-dev`` -> ``surface_x_dev_done``."""
        return self.name.replace("-", "_") + "_done"

    @property
    def wake_channel(self) -> str:
        """The channel an enqueue notifies so an idle claimer wakes at once."""
        return f"{self.name}_enqueued"

    def __str__(self) -> str:
        return self.name


@lru_cache(maxsize=256)
def _parse(text: str) -> QueueType:
    return QueueType._from_text(text)


def check_queue_type(queue_type: str | QueueType) -> str:
    """The validated type name of ``queue_type``."""
    return QueueType.parse(queue_type).name


def done_channel(queue_type: str | QueueType) -> str:
    return QueueType.parse(queue_type).done_channel


def wake_channel(queue_type: str | QueueType) -> str:
    return QueueType.parse(queue_type).wake_channel


def check_status(status: str) -> str:
    if status not in STATUSES:
        raise InvalidArgument(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    return status
