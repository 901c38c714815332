"""Child processes of a benchmark and what /proc says about any process.

Plain blocking functions and classes (the async start-up of a stack is in ``stack.py``).
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.harness.common import Server

REPO = Path(__file__).resolve().parents[2]
CLK_TCK = os.sysconf("SC_CLK_TCK")
#: ``python -m dataplane worker``: every worker process of the benchmarks.
WORKER_ARGV = (sys.executable, "-m", "dataplane", "worker")


# -- open-files limit --------------------------------------------------------------


def _raise_nofile() -> None:
    """preexec_fn: the child's open-files soft limit up to its hard limit."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def raise_own_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# -- child processes ---------------------------------------------------------------


class Child:
    """A child process with its output in a log file; :meth:`stop` ends it for sure."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        log_dir: Path,
        *,
        cwd: Path = REPO,
        raise_nofile: bool = True,
    ) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "wb")  # closed in stop()
        self.proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=str(cwd),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            # Children inherit our raised limit anyway; this states it for each of them.
            preexec_fn=_raise_nofile if raise_nofile else None,
        )
        self.extra_pids: list[int] = []  # e.g. Hypercorn's spawned worker

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log_path.read_bytes().decode(errors="replace")

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def serving(self) -> bool:
        """A ``dataplane worker`` logs `` serving `` once its boot checks passed."""
        return " serving " in self.output()

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM, SIGKILL after ``grace`` seconds; the exit code."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        for pid in self.extra_pids:  # orphaned only if the parent died without reaping
            if is_child_of(pid, {self.proc.pid, 1}):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if not self._log.closed:
            self._log.close()
        return self.proc.returncode


class Children:
    """Every child process of the run; all are stopped when the block ends."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[Child] = []

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str], **kw: Any) -> Child:
        child = Child(name, argv, env, self.log_dir, **kw)
        self.started.append(child)
        return child

    def stop_all(self) -> None:
        for child in reversed(self.started):
            with contextlib.suppress(Exception):
                child.stop(grace=5.0)


@contextlib.contextmanager
def children_scope(
    prefix: str = "dataplane-e2e-logs-", *, keep_logs: bool = True
) -> Iterator[Children]:
    """Children logging to a new temp directory, all stopped when the block ends."""
    kids = Children(Path(tempfile.mkdtemp(prefix=prefix)))
    try:
        yield kids
    finally:
        kids.stop_all()
        if not keep_logs:
            shutil.rmtree(kids.log_dir, ignore_errors=True)


