"""The queue type: which surface a row is for, on which tier, and its channel names.

A queue type is ``surface-<id>`` (live) or ``surface-<id>-dev`` (dev tier). Each
has five notification channels: the *done* channel the BFF's reply pump listens
on (``surface_<id>_done``, ``surface_<id>_dev_done``) and the *wake* channel an
enqueue notifies so an idle worker claims at once (``<type>_enqueued``), the
*progress* channel a running job's progress is heard on (``surface_<id>_progress``),
the *retry* channel a failed attempt that will be tried again is heard on
(``surface_<id>_retry``), and the *cancel* channel an operator's cancel of a running
job tells its worker on (``surface_<id>_cancel``, payload the job id; a hint the
worker checks against the row, never an order: any role that may connect may
notify). The SQL
side computes the same names with one function each, ``maestro_done_channel``
and ``maestro_wake_channel`` (migrations 0001 and 0004); a test holds them equal.

A surface id (:func:`check_surface_id`) is what every tier's names can be built
from: lower-case letters, digits and ``_``, starting with a letter; short enough
that the longest name derived from it, the dev tier's wake channel
``surface-<id>-dev_enqueued``, fits Postgres's 63-byte identifier limit (a longer
channel name is refused by ``pg_notify`` and silently cut by ``LISTEN``), so at most
:data:`MAX_SURFACE_ID_LENGTH` characters; and not ending in ``_dev``, whose live
done channel would be another surface's dev-tier one (``surface_x_dev_done``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from dataplane.core.errors import InvalidArgument
from dataplane.db import MAX_IDENTIFIER_BYTES

PREFIX = "surface-"
DEV_SUFFIX = "-dev"
SUFFIXES = ("", DEV_SUFFIX)  # live, dev
STATUSES = ("pending", "in_progress", "done", "poison", "cancelled")
LIVE_STATUSES = ("pending", "in_progress")
# Cache invalidation, broadcast to every worker: each notify's payload is one cache tag,
# and each worker drops the entries carrying it. The tags an entry carries (see
# ``Operation.cache_tags``) are ``c:<client>``; and, for each user its result is about,
# ``u:<user>`` (that user's entries of every client) and ``client_tag(client, "u:<user>")``
# = ``c:<client>|u:<user>`` (that user's entries of that client only: client ids hold no
# ``|``, so the first ``|`` ends the client and no two clients' tags can meet).
INVALIDATE_CHANNEL = "dataplane_invalidate"
MAX_TAG_BYTES = 1024  # a cache tag in UTF-8, client prefix included (well within a notify)
ROWS_DELETED_CHANNEL = "maestro_rows_deleted"  # rows deleted (migration 0009's trigger)

_SURFACE_ID = re.compile(r"[a-z][a-z0-9_]*")
# Of every name derived from a surface id, the dev tier's wake channel is the longest.
_LONGEST_NAME = f"{PREFIX}{{}}{DEV_SUFFIX}_enqueued"
MAX_SURFACE_ID_LENGTH = MAX_IDENTIFIER_BYTES - len(_LONGEST_NAME.format(""))  # characters


def check_surface_id(surface_id: object) -> str:
    """``surface_id`` if every queue type and channel name of every tier can be built
    from it; :class:`InvalidArgument` with one line saying why not otherwise."""
    if not isinstance(surface_id, str) or not _SURFACE_ID.fullmatch(surface_id):
        raise InvalidArgument(
            "a surface id is lower-case letters, digits and _, starting with a letter; "
            f"got {surface_id!r}"
        )
    if len(surface_id) > MAX_SURFACE_ID_LENGTH:
        raise InvalidArgument(
            f"surface id {surface_id!r} is {len(surface_id)} characters; at most "
            f"{MAX_SURFACE_ID_LENGTH} fit, so that its channel names (the longest is "
            f"{_LONGEST_NAME.format('<id>')!r}) stay within Postgres's "
            f"{MAX_IDENTIFIER_BYTES}-byte identifier limit"
        )
    if surface_id.endswith("_dev"):
        dev_of = surface_id.removesuffix("_dev")
        raise InvalidArgument(
            f"surface id {surface_id!r} may not end in '_dev': its done channel would be "
            f"the dev tier's of surface {dev_of!r} (surface_{surface_id}_done)"
        )
    return surface_id


@dataclass(frozen=True, slots=True)
class QueueType:
    """``surface-<surface><suffix>``: parse it once, then ask it for its names."""

    surface: str
    suffix: str = ""

    def __post_init__(self) -> None:
        check_surface_id(self.surface)
        if self.suffix not in SUFFIXES:
            raise InvalidArgument(f"queue suffix must be '' or '-dev', got {self.suffix!r}")

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

    @property
    def progress_channel(self) -> str:
        """``surface-x`` -> ``surface_x_progress``: a running job's progress notifies
        (as long as the wake channel's name, so it fits too)."""
        return self.name.replace("-", "_") + "_progress"

    @property
    def retry_channel(self) -> str:
        """``surface-x`` -> ``surface_x_retry``: an attempt failed and the job waits out
        its backoff (shorter than the wake channel's name, so it fits)."""
        return self.name.replace("-", "_") + "_retry"

    @property
    def oncall_key(self) -> str:
        """The name of the session lock the type's workers take turns holding (on call:
        dataplane/worker/claims/oncall.py); a worker that claims holds or waits for it."""
        return f"oncall:{self.name}"

    @property
    def cancel_channel(self) -> str:
        """``surface-x`` -> ``surface_x_cancel``: an operator cancelled a running job of
        this type (payload: its id); shorter than the wake channel's name, so it fits."""
        return self.name.replace("-", "_") + "_cancel"

    def __str__(self) -> str:
        return self.name


@lru_cache(maxsize=256)
def _parse(text: str) -> QueueType:
    return QueueType._from_text(text)


def client_tag(client: str, tag: str) -> str:
    """``tag`` (a ``u:`` tag) for the entries of ``client`` only: ``c:<client>|<tag>``."""
    if not client or "|" in client:
        raise InvalidArgument(f"a client id is non-empty and holds no '|', got {client!r}")
    if not tag.startswith("u:"):
        raise InvalidArgument(f"only u: tags are scoped to a client, got {tag!r}")
    return f"c:{client}|{tag}"


def check_tag(tag: object) -> str:
    """``tag`` if it can travel as an invalidation: non-empty text of at most
    ``MAX_TAG_BYTES`` in UTF-8, without NUL (so: no lone surrogate either)."""
    if not isinstance(tag, str) or not tag:
        raise InvalidArgument(f"a cache tag is a non-empty string, got {tag!r}")
    if "\x00" in tag:
        raise InvalidArgument("a cache tag may not hold NUL")
    try:
        size = len(tag.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgument("a cache tag must be text (no unpaired surrogate)") from None
    if size > MAX_TAG_BYTES:
        raise InvalidArgument(f"a cache tag is at most {MAX_TAG_BYTES} bytes, got {size}")
    return tag


def check_queue_type(queue_type: str | QueueType) -> str:
    """The validated type name of ``queue_type``."""
    return QueueType.parse(queue_type).name


def done_channel(queue_type: str | QueueType) -> str:
    return QueueType.parse(queue_type).done_channel


def wake_channel(queue_type: str | QueueType) -> str:
    return QueueType.parse(queue_type).wake_channel


def progress_channel(queue_type: str | QueueType) -> str:
    return QueueType.parse(queue_type).progress_channel


def retry_channel(queue_type: str | QueueType) -> str:
    return QueueType.parse(queue_type).retry_channel


def cancel_channel(queue_type: str | QueueType) -> str:
    return QueueType.parse(queue_type).cancel_channel


def check_status(status: str) -> str:
    if status not in STATUSES:
        raise InvalidArgument(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    return status
