"""The image's figures: its size, and each role from `podman run` to ready, then to exit.

Run from the repository root (podman, images built by scripts/build-image)::

    python bench/start.py                         # localhost/dataplane:<version>
    python bench/start.py --image localhost/x:1   # another tag
    python bench/start.py --rounds 5

How each role's readiness is told: docs/perf/benchmarks.md. Prints the medians and
writes ``bench/results/start.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness.common import scratch_server, server_facts
from bench.harness.result import Result, print_figures

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "deploy" / "podman" / "containers.conf"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
POLL = 0.02  # seconds between readiness checks
WITHIN = 60.0  # seconds a role may take to be ready
JWT = "bench-start-secret-that-is-long-enough-for-hs256"


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONTAINERS_CONF": str(CONF)}
    return subprocess.run(
        ["podman", *args], env=env, capture_output=True, text=True, check=check, timeout=120
    )


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_ok(url: str) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    return ready


def one_role(
    image: str, name: str, env: dict[str, str], args: list[str], url: str | None
) -> dict[str, float]:
    """Seconds from `podman run -d` to ready, and from SIGTERM to exit (status 0)."""
    flags = [f"--env={key}={value}" for key, value in env.items()]
    started = time.monotonic()
    podman("run", "-d", "--name", name, "--read-only", "--network", "host", *flags, image, *args)
    try:
        ready = http_ok(url) if url else None
        while True:
            if ready is not None and ready():
                break
            state = podman("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", name)
            status, code = state.stdout.split()
            if status == "exited":
                if ready is None and code == "0":
                    return {"ready_s": time.monotonic() - started}
                raise RuntimeError(f"{name} exited {code}: {podman('logs', name).stderr[-2000:]}")
            if time.monotonic() - started > WITHIN:
                raise RuntimeError(f"{name} not ready in {WITHIN}s")
            time.sleep(POLL)
        ready_s = time.monotonic() - started
        stopping = time.monotonic()
        podman("kill", "-s", "TERM", name)
        code = podman("wait", name).stdout.strip()
        if code != "0":
            raise RuntimeError(f"{name} exited {code} after SIGTERM")
        return {"ready_s": ready_s, "sigterm_exit_s": time.monotonic() - stopping}
    finally:
        podman("rm", "-f", "-t", "0", name, check=False)


def roles(dsn: str) -> dict[str, tuple[dict[str, str], list[str], str | None]]:
    from psycopg.conninfo import make_conninfo

    bff, worker, capcom = free_port(), free_port(), free_port()
    queue = {
        "MAESTRO_QUEUES_URL": make_conninfo(dsn, host="127.0.0.1"),  # TCP, not the socket
        "DATAPLANE_ALLOW_OWNER": "1",  # the scratch server's superuser (startup timing only)
    }
    return {
        "migrate": (queue, ["migrate"], None),
        "bff": (
            {**queue, "DATAPLANE_JWT_SECRET": JWT, "DATAPLANE_BIND": f"127.0.0.1:{bff}"},
            ["bff"],
            f"http://127.0.0.1:{bff}/readyz",
        ),
        "worker": (
            {
                **queue,
                "SURFACE_QUEUE_TYPE": "surface-probe",
                "DATAPLANE_PROBE": "1",
                "DATAPLANE_METRICS_HOST": "127.0.0.1",
                "DATAPLANE_METRICS_PORT": str(worker),
            },
            ["worker"],
            f"http://127.0.0.1:{worker}/readyz",
        ),
        "capcom": (
            {
                **queue,
                "DATAPLANE_CAPCOM_TOKEN": JWT,
                "DATAPLANE_CAPCOM_BIND": f"127.0.0.1:{capcom}",
            },
            ["capcom"],
            f"http://127.0.0.1:{capcom}/readyz",
        ),
    }


def run(image: str, rounds: int) -> Result:
    result = Result(tool="start", scenarios=[], config={"image": image, "rounds": rounds})
    size = podman("image", "inspect", "--format", "{{.Size}}", image).stdout.strip()
    result.figures["image_mb"] = round(int(size) / 1e6)
    began = time.monotonic()
    with scratch_server("start") as server:
        settings, result.machine = server_facts(server)
        result.config["server"] = settings.get("server_version")
        samples: dict[str, list[dict[str, float]]] = {}
        for n in range(rounds):
            for role, (env, args, url) in roles(server.dsn).items():
                name = f"bench-start-{os.getpid()}-{role}-{n}"
                samples.setdefault(role, []).append(one_role(image, name, env, args, url))
    for role, rows in samples.items():
        for key in rows[0]:
            result.figures[f"{role}_{key}"] = round(statistics.median(r[key] for r in rows), 2)
    result.detail["samples"] = samples
    result.total_seconds = round(time.monotonic() - began, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default=f"localhost/dataplane:{VERSION}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", type=Path, help="result JSON (default bench/results/)")
    args = parser.parse_args()
    result = run(args.image, args.rounds)
    print_figures(result)
    print(f"  written to {result.save(args.output)}")


if __name__ == "__main__":
    main()