def wait_serving_blocking(child: Child, within: float = 30.0) -> None:
    """Until a worker logs `` serving `` (boot checks passed, claim loop starting)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if child.serving():
            return
        if child.proc.poll() is not None:
            raise RuntimeError(f"worker {child.name} exited early:\n{child.tail()}")
        time.sleep(0.01)
    raise RuntimeError(f"worker {child.name} not ready within {within}s:\n{child.tail()}")


# -- /proc -------------------------------------------------------------------------


def proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat from the 3rd (state) on; None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # after "pid (comm) "


def _stat_ticks(stat: Sequence[str]) -> int:
    return int(stat[11]) + int(stat[12])  # utime + stime: fields 14 and 15 of stat(5)


def is_child_of(pid: int, parents: set[int]) -> bool:
    stat = proc_stat(pid)
    return stat is not None and int(stat[1]) in parents


def _children_stats(parent: int) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = proc_stat(int(entry.name))
            if stat is not None and int(stat[1]) == parent:
                out[int(entry.name)] = stat
    return out


def children_of(pid: int) -> list[int]:
    return list(_children_stats(pid))


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def sched_seconds(pid: int) -> tuple[float, float] | None:
    """(on-CPU, waiting on a run queue) seconds of every thread of ``pid``, from
    ``/proc/<pid>/task/*/schedstat`` (nanoseconds, not 10 ms ticks); None when gone.

    The run-queue wait is time the process was runnable while another task had the CPU.
    """
    run = wait = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for task in tasks:
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                fields = f.read().split()
            run += int(fields[0])
            wait += int(fields[1])
    return run / 1e9, wait / 1e9


def cpu_seconds(pid: int) -> float | None:
    """On-CPU seconds of one process (all its threads; schedstat, or utime + stime
    ticks where the kernel has no schedstat); None if it is gone."""
    sched = sched_seconds(pid)
    if sched is not None and sched[0] > 0:
        return sched[0]
    stat = proc_stat(pid)
    return _stat_ticks(stat) / CLK_TCK if stat else None


def proc_status(
    pid: int, keys: Iterable[str] = ("VmRSS", "RssAnon", "RssShmem")
) -> dict[str, float]:
    """Those memory lines of /proc/<pid>/status, in MB; {} when it is gone."""
    wanted = set(keys)
    out: dict[str, float] = {}
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in wanted:
                out[key] = int(value.split()[0]) / 1024
    return out


def rss_mb(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (its peak) of a process, MB to one decimal."""
    return {k: round(v, 1) for k, v in proc_status(pid, ("VmRSS", "VmHWM")).items()}


def fd_count(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def postmaster_pid(server: Server) -> int | None:
    """The embedded Postgres' postmaster (None for an external server)."""
    if server.datadir is None:
        return None
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int((server.datadir / "data" / "postmaster.pid").read_text().split()[0])
    return None


def postgres_pids(pg_pid: int | None) -> list[int]:
    """The postmaster and its children (backends, background processes)."""
    return [] if pg_pid is None else [pg_pid, *children_of(pg_pid)]


# -- CPU of groups of processes ----------------------------------------------------


def _host_busy_ticks() -> int:
    """Busy ticks of every CPU of the host since boot (/proc/stat: all but idle, iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return sum(fields[:8]) - fields[3] - fields[4]


class CpuMeter:
    """CPU seconds used by named groups of processes between two snapshots: the one
    CPU meter of every benchmark (:func:`cpu_seconds` of each process of a group)."""

    def __init__(self, groups: Mapping[str, Callable[[], Iterable[int]]]) -> None:
        # name -> callable returning the pids of the group now
        self.groups = dict(groups)

    def snapshot(self) -> dict[str, Any]:
        snap: dict[str, Any] = {
            "wall": time.perf_counter(),
            "bench": time.process_time(),
            "host": _host_busy_ticks(),
        }
        for name, pids in self.groups.items():
            snap[name] = {pid: cpu_seconds(pid) or 0.0 for pid in pids()}
        return snap

    def since(self, start: dict[str, Any]) -> dict[str, float]:
        """Percent of one core per group (and the wall seconds) since ``start``."""
        end = self.snapshot()
        wall = end["wall"] - start["wall"]
        out = {"wall_s": round(wall, 3)}
        ours = end["bench"] - start["bench"]
        out["bench_pct"] = round(100 * ours / wall, 1)
        out["bench_s"] = round(ours, 4)
        for name in self.groups:
            used = sum(t - start[name].get(pid, 0.0) for pid, t in end[name].items())
            out[f"{name}_pct"] = round(100 * used / wall, 1)
            out[f"{name}_s"] = round(used, 4)
            ours += used
        # Everything else on the host (other users' processes): a noisy-run flag.
        host = (end["host"] - start["host"]) / CLK_TCK
        out["others_pct"] = round(100 * max(0.0, host - ours) / wall, 1)
        return out


def cpu_ms_per_op(cpu: Mapping[str, float], ops: int) -> dict[str, float]:
    """CPU milliseconds each party spent per operation, from a :meth:`CpuMeter.since`."""
    if ops <= 0:
        return {}
    return {
        k[:-2]: round(v / ops * 1000, 4)
        for k, v in cpu.items()
        if k.endswith("_s") and k != "wall_s"
    }
