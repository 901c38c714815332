"""Which invalidations a worker believes: ``dataplane_invalidate`` is open to any sender.

``NOTIFY`` needs no privilege: any role that may connect to the queue DB can send
``NOTIFY dataplane_invalidate 'c:acme'`` and drop one tenant's cache on every worker,
or send a tag of 8,000 characters. With ``DATAPLANE_NOTIFY_SECRET`` set (as for sealed
answers) a worker believes only a sealed invalidation
(:meth:`~dataplane.queue.notices.seal.NotifySeal.open_invalidation`: it opens with the secret
and is at most 5 minutes old); without one, a plain tag, as before. Either way the tag
must be one a BFF would send (:func:`~dataplane.queue.types.check_tag`). The rest is
refused: counted by reason (``dataplane.invalidations.refused``) and logged at most
once a minute, never in full.
"""

from __future__ import annotations

import logging

import trio

from dataplane.core.errors import InvalidArgument
from dataplane.queue.notices.seal import NotifySeal
from dataplane.queue.types import check_tag
from telemetry.metrics import instruments

log = logging.getLogger(__name__)

LOG_EVERY = 60.0  # seconds between two warnings about refused invalidations
SHOWN = 40  # characters of a refused payload a warning shows


class Invalidations:
    def __init__(self, seal: NotifySeal | None) -> None:
        self.seal = seal
        self.refused = 0  # payloads refused by this process
        self._unreported = 0
        self._logged_at: float | None = None

    def tag_of(self, payload: str) -> str | None:
        """The tag to drop, or ``None`` (refused, counted and maybe logged)."""
        if self.seal is None:
            tag: str | None = payload
        else:
            tag = self.seal.open_invalidation(payload)
            if tag is None:
                self._refuse(payload, "unsealed")
                return None
        try:
            return check_tag(tag)
        except InvalidArgument:
            self._refuse(payload, "bad_tag")
            return None

    def _refuse(self, payload: str, reason: str) -> None:
        self.refused += 1
        self._unreported += 1
        instruments().invalidations_refused.add(1, {"dataplane.reason": reason})
        now = trio.current_time()
        if self._logged_at is None or now - self._logged_at >= LOG_EVERY:
            shown = payload[:SHOWN] + ("..." if len(payload) > SHOWN else "")
            log.warning(
                "cache: refused %d invalidation(s) since the last warning (%s: %r, %d"
                " characters); a sender outside the plane, or a different"
                " DATAPLANE_NOTIFY_SECRET",
                self._unreported,
                reason,
                shown,
                len(payload),
            )
            self._logged_at = now
            self._unreported = 0
