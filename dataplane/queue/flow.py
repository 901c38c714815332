"""Flow control: the bounds a claim enforces on an operation's running attempts.

A :class:`FlowBound` says how many attempts of one operation may run at once across
every worker of a queue type (``max``) and of one client's (``per_client``); either
may be None (no bound of that kind). The worker passes the bounds of its surface's
operations to every claim (:meth:`QueueClient.claim_batch`), as the jsonb
``maestro_claim`` reads (migration 0015): the claim counts the operation's running
rows (``in_progress`` with an unexpired lease) and leaves the rows over a bound
pending, reporting each operation it deferred. No bounds: the claim of 0008, unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dataplane.core.errors import InvalidArgument
from dataplane.queue.records import to_json


@dataclass(frozen=True, slots=True)
class FlowBound:
    max: int | None = None  # attempts of the operation running at once, fleet-wide
    per_client: int | None = None  # of one client's

    def __post_init__(self) -> None:
        for name in ("max", "per_client"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 1
            ):
                raise InvalidArgument(f"flow bound {name} must be an integer >= 1 or None")

    @property
    def bounded(self) -> bool:
        return self.max is not None or self.per_client is not None


FlowBounds = Mapping[str, FlowBound]  # operation name -> its bound


def bounds_json(bounds: FlowBounds | None) -> str | None:
    """``maestro_claim``'s ``p_bounds``: the bounded operations only; None when none is."""
    if not bounds:
        return None
    out = {}
    for operation, bound in sorted(bounds.items()):
        if not isinstance(operation, str) or not operation:
            raise InvalidArgument("a flow bound's operation must be a non-empty string")
        if bound.bounded:
            out[operation] = {"max": bound.max, "per_client": bound.per_client}
    return to_json(out, what="flow bounds") if out else None
