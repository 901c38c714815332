"""One leader of the fleet's maintenance: the services of this room run where it leads.

Every worker runs a :class:`Leader` (``dataplane maintenance`` does not: its passes
contend one at a time, :mod:`dataplane.maintenance.schedule`). It takes the
``maintenance`` election (a row only the plane's roles may write,
:mod:`dataplane.maintenance.elections`) for a term of ``term`` seconds and renews it
every ``renew`` seconds; while it holds it, it runs its services (the pass schedule,
the depth sampler, the growth watch) in a nursery of its own, and when it cannot
renew (another holder took a lapsed term, or the database went away) it cancels them
at once and tries again at the next turn. So the fleet runs each service once,
whatever its size; a leader that stops steps down (the next taker need not wait), and
one that crashes hands over when its term lapses.

A renewal never shortens a longer term the holder took meanwhile: a maintenance pass
holds the election for its own bound (:func:`~dataplane.maintenance.retention.reap_once`)
and gives the term back when it ends.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

import trio

from dataplane.core.errors import DatabaseError, InvalidArgument
from dataplane.db import Database
from dataplane.maintenance.elections import MAINTENANCE, new_holder, release, take

log = logging.getLogger(__name__)

LEADER_TERM = 15.0  # seconds a crashed leader holds the election before it lapses
LEADER_RENEW = 5.0  # seconds between renewals (and between the others' tries)

Service = Callable[[], Awaitable[None]]


class Leader:
    def __init__(
        self,
        db: Database,
        services: Sequence[Service] = (),
        *,
        name: str = MAINTENANCE,
        term: float = LEADER_TERM,
        renew: float = LEADER_RENEW,
    ) -> None:
        if not 0 < renew < term:
            raise InvalidArgument(f"a leader renews within its term (renew {renew}, term {term})")
        self.db = db
        self.services = list(services)
        self.name = name
        self.term = term
        self.renew = renew
        self.holder = new_holder()
        self.leading = False
        self.terms = 0  # times this process was elected

    def add(self, service: Service) -> None:
        """Run ``service`` while leading (cancelled when the leader steps down)."""
        self.services.append(service)

    async def run(self) -> None:
        """Contend for the election until cancelled; lead while elected."""
        try:
            while True:
                if await self._take():
                    await self._lead()
                await trio.sleep(self.renew)
        finally:
            if self.leading:
                self.leading = False
                with trio.move_on_after(2) as cleanup:
                    cleanup.shield = True
                    try:
                        await release(self.db, self.name, self.holder)
                    except DatabaseError:
                        pass  # the term lapses by itself
                log.info("%s: no longer leading (stopping)", self.name)

    async def _take(self) -> bool:
        try:
            return await take(self.db, self.name, self.holder, self.term)
        except DatabaseError as exc:
            log.warning("%s: election not reached (%s); again in %gs", self.name, exc, self.renew)
            return False

    async def _lead(self) -> None:
        self.leading = True
        self.terms += 1
        log.info("%s: elected (%s), %d service(s)", self.name, self.holder, len(self.services))
        async with trio.open_nursery() as nursery:
            for service in self.services:
                nursery.start_soon(service)
            while True:
                await trio.sleep(self.renew)
                if not await self._take():
                    break
            nursery.cancel_scope.cancel()
        self.leading = False
        log.info("%s: no longer leading (the term could not be renewed)", self.name)
