"""What ``dataplane dev`` gives its children where the fleet's defaults differ: a failure
backoff of 2 s (the fleet keeps the seed's 30 s), unless the user set one."""

from __future__ import annotations

import pytest

from dataplane.core.errors import ConfigError
from dataplane.dev.ports import DevPorts
from dataplane.dev.supervisor import _children
from dataplane.queue import FAIL_BACKOFF_SECONDS, QueueConfig

LOGINS = {p: f"postgresql://{p}@127.0.0.1/q" for p in ("bff", "worker", "capcom", "operator")}
PORTS = DevPorts(bff=18000, capcom=18001, console=18002, postgres=18003, base=18000)


def _worker_backoffs() -> dict[str, str]:
    children = _children(PORTS, LOGINS, "postgresql://ro@127.0.0.1/c", "s" * 32)
    workers = {c.name: c.env for c in children if c.name.startswith("worker-")}
    assert "worker-probe" in workers
    return {name: env["DATAPLANE_FAIL_BACKOFF_SECONDS"] for name, env in workers.items()}


def test_dev_workers_retry_a_failed_attempt_after_2_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATAPLANE_FAIL_BACKOFF_SECONDS", raising=False)
    assert set(_worker_backoffs().values()) == {"2"}
    assert QueueConfig().fail_backoff_seconds == FAIL_BACKOFF_SECONDS == 30  # the fleet's


def test_a_backoff_the_user_set_is_passed_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATAPLANE_FAIL_BACKOFF_SECONDS", "0.5")
    assert set(_worker_backoffs().values()) == {"0.5"}
    monkeypatch.setenv("DATAPLANE_FAIL_BACKOFF_SECONDS", "-1")
    with pytest.raises(ConfigError, match="DATAPLANE_FAIL_BACKOFF_SECONDS"):
        _worker_backoffs()
