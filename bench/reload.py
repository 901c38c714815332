"""The edit loop of ``dataplane dev --reload``: a saved file -> the new code served.

Run from the repository root::

    python bench/reload.py                # 10 rounds
    python bench/reload.py --rounds 5

What each round edits and times, and how: docs/perf/benchmarks.md. Prints median,
p90 and max of each path and writes ``bench/results/reload.json`` (not committed).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import psutil
import trio

from bench.harness.common import (
    format_table,
    machine_info,
    percentile,
    server_settings,
    until_signalled,
)
from bench.harness.result import Result, interruptible, print_figures
from dataplane.dev.embedded import free_port

ROOT = Path(__file__).resolve().parents[1]
POLL = 0.02  # seconds between two asks
REQUEST_TIMEOUT = 2.0  # seconds one ask may take (Prefer: wait=1 holds it 1 s at most)
ROUND_WITHIN = 30.0  # seconds an edit may take to be served
STARTUP_WITHIN = 180.0  # seconds the dev may take to be up and watching
SETTLE = 1.0  # seconds of quiet after the dev's reload work is done (also: each write
# lands in a later second than the last, so a stale .pyc is never taken for the source)
STOP_WITHIN = 20.0  # seconds the dev may take to exit after SIGINT
PROMISE_S = 2.0  # the promise: saved -> serving the new code in under 2 s

SOURCE = """
from dataplane.surfaces.manifest import Operation, surface

async def which(ctx):
    return {{"v": {v}}}

SURFACE = surface(
    Operation(
        "which",
        1,
        {{"type": "object", "properties": {properties}, "additionalProperties": False}},
        which,
        result={{"type": "object", "properties": {{"v": {{"type": "integer"}}}}}},
    ),
    id="reloadme",
    needs_client_db=False,
)
"""


def write(package: Path, v: int, param: str | None) -> float:
    """The package's code answering ``v`` with parameter ``param``; when it was written."""
    properties = json.dumps({param: {"type": "integer"}} if param else {})
    text = textwrap.dedent(SOURCE.format(v=v, properties=properties))
    written = time.perf_counter()
    (package / "__init__.py").write_text(text)
    return written


def pids(root: int) -> dict[str, int]:
    """The dev's children by role (bff, worker-<surface>), and fingerprint interpreters."""
    out: dict[str, int] = {}
    for proc in psutil.Process(root).children(recursive=True):
        try:
            cmd = " ".join(proc.cmdline())
            if "dataplane bff" in cmd:
                out["bff"] = proc.pid
            elif "dataplane worker" in cmd:
                queue = proc.environ()["SURFACE_QUEUE_TYPE"].removeprefix("surface-")
                out["worker-" + queue] = proc.pid
            elif "openapi_document" in cmd:
                out["fingerprint"] = proc.pid
        except (psutil.NoSuchProcess, psutil.AccessDenied, KeyError):
            continue
    return out


class Dev:
    """The running ``dataplane dev --reload`` and a client of its BFF."""

    def __init__(self, proc: trio.Process, output: Path, http: httpx.AsyncClient, token: str):
        self.proc, self.output, self.http, self.token = proc, output, http, token

    def tail(self, lines: int = 30) -> str:
        return "\n".join(read(self.output).splitlines()[-lines:])

    async def answers(self, params: dict[str, int], wanted: dict[str, int]) -> bool:
        return bool(await self.answer(params) == wanted)

    async def answer(self, params: dict[str, int]) -> Any:
        """The query's result (None: refused, not answered in time, the BFF restarting)."""
        try:
            resp = await self.http.post(
                "/api/reloadme/q",
                json={"operation": "which", "params": params},
                headers={"Authorization": f"Bearer {self.token}", "Prefer": "wait=1"},
            )
        except httpx.HTTPError:
            return None
        return resp.json().get("result") if resp.status_code == 200 else None

    async def declares(self, param: str) -> bool:
        """Whether /openapi.json declares ``param`` for the query."""
        try:
            resp = await self.http.get("/openapi.json")
        except httpx.HTTPError:
            return False
        paths = resp.json().get("paths", {}) if resp.status_code == 200 else {}
        return f'"{param}": {{"type": "integer"}}' in json.dumps(paths.get("/api/reloadme/q", ""))

    async def settle(self, since_write: float) -> None:
        """Until no fingerprint interpreter runs, then :data:`SETTLE` seconds more."""
        with trio.fail_after(ROUND_WITHIN):
            while "fingerprint" in pids(self.proc.pid):  # noqa: ASYNC110 - a process to watch
                await trio.sleep(0.05)
        await trio.sleep(max(SETTLE, 1.1 - (time.perf_counter() - since_write)))


