"""Run every benchmark, one after another, and write ``bench/RESULTS.md``.

    python bench/run_all.py [--soak-minutes 10] [--quick] [--only queue,e2e]

Each benchmark runs as its own process (so none shares a CPU with another),
brings up its own embedded Postgres unless ``MAESTRO_QUEUES_URL`` is set, and
writes ``bench/results/<name>.json``; this script then renders every figure of
DESIGN.md's table with its target, the machine, the configuration and the date,
the ratios to the bare Hypercorn + Quart-Trio hello-world rate measured in the
same run, and the scaling figures. A benchmark that fails or times out is
reported as such, and the others still run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
REPORT = BENCH / "RESULTS.md"
LIMIT_S = 600  # one benchmark may take this long at most
#: A benchmark's script where it is not ``<name>.py`` (its JSON is ``<name>.json`` all the same).
SCRIPTS = {"queue": "queue_level.py"}


def script(name: str) -> str:
    return SCRIPTS.get(name, f"{name}.py")


def benchmarks(soak_minutes: float, quick: bool) -> list[tuple[str, list[str]]]:
    q = ["--quick"] if quick else []
    return [
        ("queue", []),
        ("worker", []),
        ("e2e", ["--quick"] if quick else []),
        ("prefer_wait", q),
        ("coalesce", []),
        ("tracing", q),
        ("span_cost", ["--rounds", "1000"] if quick else []),
        ("scaling", q),
        ("soak", ["--minutes", str(1 if quick else soak_minutes)]),
    ]


def run(name: str, args: list[str]) -> dict[str, Any]:
    started = time.monotonic()
    print(f"== {name} {' '.join(args)}", flush=True)
    try:
        done = subprocess.run(
            [sys.executable, str(BENCH / script(name)), *args],
            timeout=LIMIT_S + (60 * 12 if name == "soak" else 0),
            check=False,
        )
        status = "ok" if done.returncode == 0 else f"exit {done.returncode}"
    except subprocess.TimeoutExpired:
        status = "timed out"
    return {"name": name, "status": status, "seconds": round(time.monotonic() - started, 1)}


def load(name: str) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads((RESULTS / f"{name}.json").read_text())
        return data
    except (OSError, ValueError):
        return {}


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        value = f"{value:,.2f}" if value < 100 else f"{value:,.0f}"
    elif isinstance(value, int):
        value = f"{value:,}"
    return f"{value}{unit}"


def _check(value: Any, ok: Callable[[Any], bool]) -> str:
    if value is None:
        return "not measured"
    return "met" if ok(value) else "**missed**"


def _busy(result: dict[str, Any], phase: str) -> str:
    """A note when other processes on the host used much CPU during ``phase``."""
    others = result.get("host_others_cpu_pct", {}).get(phase)
    return f" (host busy: others used {others:.0f} % CPU)" if others and others > 20 else ""


# Figures a change moved, before and after with the same command and host
# (details in the results file named; the rows above are the latest run only).
BEFORE_AFTER = [
    "## Before / after (same command and host)",
    "",
    "Tracing: 13:28 and 15:38 on 2026-12-01; the others alternated within one hour"
    " (evening rows: 18:55-19:25; the four rows before the last three: 21:01-22:12;"
    " the last three: 23:53 on 2026-12-01 to 00:24 on 2026-12-02).",
    "",
    "| figure | before | after | command; details |",
    "|---|---|---|---|",
    "| tracing overhead at p50, traces + metrics: rounds / interleaved | 16.6 / 8.1 % | "
    "9.3 / 3.1 % | `bench/tracing.py`; `results/tracing-profile.md` |",
    "| tracing overhead at p50, traces only: rounds / interleaved | 7.1 / 9.6 % | "
    "-2.0 / 2.7 % | `bench/tracing.py --signals traces` |",
    "| one span, create + end (recorded / live); OTLP encode | 70 / 58 µs; 59 µs | "
    "9.6 / 15 µs; 11.5 µs | `bench/span_cost.py` (SDK vs plane, one run) |",
    "| idle worker CPU | 1.27 / 1.40 % | 0.20 / 0.20 % | "
    "`bench/worker.py --only idle`; `results/worker-drain.md` |",
    "| drain at default settings, median of 3 (µs CPU/job) | 1,494 jobs/s (536) | "
    "1,717 jobs/s (455) | `bench/worker.py --only drain --concurrency default` |",
    "| BFF CPU per e2e at 32 clients, median of 3 | 10.13 ms | 8.40 ms | "
    "`bench/bff_cpu.py`; `results/bff-cpu.md` |",
    "| worker pipeline alone, µs CPU per job (evening) | 186 / 172 | 125 / 119 | "
    "`bench/job_cost.py` (two runs each); `results/worker-drain.md` |",
    "| drain at default settings, median of 6 (µs CPU/job) (evening) | 1,616 jobs/s (487) | "
    "1,919 jobs/s (398) | `bench/worker.py --only drain --concurrency default` |",
    "| herd: extra claims per enqueue, 4 idle workers vs 1 | 5.69 (xact_commit: wrong) | "
    "0.00 (server statement log) | `bench/worker.py --only herd`; same code, new count |",
    "| one idle worker: claims / worker CPU per enqueue (two runs each) | 1.97, 1.92 / "
    "7.30, 6.03 ms | 0.90, 0.90 / 4.87, 4.83 ms | `bench/worker.py --only herd`; "
    "`results/worker-drain.md` |",
    "| one round trip, `Prefer: wait`, idle, p50 / p99 | 51.85 / 111 ms (09:21, others used 162 % "
    "CPU); 13.0 / 18.1 ms (17:59, quiet, code before this evening) | 14.61 / 20.95 ms (19:12, "
    "quiet) | `bench/prefer_wait.py`; the host's speed drifts ~10 % between these |",
    "| `Prefer: wait` at 32 clients: req/s; BFF / Postgres CPU ms per answer (21:01-21:06, "
    "alternated) | 141.0, 128.0; 5.90, 6.73 / 3.29, 3.38 | 164.6, 170.6; 5.08, 4.97 / 2.38, 2.19 | "
    "`bench/prefer_wait.py`; the row check only when the job's own notify went by: "
    "`results/prefer-wait.md` |",
    "| `Prefer: wait` at 32 clients: req/s; p99; BFF / worker / Postgres CPU ms per answer "
    "(21:42-21:46, alternated) | 181.0, 168.6; 300, 310 ms; 4.72, 5.05 / 2.24, 2.32 / 2.24, "
    "2.35 | 237.5, 265.1; 253, 179 ms; 3.94, 3.56 / 0.91, 0.82 / 0.95, 0.82 | "
    "`bench/prefer_wait.py`; batched enqueues and a frozen startup heap: "
    "`results/prefer-wait.md` |",
    "| POST → SSE done at 32 clients (same runs): req/s; BFF CPU ms per answer | 79.3, 84.5; "
    "10.81, 10.49 | 125.0, 136.7; 7.90, 7.23 | `bench/prefer_wait.py` (its SSE way) |",
    "| `bench/e2e.py` at 22:10 (after) and 22:12 (before: `dd6a7bb`, this session's start): "
    "e2e req/s at 32 clients; POST → 202 p50; 5,000 streams delivered | 110.8; 6.66 ms; 5.65 s "
    "| 149.4; 5.79 ms; 5.67 s | the host ran hello-world at 762-798 req/s (1,629 on 2026-11-30): "
    "the POST and stream rows missed today by both codes; `results/e2e-ab/` |",
    "| one claim over a 20,000-row backlog, median ms: 1 client at limit 32 / 4; 20 clients "
    "at limit 32 / 4 | 4.66 / 2.16; 7.76 / 3.69 (planned at every run) | 2.63 / 0.80; 6.09 / "
    "1.68 (planned once per session) | `bench/claim_plan.py` on both trees; "
    "`results/claim-plan.md` |",
    "| a claim planned at idle, then 100,000 rows with no ANALYZE: ms per claim of 32; "
    "sequential scans in 8 claims | 110-209; 100 (first run), 19-30; 16 (bench, loaded host) "
    "| 1.6-4.0; 0, 2.5-3.2; 0 | `bench/claim_plan.py` (its last phase); "
    "`results/claim-plan.md` |",
    "| drain at default settings, median of 4: jobs/s (µs CPU/job; Postgres CPU per job) | "
    "1,762 (418; ≈ 274 µs); again 00:29-00:36: 1,865 | 2,105 (384; ≈ 191 µs); again: 2,152 | "
    "`bench/worker.py --only drain --concurrency default`; the claim as a function "
    "(migration 0008): `results/claim-plan.md` |",
    "| a session planned at idle, then 100,000 rows (2026-12-02 02:15, one run): ms per "
    "enqueue / renew 32 / complete 32 / read 32 finished / owned row; rows read in 10 rounds "
    "| 34.1 / 28.9 / 26.3 / 34.4 / 26.3; 5,001,515 (kept until autovacuum) | 2.27 / 4.11 / "
    "3.79 / 3.31 / 1.21; 3,180 (the BFF's growth watch analyzed the table) | "
    "`bench/plan_growth.py` (its kept and watched cases; planned on the backlog: 3.83 / 5.43 "
    "/ 6.05 / 3.98 / 1.84); `results/plan-growth.md` |",
    "| the BFF's young collections every 700 → 20,000 allocations (2026-12-02 05:40-05:53, "
    "alternated): 5,000 waiting streams delivered; BFF CPU ms per stream delivered; "
    "`Prefer: wait` / SSE req/s at 32 clients | 7.50, 8.46 s; 1.83, 2.06; 231, 298 / 129, 138 "
    "| 2.89, 4.05 s; 0.84, 1.29; 284, 273 / 164, 150 | `bench/e2e.py`, `bench/prefer_wait.py`; "
    "full collections walked every open stream: `results/gc-young.md` |",
    "| drain at default settings (2026-12-02 09:17-09:21, alternated, median of 6): jobs/s "
    "(µs CPU/job) | 4,139 (199) | 5,693 (142); best 6,041 | `bench/worker.py --only drain "
    "--concurrency default`; handler timeouts by one deadline task, concurrency 64: "
    "`results/worker-drain.md` |",
    "| one `SELECT 1` through the bridge, µs CPU, min / median of 3 rounds (2026-12-02 "
    "15:57-16:37, alternated, 3 runs each) | 250 / 257; 294 / 376; 266 / 295 (the crossing "
    "alone 44-62 / 59-68) | 171 / 183; 225 / 250; 191 / 199 (the crossing alone 23-25 / "
    "27-35) | `bench/bridge_floor.py`; the crossing wakes its caller, one Trio waiter per "
    "socket wait: `results/bridge.md` |",
    "| the same commits (16:39-16:47, alternated, 3 runs each): drain at default settings, "
    "median of 6 (µs CPU/job); worker CPU per idle `Prefer` answer; 32-client `Prefer` req/s; "
    "BFF CPU per answer | 4,176 (184); 3.20-3.41 ms; 416-475; 1.98-2.15 ms | 4,186 (180); "
    "3.07-3.08 ms; 445-480; 1.93-2.11 ms | `bench/worker.py`, `bench/prefer_wait.py`; idle "
    "latency within the host's noise: `results/bridge.md` |",
    "| on a CPU per idle `Prefer` request, ms (perf, 2 runs each): BFF / worker / Postgres | "
    "4.86, 3.75 / 3.71, 3.40 / 3.38, 2.52 | 3.39, 4.02 / 2.74, 2.89 / 2.27, 2.46 | "
    "`bench/idle_path.py` (new); the chain's CPU is the idle latency's floor: "
    "`results/bridge.md` |",
    "| a small answer in its done notify, Hypercorn's keep-alive timer without a lock "
    "(2026-12-02 20:20-20:55, alternated): on a CPU per idle `Prefer` request, mean ms, BFF / "
    "Postgres / worker (control); idle latency median | 2.26, 2.38 / 1.53, 1.49 / 1.91, "
    "1.83; 7.73, 7.43 ms | 1.62, 1.53 / 1.42, 1.18 / 1.91, 1.73; 6.89, 5.83 ms | "
    "`bench/idle_path.py --requests 1000`; BFF scheduler passes per idle request 26.7 -> "
    "18.3: `results/notify-carried.md` |",
    "| the same commits: idle `Prefer` p50 ms; 32 clients req/s, p99 ms, BFF / Postgres CPU "
    "ms per answer; drain at default settings, median of 12 | 5.96, 5.49, 6.99; 851, 740, "
    "722; 69, 77, 77; 1.12-1.34 / 0.30-0.37; 7,215 jobs/s | 3.87, 5.51, 5.54; 878, 922, "
    "648; 61, 59, 82; 1.01-1.43 / 0.23-0.31; 6,768 jobs/s | `bench/prefer_wait.py` (3 "
    "runs each), `bench/worker.py --only drain --concurrency default` (6 each); the drain's "
    "completion builds each answer's notify: `results/notify-carried.md` |",
    "| the worker's young collections every 700 -> 20,000 allocations (2026-12-03 "
    "06:55-07:05, alternated): drain at default settings, median of 10; worker CPU per job "
    "| 6,596 jobs/s; 111.5 µs | 7,695 jobs/s; 94.5 µs | `bench/worker.py --only drain "
    "--concurrency default`; collections per 20,000-job drain 250 -> 60 ms "
    "(`gc.callbacks`): `results/worker-drain.md` |",
    "| the on-call task asleep through jobs, trio-asyncio's ready handles run without a "
    "scope each (2026-12-03 06:45-07:10, alternated): worker Python calls per idle job "
    "(cProfile, exact); drain median of 6, jobs/s and µs CPU per job; idle `Prefer` p50 ms "
    "| 2,675; 7,634, 96.5; 5.92, 4.66, 3.10 | 2,282; 8,353, 85; 3.51, 5.50, 3.01 | "
    "`bench/idle_path.py` under cProfile, `bench/worker.py --only drain --concurrency "
    "default`, `bench/prefer_wait.py`: `results/idle-steps.md` |",
    "| the BFF's writes without a scheduler pass, a stream's head and last event corked, an "
    "answer that went by kept by the pump, one task per request (2026-12-03 10:05, both "
    "codes serving at once, 10 rounds): BFF CPU ms per answer at 32 clients, SSE / "
    "`Prefer` | 2.641 / 1.373 | 2.351 / 1.332 (b/a 0.890 / 0.970; medians of rounds 0.844 / "
    "0.943) | `bench/bff_ab.py --base <worktree at 5730478>`: `results/lean-send.md` |",
    "| `bench/e2e.py`, fast hours of the host (08:06 at `5730478`, 10:13 after; not "
    "alternated): e2e req/s at 32 clients (hello-world's); BFF CPU per e2e; POST → SSE "
    "done p50 / p99 | 548 (2,517); 1.78 ms; 3.75 / 6.84 ms | 745 (2,322); 1.32 ms; 3.61 / "
    "6.27 ms | a slow hour's run at 10:11 after: 461 (1,152); 2.10 ms: "
    "`results/lean-send.md` |",
]


def _span_cost(sc: dict[str, Any]) -> str:
    if not sc:
        return "—"
    c, e = sc["create_and_end_us"], sc["encode_us_per_span"]
    return (
        f"{_fmt(c['lean']['recorded_us'])} / {_fmt(c['lean']['live_us'])} µs "
        f"({_fmt(c['sdk']['recorded_us'])} / {_fmt(c['sdk']['live_us'])}); encode "
        f"{_fmt(e['lean spans']['plane_encoder_us'])} µs ({_fmt(e['sdk spans']['sdk_encoder_us'])})"
    )


def _newest_herd(full: dict[str, Any], herd_only: dict[str, Any]) -> dict[str, Any]:
    """The herd phase of the newer of a full ``bench/worker.py`` run and an
    ``--only herd`` one (``worker-herd.json``)."""
    runs = [r for r in (full, herd_only) if r.get("herd")]
    if not runs:
        return {}
    herd: dict[str, Any] = max(runs, key=lambda r: str(r.get("date", "")))["herd"]
    return herd


def render(runs: list[dict[str, Any]]) -> str:
    r = {
        name: load(name)
        for name in ("queue", "worker", "e2e", "coalesce", "tracing", "scaling", "soak")
    }
    sc = load("span_cost")
    pw = load("prefer_wait")
    if pw:
        r["prefer_wait"] = pw
    q, w, e, c, t, s, soak = (
        r["queue"],
        r["worker"],
        r["e2e"],
        r["coalesce"],
        r["tracing"],
        r["scaling"],
        r["soak"],
    )
    hello = e.get("hello_rps") or s.get("hello_rps")
    herd_run = load("worker-herd")
    herd = _newest_herd(w, herd_run)
    machine = next((d["machine"] for d in r.values() if d.get("machine")), {})
    e_load = e.get("load", {})
    sse_bff = e_load.get("cpu_ms_per_e2e", {}).get("bff")
    hello_cpu = e.get("hello", {}).get("cpu_ms_per_request", {}).get("hello")
    pw_load = pw.get("load", {}).get("prefer", {}) if pw else {}
    prefer_bff = pw_load.get("cpu_ms_per_answer", {}).get("bff")
    e2e_rps, prefer_rps = e.get("e2e_rps"), pw.get("load_prefer_rps") if pw else None
    sse_share = e2e_rps / (hello / 2) if e2e_rps and hello else None
    prefer_share = prefer_rps / (hello / 2) if prefer_rps and hello else None

    def in_hellos(ms: float | None) -> str:
        return f" (= {ms / hello_cpu:.1f} hello-world requests)" if ms and hello_cpu else ""

    rows: list[tuple[str, str, str, str, str]] = [
        (
            "BFF CPU per answer at 32 clients, `Prefer: wait` (one request; the default client"
            " path), in hello-world requests of `bench/e2e.py`'s run",
            "≤ 1.5 ms",
            _fmt(prefer_bff, " ms") + in_hellos(prefer_bff),
            _check(prefer_bff, lambda v: v <= 1.5),
            "prefer_wait",
        ),
        (
            "BFF CPU per answer at 32 clients, POST + SSE stream (two requests), in hello-world"
            f" requests of the same run ({_fmt(hello_cpu, ' ms')} CPU each)",
            "≤ 1.5 ms",
            _fmt(sse_bff, " ms") + in_hellos(sse_bff),
            _check(sse_bff, lambda v: v <= 1.5),
            "e2e",
        ),
        (
            "answers per second per BFF process at 32 clients, against hello-world ÷ 2:"
            " POST + SSE (same run) / `Prefer: wait` (`bench/prefer_wait.py`'s run)",
            "≥ 50 %",
            (
                f"{_fmt(e.get('e2e_rps'))} / {_fmt(pw.get('load_prefer_rps'))} answers/s = "
                f"{sse_share:.0%} / {prefer_share:.0%} of {_fmt(hello / 2)}"
                if sse_share is not None and prefer_share is not None and hello
                else "—"
            ),
            _check(sse_share, lambda v: v >= 0.5),
            "e2e",
        ),
        (
            "drain through one `dataplane worker` at its default settings (`probe.echo`):"
            " jobs/s; worker CPU per job",
            "≥ 6,000 jobs/s; ≤ 100 µs",
            f"{_fmt(w.get('drain_default_jobs_per_s'), ' jobs/s')}; "
            f"{_fmt(w.get('drain_default_cpu_us_per_job'), ' µs')}",
            _check(
                (w.get("drain_default_jobs_per_s"), w.get("drain_default_cpu_us_per_job"))
                if w.get("drain_default_jobs_per_s")
                else None,
                lambda v: v[0] >= 6000 and v[1] <= 100,
            ),
            "worker",
        ),
        (
            "enqueue → 202 (POST), p50",
            "≤ 3 ms",
            _fmt(e.get("post_p50_ms"), " ms"),
            _check(e.get("post_p50_ms"), lambda v: v <= 3),
            "e2e",
        ),
        (
            "queue wait at idle (enqueue commit → claim), p50 / p99",
            "≤ 1.5 / ≤ 8 ms",
            f"{_fmt(q.get('wake_p50_ms'))} / {_fmt(q.get('wake_p99_ms'))} ms",
            _check(
                (q.get("wake_p50_ms"), q.get("wake_p99_ms")) if q else None,
                lambda v: v[0] <= 1.5 and v[1] <= 8,
            ),
            "queue",
        ),
        (
            "drain, no-op jobs, one process, queue level",
            "≥ 5,000 jobs/s",
            _fmt(q.get("drain_jobs_per_s"), " jobs/s"),
            _check(q.get("drain_jobs_per_s"), lambda v: v >= 5000),
            "queue",
        ),
        (
            "drain through a real `dataplane worker` (`probe.echo`)",
            "≥ 3,500 jobs/s",
            _fmt(w.get("drain_jobs_per_s"), " jobs/s"),
            _check(w.get("drain_jobs_per_s"), lambda v: v >= 3500),
            "worker",
        ),
        (
            "end to end, `probe.echo`, POST → SSE done, p50 / p99",
            "≤ 10 / ≤ 30 ms",
            f"{_fmt(e.get('e2e_p50_ms'))} / {_fmt(e.get('e2e_p99_ms'))} ms",
            _check(
                (e.get("e2e_p50_ms"), e.get("e2e_p99_ms")) if e else None,
                lambda v: v[0] <= 10 and v[1] <= 30,
            ),
            "e2e",
        ),
        (
            "one round trip: POST (`Prefer: wait`) → answer, `probe.echo`, p50 / p99"
            + (
                f" (POST → SSE done in the same run: {_fmt(pw.get('sse_p50_ms'))} / "
                f"{_fmt(pw.get('sse_p99_ms'))} ms)"
                if pw
                else ""
            ),
            "≤ 4 / ≤ 12 ms",
            f"{_fmt(pw.get('prefer_p50_ms'))} / {_fmt(pw.get('prefer_p99_ms'))} ms"
            + _busy(pw, "idle"),
            _check(
                (pw.get("prefer_p50_ms"), pw.get("prefer_p99_ms")) if pw else None,
                lambda v: v[0] <= 4 and v[1] <= 12,
            ),
            "prefer_wait",
        ),
        (
            "32 clients, 1 BFF + 1 worker, POST (`Prefer: wait`) → answer, p99"
            + (f" (POST → SSE done: {_fmt(pw.get('load_sse_p99_ms'))} ms)" if pw else ""),
            "≤ 80 ms, nothing unanswered",
            (
                f"{_fmt(pw.get('load_prefer_p99_ms'))} ms, {_fmt(pw.get('load_prefer_rps'))} "
                f"req/s, {_fmt(pw.get('load_prefer_unanswered'))} unanswered"
                + _busy(pw, "load_prefer")
                if pw
                else "—"
            ),
            _check(
                (pw.get("load_prefer_p99_ms"), pw.get("load_prefer_unanswered")) if pw else None,
                lambda v: v[0] <= 80 and v[1] == 0,
            ),
            "prefer_wait",
        ),
        (
            "identical concurrent requests",
            "500 at once → 1 execution, 500 answered",
            (
                f"{c.get('requests')} at once → {c.get('executions')} execution(s), "
                f"{c.get('done_answers')} answered"
                if c
                else "—"
            ),
            _check(c.get("met") if c else None, bool),
            "coalesce",
        ),
        (
            "open SSE streams per BFF process",
            "5,000 waiting, RSS ≤ 400 MB, answered ≤ 5 s after their jobs",
            (
                f"{_fmt(e.get('sse_streams'))} waiting, RSS {_fmt(e.get('sse_rss_mb'))} MB, "
                f"answered in {_fmt(e.get('sse_deliver_s'))} s"
                if e
                else "—"
            ),
            _check(
                (e.get("sse_streams"), e.get("sse_rss_mb"), e.get("sse_deliver_s")) if e else None,
                lambda v: v[0] >= 5000 and v[1] <= 400 and v[2] <= 5,
            ),
            "e2e",
        ),
        (
            "no thundering herd: extra claim statements per enqueue, 4 idle workers vs 1;"
            " their extra CPU",
            "0 (or < 5 % CPU)",
            (
                f"{_fmt(herd.get('extra_claims_per_enqueue'))} "
                f"({herd['one_worker'].get('claims_counted_from', 'xact_commit')}); "
                f"CPU {_fmt(herd.get('extra_cpu_percent'), ' %')}; the 3 others' wake-ups "
                f"{_fmt(herd.get('herd_wakeups_per_enqueue'))} per enqueue"
                if herd
                else "—"
            ),
            _check(
                (herd.get("extra_claims_per_enqueue"), herd.get("extra_cpu_percent"))
                if herd
                else None,
                lambda v: v[0] <= 0.05 or v[1] < 5,
            ),
            "worker",
        ),
        (
            "idle worker CPU",
            "≤ 1 % of a core",
            _fmt(w.get("idle_cpu_percent"), " %"),
            _check(w.get("idle_cpu_percent"), lambda v: v <= 1),
            "worker",
        ),
        (
            "tracing overhead at p50 (OTLP traces + metrics vs none)",
            "≤ 10 %",
            _fmt(t.get("tracing_overhead_p50_pct"), " %"),
            _check(t.get("tracing_overhead_p50_pct"), lambda v: v <= 10),
            "tracing",
        ),
        (
            "tracing overhead at p50, interleaved (both stacks up, requests alternating)",
            "≤ 10 %",
            _fmt(t.get("interleaved_overhead_p50_pct"), " %"),
            _check(t.get("interleaved_overhead_p50_pct"), lambda v: v <= 10),
            "tracing",
        ),
        (
            "one span, create + end (recorded / live) and OTLP encode: plane (SDK)",
            "",
            _span_cost(sc),
            "—",
            "span_cost",
        ),
    ]
    lines = [
        "# Benchmark results",
        "",
        "Written by `python bench/run_all.py`; every figure comes from the JSON the named",
        "benchmark last wrote to `bench/results/` (each carries its own date and the host load",
        "around its run; the table at the bottom lists what this invocation re-ran). The",
        "machines are shared 2-core VMs, so figures move between runs.",
        "",
        "- Dates: "
        + ", ".join(f"{name} {d['date'][:16]}" for name, d in r.items() if d.get("date"))
        + (f", worker-herd {herd_run['date'][:16]}" if herd_run.get("date") else ""),
        f"- Machine: {machine.get('nproc', '?')} cores, {machine.get('cpu_model', '?')}, "
        f"{machine.get('memory', '?')}, Python {machine.get('python', '?')}, "
        f"PostgreSQL {machine.get('postgres', '?')}",
        "- Configuration: each benchmark's own embedded Postgres with durable defaults "
        "(fsync on, synchronous_commit on) unless MAESTRO_QUEUES_URL was set; one BFF "
        "process and one worker process unless a row says otherwise.",
        "",
        "| figure | target | measured | verdict | source |",
        "|---|---|---|---|---|",
        *(f"| {a} | {b} | {c_} | {d} | `bench/{script(src)}` |" for a, b, c_, d, src in rows),
        "",
        "## Against the bare server",
        "",
        f"Hello-world rate of the same Hypercorn + Quart-Trio on this machine, same run: "
        f"{_fmt(hello, ' req/s')}.",
        "",
    ]
    if hello:
        e2e_rps = e.get("e2e_rps")
        lines += [
            f"- end-to-end (POST + SSE done, 32 clients): {_fmt(e2e_rps, ' req/s')}"
            + (f" = {e2e_rps / hello:.1%} of hello-world" if e2e_rps else ""),
        ]
        # The scaling run measured its own hello-world rate: its points are divided by it.
        s_hello = s.get("hello_rps") or hello
        if s.get("scaling") and s_hello != hello:
            lines.append(
                f"- scaling run ({str(s.get('date', ''))[:16]}), against its own hello-world "
                f"rate of {_fmt(s_hello, ' req/s')}:"
            )
        for point in s.get("scaling", []):
            rps = point.get("rps")
            if rps:
                label = (
                    point.get("label") or f"{point.get('bffs')} BFF / {point.get('workers')} worker"
                )
                lines.append(
                    f"- {label}: {_fmt(rps, ' req/s')} = {rps / s_hello:.1%} of hello-world"
                )
        lines.append("")
    if s.get("scaling"):
        lines += [
            "## Scaling (end to end, 32 clients)",
            "",
            "| BFFs | workers | req/s | p50 ms |",
            "|---|---|---|---|",
            *(
                f"| {p.get('bffs')} | {p.get('workers')} | {_fmt(p.get('rps'))} | "
                f"{_fmt(p.get('p50_ms'))} |"
                for p in s["scaling"]
            ),
            "",
            "The machine has 2 cores: past two processes the figures measure contention.",
            "",
        ]
    if w.get("operations"):
        lines += [
            "## Execution time per demo operation (seeded data)",
            "",
            "| operation | p50 ms | p99 ms |",
            "|---|---|---|",
            *(
                f"| {op} | {_fmt(v.get('p50_ms'))} | {_fmt(v.get('p99_ms'))} |"
                for op, v in w["operations"].items()
            ),
            "",
        ]
    if soak:
        metrics = soak.get("metrics", {})
        lines += [
            "## Soak",
            "",
            f"{_fmt(soak.get('total_seconds'), ' s')} of mixed load over every demo surface: "
            f"{_fmt(soak.get('requests'))} requests ({_fmt(soak.get('requests_per_s'))}/s), "
            f"{soak.get('unexpected_errors')} unexpected errors, children died: "
            f"{soak.get('children_died') or 'none'}. Flagged: {soak.get('flagged') or 'nothing'}.",
            "",
            "| metric | max | growth, last third vs first | verdict |",
            "|---|---|---|---|",
            *(
                f"| {name} | {_fmt(m.get('max'))} | {_fmt(m.get('growth_pct'), ' %')} | "
                f"{m.get('verdict')} |"
                for name, m in metrics.items()
            ),
            "",
        ]
    lines += [*BEFORE_AFTER, ""]
    lines += [
        "## Runs",
        "",
        "| benchmark | status | seconds |",
        "|---|---|---|",
        *(f"| {x['name']} | {x['status']} | {x['seconds']} |" for x in runs),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--soak-minutes", type=float, default=10)
    parser.add_argument("--quick", action="store_true", help="shortened runs (smoke test)")
    parser.add_argument("--only", help="comma-separated benchmark names")
    parser.add_argument("--render-only", action="store_true", help="rewrite RESULTS.md only")
    args = parser.parse_args(argv)
    runs: list[dict[str, Any]] = []
    if not args.render_only:
        wanted = set(args.only.split(",")) if args.only else None
        for name, extra in benchmarks(args.soak_minutes, args.quick):
            if wanted is None or name in wanted:
                runs.append(run(name, extra))
    REPORT.write_text(render(runs))
    print(f"wrote {REPORT}")
    return 0 if all(x["status"] == "ok" for x in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
