"""``dataplane dev``'s own settings: where its defaults for its children differ from the
fleet's, so that a development stack shows a bug at once.

* ``DATAPLANE_FAIL_BACKOFF_SECONDS``: the workers' failure backoff, 2 s here (the fleet
  keeps the seed's 30 s, :data:`dataplane.queue.config.FAIL_BACKOFF_SECONDS`): a
  handler that raises is tried again, and its waiting stream told so, within seconds.
  A value the user set is passed on as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from dataplane.core.settings import setting
from dataplane.queue.config import check_non_negative

DEV_FAIL_BACKOFF_SECONDS = 2.0  # a failed job is claimable again after this, in dev


@dataclass(frozen=True, slots=True)
class DevConfig:
    fail_backoff_seconds: float = setting(
        "DATAPLANE_FAIL_BACKOFF_SECONDS", DEV_FAIL_BACKOFF_SECONDS
    )

    def __post_init__(self) -> None:
        check_non_negative("fail_backoff_seconds", self.fail_backoff_seconds)

    def worker_env(self) -> dict[str, str]:
        """What every worker ``dataplane dev`` starts is given of these."""
        return {"DATAPLANE_FAIL_BACKOFF_SECONDS": f"{self.fail_backoff_seconds:g}"}
