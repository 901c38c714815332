"""Shared test helpers: envelopes, worker processes, waiting."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

from dataplane.envelope import Auth, Envelope
from dataplane.queue import EnqueueResult, QueueClient

STAFF = Auth(client="acme", user_id="1", actor_email="ops@acme.test", staff=True, branches=("*",))
NORTH = Auth(
    client="acme", user_id="2", actor_email="n@acme.test", staff=False, branches=("acme-north",)
)


def envelope(
    surface: str, operation: str, params: Mapping[str, Any], auth: Auth = STAFF, version: int = 1
) -> Envelope:
    return Envelope(surface, operation, version, dict(params), auth)


async def submit(
    queue: QueueClient,
    surface: str,
    operation: str,
    params: Mapping[str, Any],
    auth: Auth = STAFF,
    *,
    suffix: str = "",
    max_dequeues: int | None = None,
) -> EnqueueResult:
    env = envelope(surface, operation, params, auth)
    return await queue.enqueue(
        f"surface-{surface}{suffix}", env.dedupe_key, env.to_json(), max_dequeues=max_dequeues
    )


class WorkerProcess:
    """A real ``dataplane worker`` child process."""

    def __init__(self, env: Mapping[str, str], log_path: str) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dataplane", "worker"],
            env={**os.environ, **env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def wait_ready(self, within: float = 30.0) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if " serving " in self.output():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited early:\n{self.output()}")
            time.sleep(0.05)
        raise AssertionError(f"worker not ready within {within}s:\n{self.output()}")

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, within: float = 60.0) -> int:
        return self.proc.wait(timeout=within)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self._log.close()
