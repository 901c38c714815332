"""CPU per job of the worker's own pipeline, without the queue database.

Run from the repository root::

    python bench/job_cost.py              # 3 rounds of 20,000 probe.echo jobs
    python bench/job_cost.py --profile    # and the cProfile top 25 (by own time)

What it measures: :class:`~dataplane.worker.executor.JobExecutor` running claimed
``probe.echo`` jobs in batches of 32 (one claim's at concurrency 32), each in its own task
as the claimer starts them: envelope parsing, parameter validation, the dedupe key,
single flight, the handler under its timeout (the deadline keeper running beside), the
result's JSON, the hand-off, the bookkeeping. The completer is replaced by one that
only checkpoints: the statements are what ``bench/worker.py`` measures (there, through
a real worker and Postgres); this isolates the per-job Python that no batch size
amortises. Tracing and metrics are off (no provider), as in ``bench/worker.py``'s drain.

Prints a table and writes ``bench/results/job_cost.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import cProfile
import datetime as dt
import io
import pstats
import statistics
import time
import uuid
from typing import Any

import trio

from bench.harness.common import format_table, machine_info, now_iso, output_arg, run_and_save
from dataplane.envelope import Auth, Envelope
from dataplane.queue import ClaimedJob, Completion
from dataplane.surfaces.probe import SURFACE
from dataplane.worker.cache import TtlCache
from dataplane.worker.config import WorkerConfig
from dataplane.worker.executor import JobExecutor
from dataplane.worker.held import HeldJobs

JOBS = 20_000
BATCH = 32  # one claim's jobs at concurrency 32 (the default until 12-02; kept: figures compare)
ROUNDS = 3
AUTH = Auth("acme", "u1", "a@example.com", False, ("b1",))


class _Committed:
    """The completer's interface, committing nothing (a checkpoint, as a send is)."""

    async def complete(self, completion: Completion) -> None:
        await trio.lowlevel.checkpoint()


def _jobs(count: int) -> list[ClaimedJob]:
    now = dt.datetime.now(dt.UTC)
    out = []
    for i in range(count):
        payload = Envelope("probe", "echo", 1, {"value": f"v{i}"}, AUTH).to_json()
        out.append(
            ClaimedJob(uuid.uuid4(), "surface-probe", "k", payload, 1, 5, now, now, now, now, "w")
        )
    return out


async def _round(count: int, profile: cProfile.Profile | None) -> float:
    """CPU seconds per job over ``count`` jobs, ``BATCH`` at a time."""
    held = HeldJobs()
    executor = JobExecutor(
        WorkerConfig(queue_type="surface-probe"),
        SURFACE,
        None,  # type: ignore[arg-type]  # no queue: nothing fails or is released here
        _Committed(),  # type: ignore[arg-type]
        held,
        client_db=None,
        cache=TtlCache(),
        reporter=None,
        on_finished=lambda: None,
    )
    jobs = _jobs(count)
    started = time.process_time()
    if profile is not None:
        profile.enable()
    async with trio.open_nursery() as services:
        services.start_soon(executor.deadlines.run)  # the handler timeouts, as in a worker
        async with trio.open_nursery() as nursery:
            for k in range(0, count, BATCH):
                for job in jobs[k : k + BATCH]:
                    nursery.start_soon(executor.run, held.add(job))
                await held.wait_idle()
        services.cancel_scope.cancel()
    if profile is not None:
        profile.disable()
    seconds = time.process_time() - started
    if executor.counters.done != count:
        raise RuntimeError(f"{executor.counters.done} of {count} jobs done")
    return seconds / count


def run(jobs: int, rounds: int, profile: bool) -> dict[str, Any]:
    per_job = [trio.run(_round, jobs, None) for _ in range(rounds)]
    result: dict[str, Any] = {
        "date": now_iso(),
        "machine": machine_info("-"),
        "jobs_per_round": jobs,
        "batch": BATCH,
        "rounds_us_per_job": [round(s * 1e6, 1) for s in per_job],
        "min_us_per_job": round(min(per_job) * 1e6, 1),
        "median_us_per_job": round(statistics.median(per_job) * 1e6, 1),
    }
    if profile:
        prof = cProfile.Profile()
        trio.run(_round, jobs, prof)
        out = io.StringIO()
        pstats.Stats(prof, stream=out).strip_dirs().sort_stats("tottime").print_stats(25)
        calls = pstats.Stats(prof).total_calls  # type: ignore[attr-defined]
        result["python_calls_per_job"] = round(calls / jobs, 1)
        result["profile_top25"] = out.getvalue()
    return result


def print_table(result: dict[str, Any]) -> None:
    rows = [
        ["rounds, µs CPU per job", " / ".join(str(r) for r in result["rounds_us_per_job"])],
        ["min / median", f"{result['min_us_per_job']} / {result['median_us_per_job']}"],
    ]
    if "python_calls_per_job" in result:
        rows.append(["Python calls per job (cProfile)", result["python_calls_per_job"]])
    print(format_table(["worker pipeline, probe.echo, no DB", "value"], rows))
    if "profile_top25" in result:
        print(result["profile_top25"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    parser.add_argument("--profile", action="store_true", help="and a cProfile round")
    output_arg(parser, "job_cost")
    args = parser.parse_args(argv)
    jobs, rounds = (2_000, 1) if args.quick else (JOBS, ROUNDS)
    saved = run_and_save(
        lambda: run(jobs, rounds, args.profile), args.output, print_table, "interrupted"
    )
    return 0 if saved is not None else 130


if __name__ == "__main__":
    sys.exit(main())