async def first(probe: Callable[[], Awaitable[bool]]) -> float:
    """When ``probe()`` first said yes (asked again :data:`POLL` after each no)."""
    while not await probe():  # noqa: ASYNC110 - a process to ask, not an event
        await trio.sleep(POLL)
    return time.perf_counter()


async def served(
    dev: Dev, what: str, n: int, probes: Mapping[str, Callable[[], Awaitable[bool]]], written: float
) -> dict[str, float]:
    """Seconds from ``written`` to each probe's first yes (all polled at once)."""
    seen: dict[str, float] = {}

    async def one(name: str, probe: Callable[[], Awaitable[bool]]) -> None:
        seen[name] = await first(probe) - written

    with trio.move_on_after(ROUND_WITHIN):
        async with trio.open_nursery() as nursery:
            for name, probe in probes.items():
                nursery.start_soon(one, name, probe)
    missing = sorted(probes.keys() - seen.keys())
    if missing:
        raise RuntimeError(
            f"round {n}, {what}: {', '.join(missing)} not seen within {ROUND_WITHIN:g} s;"
            f" the dev's output ends:\n{dev.tail()}"
        )
    return seen


async def start_dev(tmp: Path, port: int) -> trio.Process:
    """``dataplane dev --reload`` started in ``tmp``, its output to ``tmp/dev.out``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAESTRO_", "DATAPLANE_"))}
    path = [str(tmp / "src"), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env |= {"DATAPLANE_SURFACES": "reloadme:SURFACE", "PYTHONPATH": os.pathsep.join(path)}
    output = tmp / "dev.out"
    with output.open("wb") as log:
        proc = await trio.lowlevel.open_process(
            [
                sys.executable,
                "-m",
                "dataplane",
                "dev",
                "--reload",
                "--port",
                str(port),
                "--dir",
                str(tmp / ".dataplane"),
            ],
            cwd=tmp,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return proc


def read(path: Path) -> str:
    return path.read_text(errors="replace")


async def until_in_output(proc: trio.Process, output: Path, text: str, within: float) -> str:
    with trio.fail_after(within):
        while text not in (now := read(output)):
            if proc.poll() is not None:
                raise RuntimeError(f"dataplane dev exited {proc.returncode}:\n{now[-3000:]}")
            await trio.sleep(0.1)
    return now


async def measure(tmp: Path, rounds: int, result: Result) -> None:
    package = tmp / "src" / "reloadme"
    package.mkdir(parents=True)
    v, param = 0, None
    written = write(package, v, param)
    port = free_port()
    proc = await start_dev(tmp, port)
    output = tmp / "dev.out"
    began = time.perf_counter()
    try:
        text = await until_in_output(proc, output, "Dev token:", STARTUP_WITHIN)
        await until_in_output(proc, output, "reload: watching", STARTUP_WITHIN)
        result.detail["dev_up_s"] = round(time.perf_counter() - began, 1)
        token = re.search(r"Dev token:\s+(\S+)", text).group(1)  # type: ignore[union-attr]
        dsn = re.search(r"Queue DB:\s+(.+)", text).group(1).strip()  # type: ignore[union-attr]
        version = await trio.to_thread.run_sync(server_settings, dsn)
        result.machine = machine_info(version.get("server_version", "?"))
        limits = httpx.Timeout(REQUEST_TIMEOUT)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=limits) as http:
            dev = Dev(proc, output, http, token)
            with trio.fail_after(ROUND_WITHIN):
                while await dev.answer({}) != {"v": 0}:  # noqa: ASYNC110 - a process to ask
                    await trio.sleep(POLL)
            await dev.settle(written)
            rows: list[dict[str, Any]] = []
            for n in range(1, rounds + 1):
                before = pids(proc.pid)
                v += 1
                written = write(package, v, param)
                seen = await served(
                    dev, "worker", n, {"answer": partial(dev.answers, {}, {"v": v})}, written
                )
                after = pids(proc.pid)
                rows.append(
                    {
                        "round": n,
                        "path": "worker",
                        "s": round(seen["answer"], 3),
                        "bff_restarted": after.get("bff") != before.get("bff"),
                        "worker_restarted": after.get("worker-reloadme")
                        != before.get("worker-reloadme"),
                    }
                )
                await dev.settle(written)

                before = pids(proc.pid)
                v, param = v + 1, f"p{n}"
                written = write(package, v, param)
                probes = {
                    "openapi": partial(dev.declares, param),
                    "answer": partial(dev.answers, {param: n}, {"v": v}),
                }
                seen = await served(dev, "bff", n, probes, written)
                after = pids(proc.pid)
                rows.append(
                    {
                        "round": n,
                        "path": "bff",
                        "s": round(max(seen.values()), 3),
                        "openapi_s": round(seen["openapi"], 3),
                        "answer_s": round(seen["answer"], 3),
                        "bff_restarted": after.get("bff") != before.get("bff"),
                        "worker_restarted": after.get("worker-reloadme")
                        != before.get("worker-reloadme"),
                    }
                )
                print(
                    f"  round {n}: " + ", ".join(f"{r['path']} {r['s']:.2f} s" for r in rows[-2:])
                )
                await dev.settle(written)
        result.detail["rounds"] = rows
        for path in ("worker", "bff"):
            mine = [r for r in rows if r["path"] == path]
            samples = [r["s"] for r in mine]
            result.figures[f"reload_{path}_p50_s"] = round(statistics.median(samples), 2)
            result.figures[f"reload_{path}_p90_s"] = round(percentile(samples, 90), 2)
            result.figures[f"reload_{path}_max_s"] = round(max(samples), 2)
            result.figures[f"reload_{path}_under_2s"] = sum(s < PROMISE_S for s in samples)
            wrong = [r["round"] for r in mine if r["bff_restarted"] != (path == "bff")]
            if wrong or not all(r["worker_restarted"] for r in mine):
                result.detail.setdefault("unexpected", []).append({path: wrong})
        restarts = read(output).count("bff restarted:")
        result.detail["bff_restarts_logged"] = restarts
    finally:
        with trio.CancelScope(shield=True):
            result.detail["stop_s"] = await stop(proc)


async def stop(proc: trio.Process) -> float | None:
    """SIGINT, then SIGKILL after :data:`STOP_WITHIN`: the seconds it took (None: killed)."""
    if proc.poll() is not None:
        return 0.0
    began = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    with trio.move_on_after(STOP_WITHIN):
        await proc.wait()
        return round(time.perf_counter() - began, 2)
    print(f"dataplane dev did not stop in {STOP_WITHIN:g} s after SIGINT: killed", file=sys.stderr)
    proc.kill()
    await proc.wait()
    return None


def run(rounds: int) -> Result:
    result = Result(tool="reload", scenarios=[], config={"rounds": rounds, "poll_s": POLL})
    began = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="dataplane-bench-reload-"))
    bound = STARTUP_WITHIN + rounds * 2 * (2 * ROUND_WITHIN + SETTLE) + STOP_WITHIN

    async def bounded() -> None:
        with trio.fail_after(bound):
            await measure(tmp, rounds, result)

    try:
        trio.run(until_signalled, bounded)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result.total_seconds = round(time.perf_counter() - began, 1)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=10, help="edits of each kind")
    parser.add_argument("--output", type=Path, help="result JSON (default bench/results/)")
    args = parser.parse_args()
    result = interruptible(lambda: run(args.rounds))
    if result is None:
        return 130
    print_figures(result)
    rows = [
        [
            path,
            result.figures[f"reload_{path}_p50_s"],
            result.figures[f"reload_{path}_p90_s"],
            result.figures[f"reload_{path}_max_s"],
            f"{result.figures[f'reload_{path}_under_2s']}/{args.rounds}",
        ]
        for path in ("worker", "bff")
    ]
    print()
    print(format_table(["restart", "median s", "p90 s", "max s", "< 2 s"], rows))
    if "unexpected" in result.detail:
        print(f"  unexpected restarts: {result.detail['unexpected']}")
    print(f"  written to {result.save(args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
