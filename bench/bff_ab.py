"""Two BFF codes side by side: CPU per request of each, in slices that alternate.

The host's speed drifts within minutes (a shared 2-core VM), more than a small change
moves a figure, so runs one after the other cannot tell a few per cent. Here two BFFs
serve at once: ``a`` runs the ``dataplane`` package of ``--base`` (another checkout,
e.g. ``git worktree add /tmp/base <commit>``), ``b`` this checkout's. They share one
Postgres (own embedded unless ``MAESTRO_QUEUES_URL``) and one ``dataplane worker`` of
this checkout (``--worker-per-side``: side a gets a worker of its own code, on the dev
tier, for a change both sides of a notify must agree on). Each round loads one, then
the other (the order alternates), with 32 closed-loop clients for ``--seconds``, once
per way:

* ``sse``: POST -> 202, then the stream to ``event: done`` (two HTTP requests);
* ``prefer``: POST with ``Prefer: wait=1`` -> the 200 answer (one).

The CPU of each BFF's serving process (``/proc/<pid>/task/*/schedstat``) is read
around its slices; the figure is its CPU per answered request, over all rounds, and
the ratio b / a. Per round too, so the reader sees how steady the ratio is.

    git worktree add /tmp/base HEAD~1
    python bench/bff_ab.py --base /tmp/base [--rounds 6] [--seconds 2.5]

Prints a table and writes ``bench/results/bff_ab.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import json
import statistics
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from bench.bff_cpu import cpu_seconds
from bench.harness.client import Session, auth_headers, closed_loop, e2e_once, open_sessions
from bench.harness.common import (
    format_table,
    now_iso,
    output_arg,
    run_and_save,
    scratch_server,
    server_facts,
    until_signalled,
)
from bench.harness.procs import children_scope, raise_own_nofile
from bench.harness.stack import (
    BFF_OPTIONS,
    Hypercorn,
    migrate_schema,
    stack_env,
    start_bff,
    start_hypercorn,
    stop_children,
    wait_serving,
)

CLIENTS = 32
WARM_S = 0.5  # each slice's first seconds, not counted
PREFER_WAIT_S = 1
WORKER_ARGV = [sys.executable, "-m", "dataplane", "worker"]
QUEUE_TYPE = "surface-probe"

Way = Callable[[Session, dict[str, str], str], Awaitable[str | None]]


async def sse(session: Session, headers: dict[str, str], value: str) -> str | None:
    return (await e2e_once(session, headers, value)).error


async def prefer(session: Session, headers: dict[str, str], value: str) -> str | None:
    body = json.dumps({"operation": "echo", "params": {"value": value}}).encode()
    hdrs = {**headers, "Prefer": f"wait={PREFER_WAIT_S}"}
    status, raw = await session.request("POST", "/api/probe/q", body, hdrs)
    if status != 200:
        return f"POST answered {status}"
    answer = json.loads(raw)
    if answer.get("result", {}).get("echo") != value:
        return f"unexpected answer {raw[:200]!r}"
    return None


WAYS: dict[str, Way] = {"sse": sse, "prefer": prefer}


def commit_of(tree: Path) -> str:
    out = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    dirty = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def counters(pid: int) -> dict[str, int]:
    """Write syscalls (``/proc/<pid>/io`` ``syscw``: ``write(2)``, not ``send(2)``: the
    lean path's socket writes and the log lines): a count, steadier than CPU time."""
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name == "syscw":
                return {"syscw": int(value)}
    return {"syscw": 0}


async def slice_of(bff: Hypercorn, way: Way, run: str, seconds: float) -> dict[str, Any]:
    """One side's slice: warm, then ``seconds`` of load; its CPU and answers."""
    headers = auth_headers()

    async def one(session: Session, k: int, i: int) -> str | None:
        return await way(session, headers, f"{run}-{k}-{i}")

    async with open_sessions("raw", bff.port, CLIENTS * 2) as new_session:
        await closed_loop(WARM_S, CLIENTS, new_session, one)
        n0, c0 = counters(bff.serving), cpu_seconds(bff.serving)
        lat, errors, elapsed = await closed_loop(seconds, CLIENTS, new_session, one)
        cpu = cpu_seconds(bff.serving) - c0
        n1 = counters(bff.serving)
    counts = {k: n1[k] - n0[k] for k in n0}
    return {"answered": len(lat), "errors": len(errors), "seconds": elapsed, "cpu_s": cpu, **counts}


async def bench(
    server_dsn: str, env: dict[str, str], base: Path, args: argparse.Namespace
) -> dict[str, Any]:
    with children_scope(keep_logs=False) as kids:
        worker = kids.start("worker", WORKER_ARGV, {**env, "SURFACE_QUEUE_TYPE": QUEUE_TYPE})
        workers = [worker]
        a_env = {**env, "PYTHONPATH": str(base)}
        if args.worker_per_side:  # side a: its own tier, served by a worker of its own code
            a_env["DATAPLANE_QUEUE_SUFFIX"] = "-dev"
            workers.append(
                kids.start(
                    "worker-a",
                    WORKER_ARGV,
                    {**a_env, "SURFACE_QUEUE_TYPE": QUEUE_TYPE + "-dev"},
                    cwd=base,
                )
            )
        await wait_serving(workers)
        a = await start_hypercorn(
            kids, "bff-a", "dataplane.app:app", a_env, cwd=base, options=BFF_OPTIONS
        )
        b = await start_bff(kids, "bff-b", env)
        sides = {"a": a, "b": b}
        rounds: dict[str, list[dict[str, Any]]] = {w: [] for w in args.ways}
        for r in range(args.rounds):
            for way in args.ways:
                order = ("a", "b") if r % 2 == 0 else ("b", "a")
                row: dict[str, Any] = {}
                for side in order:
                    run = f"{uuid.uuid4().hex[:8]}-{side}{r}"
                    row[side] = await slice_of(sides[side], WAYS[way], run, args.seconds)
                rounds[way].append(row)
                print(f"round {r + 1} {way}: " + _round_line(row), flush=True)
        codes = await stop_children([b.child, a.child, *workers])
    return {"rounds": rounds, "exit_codes": codes}


def _per_request_ms(s: dict[str, Any]) -> float:
    return s["cpu_s"] * 1000 / max(1, s["answered"])


def _round_line(row: dict[str, Any]) -> str:
    a, b = row["a"], row["b"]
    return (
        f"a {_per_request_ms(a):.3f} ms ({a['answered'] / a['seconds']:.0f}/s), "
        f"b {_per_request_ms(b):.3f} ms ({b['answered'] / b['seconds']:.0f}/s), "
        f"b/a {_per_request_ms(b) / _per_request_ms(a):.3f}"
    )


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for side in ("a", "b"):
        slices = [r[side] for r in rounds]
        answered = sum(s["answered"] for s in slices)
        out[side] = {
            "answered": answered,
            "errors": sum(s["errors"] for s in slices),
            "cpu_ms_per_request": round(sum(s["cpu_s"] for s in slices) * 1000 / answered, 4),
            "rps": round(answered / sum(s["seconds"] for s in slices), 1),
            **{
                f"{k}_per_request": round(sum(s[k] for s in slices) / answered, 3)
                for k in ("syscw",)
            },
        }
    ratios = [_per_request_ms(r["b"]) / _per_request_ms(r["a"]) for r in rounds]
    out["cpu_b_over_a"] = round(out["b"]["cpu_ms_per_request"] / out["a"]["cpu_ms_per_request"], 4)
    out["rps_b_over_a"] = round(out["b"]["rps"] / out["a"]["rps"], 4)
    out["cpu_b_over_a_by_round"] = [round(x, 4) for x in ratios]
    out["cpu_b_over_a_median_of_rounds"] = round(statistics.median(ratios), 4)
    out["rounds_b_cheaper"] = sum(1 for x in ratios if x < 1)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    raise_own_nofile()
    base = args.base.resolve()
    if not (base / "dataplane" / "__init__.py").is_file():
        raise SystemExit(f"--base {base}: no dataplane package there")
    t0 = time.perf_counter()
    with scratch_server("dataplane_bffab") as server:
        settings, machine = server_facts(server)
        env = stack_env(server.dsn)
        migrate_schema(env)
        raw = trio.run(until_signalled, bench, server.dsn, env, base, args)
    here = Path(__file__).resolve().parent.parent
    return {
        "date": now_iso(),
        "machine": machine,
        "config": {
            # commits, not paths: the trees are wherever the runner put them
            "a": {"tree": "the --base worktree", "commit": commit_of(base)},
            "b": {"tree": "this checkout", "commit": commit_of(here)},
            "clients": CLIENTS,
            "seconds_per_slice": args.seconds,
            "warm_s_per_slice": WARM_S,
            "rounds": args.rounds,
            "ways": args.ways,
            "worker_per_side": args.worker_per_side,
            "server": settings,
        },
        "ways": {w: summarize(rs) for w, rs in raw["rounds"].items()},
        "rounds": raw["rounds"],
        "exit_codes": raw["exit_codes"],
        "total_seconds": round(time.perf_counter() - t0, 1),
    }


def print_table(result: dict[str, Any]) -> None:
    c = result["config"]
    print(f"\na = {c['a']['commit']} ({c['a']['tree']}), b = {c['b']['commit']} ({c['b']['tree']})")
    rows = []
    for way, s in result["ways"].items():
        rows.append(
            [
                way,
                f"{s['a']['cpu_ms_per_request']:.3f} / {s['b']['cpu_ms_per_request']:.3f}",
                f"{s['cpu_b_over_a']:.3f} (rounds: median {s['cpu_b_over_a_median_of_rounds']:.3f},"
                f" b cheaper in {s['rounds_b_cheaper']} of {len(s['cpu_b_over_a_by_round'])})",
                f"{s['a']['rps']:.0f} / {s['b']['rps']:.0f}",
                f"{s['a']['errors']} / {s['b']['errors']}",
                f"{s['a']['syscw_per_request']:.2f} / {s['b']['syscw_per_request']:.2f}",
            ]
        )
    headers = [
        "way",
        "BFF CPU ms per answer a / b",
        "b / a",
        "req/s a / b",
        "errors a / b",
        "write(2) per answer a / b",
    ]
    print(format_table(headers, rows))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--base", type=Path, required=True, help="the other checkout (side a)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument(
        "--worker-per-side",
        action="store_true",
        help="side a gets a worker of its own code, on the dev tier (when the two codes'"
        " workers and BFFs must match, e.g. a change of the done notify's format)",
    )
    parser.add_argument("--seconds", type=float, default=2.5, help="measured seconds per slice")
    parser.add_argument(
        "--ways", type=lambda s: s.split(","), default=["sse", "prefer"], help="sse,prefer"
    )
    output_arg(parser, "bff_ab")
    args = parser.parse_args()
    result = run_and_save(lambda: run(args), args.output, print_table, "interrupted")
    return 130 if result is None else 0


if __name__ == "__main__":
    sys.exit(main())
