"""The one result schema of every benchmark: a :class:`Result` written as JSON.

``figures`` holds the numbers a goal is judged by (flat: name -> number), each named
as in :data:`GOALS`; ``detail`` holds whatever the run wants to keep beside them
(distributions, per-round rows, CPU per party). The README's Performance table quotes
``figures`` with the run's ``date`` and its same-run references (``references``:
hello-world rate, the other side of an A/B run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.harness.common import RESULTS_DIR, now_iso
from bench.harness.procs import REPO

#: Every figure a goal holds, with its target (docs/design.md, "Numbers").
GOALS: dict[str, str] = {
    "post_p50_ms": "enqueue -> 202, p50 <= 3 ms",
    "e2e_p50_ms": "POST -> SSE done at idle, p50 <= 10 ms",
    "e2e_p99_ms": "POST -> SSE done at idle, p99 <= 30 ms",
    "prefer_p50_ms": "POST (Prefer: wait) -> answer at idle, p50 <= 4 ms",
    "prefer_p99_ms": "POST (Prefer: wait) -> answer at idle, p99 <= 12 ms",
    "load_prefer_p99_ms": "the same at 32 clients, p99 <= 80 ms, nothing unanswered",
    "load_sse_rps": "answers/s per BFF at 32 clients (SSE) >= 50 % of hello-world / 2",
    "load_prefer_rps": "answers/s per BFF at 32 clients (Prefer) >= 50 % of hello-world / 2",
    "bff_cpu_ms_sse": "BFF CPU per answer at 32 clients, POST + SSE, <= 1.5 ms",
    "bff_cpu_ms_prefer": "BFF CPU per answer at 32 clients, Prefer: wait, <= 1.5 ms",
    "coalesced_executions": "500 identical requests at once -> 1 execution",
    "streams_rss_mb": "5,000 waiting streams: BFF RSS <= 400 MB",
    "streams_deliver_s": "5,000 waiting streams answered <= 5 s after their jobs",
    "tracing_overhead_p50_pct": "tracing overhead at p50, OTLP on vs off, <= 10 %",
    "drain_jobs_per_s": "drain through one dataplane worker at its defaults >= 6,000 jobs/s",
    "drain_worker_us_per_job": "worker CPU per job in that drain <= 100 us",
    "noop_drain_jobs_per_s": "drain, no-op jobs, one process, queue level >= 5,000 jobs/s",
    "wake_p50_ms": "queue wait at idle (enqueue commit -> claim), p50 <= 1.5 ms",
    "wake_p99_ms": "queue wait at idle, p99 <= 8 ms",
    "idle_worker_cpu_pct": "idle worker CPU <= 1 % of a core",
    "herd_extra_claims_per_enqueue": "4 idle workers vs 1: extra claims per enqueue = 0",
}


@dataclass
class Result:
    """One run of one benchmark tool."""

    tool: str  # "load", "drain", ...
    scenarios: list[str]
    figures: dict[str, float | int | None] = field(default_factory=dict)
    references: dict[str, float | int | str | None] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    date: str = field(default_factory=now_iso)
    commit: str = field(default_factory=lambda: commit_of(REPO))
    total_seconds: float = 0.0

    def save(self, path: Path | None = None) -> Path:
        """Written to ``path`` (default ``bench/results/<tool>-<scenarios>.json``, so a
        partial run does not overwrite another's; not committed)."""
        path = path or RESULTS_DIR / f"{'-'.join([self.tool, *self.scenarios])}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.machine.setdefault("loadavg_at_end", [round(x, 2) for x in os.getloadavg()])
        path.write_text(json.dumps(asdict(self), indent=2, default=str) + "\n")
        return path


def interruptible(run: Callable[[], Result]) -> Result | None:
    """``run()``, or None (after a note) on Ctrl-C or SIGTERM: whatever it started has
    been stopped on the way out."""
    interrupted = False
    try:
        return run()
    except* KeyboardInterrupt:  # trio.run may wrap it in a group
        interrupted = True
    if interrupted:
        print("interrupted; every process started was stopped", file=sys.stderr)
    return None


def commit_of(tree: Path) -> str:
    """``tree``'s short commit, ``+changes`` when its tracked files differ from it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True)
        return done.stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return (git("rev-parse", "--short", "HEAD") or "?") + ("+changes" if dirty else "")


def print_figures(result: Result) -> None:
    """The run's figures beside their goals, then its references."""
    print(f"\n{result.tool} {' '.join(result.scenarios)} at {result.commit}, {result.date}")
    for name, figure in result.figures.items():
        print(f"  {name:32} {figure!s:>12}   {GOALS.get(name, '')}")
    for name, reference in result.references.items():
        print(f"  {name:32} {reference!s:>12}   (reference)")
