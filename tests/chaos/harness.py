"""Chaos harness: a whole stack of real processes and a load that checks the promise.

Every scenario drives real requests through real BFF processes and real workers,
produces a fault for real, and then checks the three promises: no job is lost
(every accepted job ends ``done``), no job completes twice (a fenced completion
is the only way to ``done``; the capcom reports say which worker ran each
execution to the end), and every waiting stream is answered (``done``, or
``TIMEOUT`` followed by a successful poll).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trio

from dataplane.dev.embedded import free_port
from tests.helpers import JWT_SECRET, BffProcess, WorkerProcess, bearer, read_sse, token

POST_RETRIES = 60  # a browser retrying a 503 / refused connection, bounded
RETRY_DELAY = 0.25  # seconds between those retries
POLL_LIMIT = 120.0  # seconds a client polls after a TIMEOUT before calling the job lost


@dataclass
class Outcome:
    job_id: str | None = None
    answered: str | None = None  # "done" | "timeout-then-poll" | None (not answered)
    result: Any = None
    post_attempts: int = 0


@dataclass
class Stack:
    """The processes of one scenario (stopped by :meth:`stop`)."""

    tmp_path: Path
    queue_dsn: str
    env: dict[str, str] = field(default_factory=dict)
    bffs: list[BffProcess] = field(default_factory=list)
    workers: list[WorkerProcess] = field(default_factory=list)

    def base_env(self) -> dict[str, str]:
        return {
            "MAESTRO_QUEUES_URL": self.queue_dsn,
            "DATAPLANE_JWT_SECRET": JWT_SECRET,
            "DATAPLANE_PROBE": "1",
            "DATAPLANE_SWEEP_SECONDS": "1",
            "MAESTRO_LEASE_SECONDS": "3",
            "MAESTRO_RENEW_SECONDS": "1",
            "DATAPLANE_FAIL_BACKOFF_SECONDS": "0.5",
            "DATAPLANE_IDLE_MS": "500",
            **self.env,
        }

    async def add_bff(self, **env: str) -> BffProcess:
        n = len(self.bffs)
        bff = BffProcess(
            {**self.base_env(), **env},
            str(self.tmp_path / f"bff-{n}.log"),
            port=free_port(),
            args=("-k", "trio"),
        )
        self.bffs.append(bff)
        await bff.wait_ready()
        return bff

    async def add_worker(self, queue_type: str = "surface-probe", **env: str) -> WorkerProcess:
        n = len(self.workers)
        worker = WorkerProcess(
            {**self.base_env(), "SURFACE_QUEUE_TYPE": queue_type, **env},
            str(self.tmp_path / f"worker-{n}.log"),
        )
        self.workers.append(worker)
        await worker.wait_ready()
        return worker

    def stop(self) -> None:
        for proc in [*self.workers, *self.bffs]:
            proc.stop()


async def one_request(
    http: httpx.AsyncClient, bases: Sequence[str], params: dict[str, Any], outcome: Outcome
) -> None:
    """POST (retrying 503s and refused connections), stream, and poll after a TIMEOUT."""
    tok = bearer(token(staff=True))
    body: dict[str, Any] | None = None
    base = bases[0]
    for attempt in range(POST_RETRIES):
        outcome.post_attempts = attempt + 1
        base = random.choice(bases)
        try:
            resp = await http.post(
                f"{base}/api/probe/q", json={"operation": "sleep", "params": params}, headers=tok
            )
        except httpx.TransportError:
            await trio.sleep(RETRY_DELAY)
            continue
        if resp.status_code == 202:
            body = resp.json()
            break
        assert resp.status_code == 503, resp.text
        await trio.sleep(RETRY_DELAY)
    assert body is not None, "the POST never got through"
    outcome.job_id = body["jobId"]
    for _ in range(POST_RETRIES):
        base = random.choice(bases) if _ else base  # any BFF can serve the stream token
        try:
            status, _, events = await read_sse(http, base + body["streamUrl"])
        except httpx.TransportError:
            status, events = 0, []
        if status == 200 and events and events[-1].name == "done":
            outcome.answered, outcome.result = "done", events[-1].json
            return
        if status == 200 and events and events[-1].get("data") and "TIMEOUT" in events[-1]["data"]:
            break
        await trio.sleep(RETRY_DELAY)  # a stream cut by the fault: reconnect, as EventSource does
    with trio.fail_after(POLL_LIMIT):
        while True:
            base = random.choice(bases)
            try:
                resp = await http.get(base + body["pollUrl"])
                if resp.status_code == 200:
                    outcome.answered, outcome.result = "timeout-then-poll", resp.json()
                    return
            except httpx.TransportError:
                pass
            await trio.sleep(RETRY_DELAY)


async def drive(
    bases: Sequence[str], n: int, *, concurrency: int = 16, sleep_ms: tuple[int, int] = (50, 300)
) -> list[Outcome]:
    """``n`` distinct requests through random BFFs, ``concurrency`` at a time."""
    outcomes = [Outcome() for _ in range(n)]
    limiter = trio.CapacityLimiter(concurrency)
    async with httpx.AsyncClient(timeout=httpx.Timeout(30, connect=5)) as http:

        async def run(i: int) -> None:
            async with limiter:
                params = {"ms": random.randint(*sleep_ms)}
                await one_request(http, bases, params, outcomes[i])

        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(run, i)
    return outcomes


def check_promises(outcomes: Sequence[Outcome], rows: dict[str, dict[str, Any]]) -> None:
    """No job lost, none completed twice, every stream answered."""
    unanswered = [o for o in outcomes if o.answered is None]
    assert not unanswered, f"{len(unanswered)} request(s) never answered"
    for o in outcomes:
        assert o.job_id in rows, f"job {o.job_id} vanished"
        row = rows[o.job_id]
        assert row["status"] == "done", (o.job_id, row["status"], row["last_error"])
        assert o.result["status"] == "done" and "slept_ms" in o.result["result"]
