"""``dataplane dev`` under the signals supervisors send: nothing is left running.

SIGTERM (systemd, ``docker stop``) and SIGHUP (a closed terminal) stop every child
and then Postgres, as Ctrl-C does (``test_dev.py``). SIGKILL gives it no chance:
its children are told by the kernel (``PR_SET_PDEATHSIG``) and exit on their own,
and a watchdog stops the embedded Postgres. One directory for the module, so the
demo DB is seeded once; the SIGKILL case runs last.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import trio

from dataplane.dev.embedded import EmbeddedPostgres, free_port
from tests.conftest import wait_until

START_WITHIN = 180  # seconds: the first start seeds the demo DB
CLEAN_STOP_WITHIN = 5 + 2  # seconds: children, then Postgres (+ slack)
ORPHANS_EXIT_WITHIN = 15  # seconds for children to go after their parent was killed
POSTGRES_STOP_WITHIN = 45  # seconds: the watchdog gives pg_ctl stop 40 (STOP_TIMEOUT + 10)


@pytest.fixture(scope="module")
def dev_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("dev")
    yield path
    EmbeddedPostgres(path / ".dataplane" / "pg").stop("immediate")  # whatever a failure left


@dataclass
class RunningDev:
    proc: trio.Process
    children: list[psutil.Process]  # every descendant once it is up
    postgres: int  # the postmaster's pid
    output: Path


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _postgres_alive(pid: int) -> bool:
    return psutil.pid_exists(pid) and _alive(psutil.Process(pid))


@pytest.fixture
async def dev(dev_dir: Path) -> AsyncIterator[RunningDev]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAESTRO_", "DATAPLANE_"))}
    output = dev_dir / "dev.out"
    log = open(output, "wb")  # noqa: ASYNC230 - closed below
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "dataplane", "dev", "--port", str(free_port())],
        cwd=dev_dir,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    children: list[psutil.Process] = []
    try:
        await wait_until(
            lambda: "Dev token:" in output.read_text() or proc.poll() is not None,
            within=START_WITHIN,
        )
        assert proc.poll() is None, output.read_text()
        children = psutil.Process(proc.pid).children(recursive=True)
        commands = [" ".join(p.cmdline()) for p in children]
        assert any(" -m dataplane bff " in c for c in commands), commands  # the BFF
        assert any(c.endswith("dataplane worker") for c in commands), commands
        pidfile = dev_dir / ".dataplane" / "pg" / "postmaster.pid"
        postgres = int(pidfile.read_text().split()[0])
        assert _postgres_alive(postgres)
        yield RunningDev(proc, children, postgres, output)
    finally:
        if proc.poll() is None:
            proc.kill()
            await proc.wait()
        for child in children:
            if _alive(child):
                child.kill()
        log.close()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
async def test_a_stop_signal_leaves_no_child_and_no_postgres(
    dev: RunningDev, signum: signal.Signals
) -> None:
    dev.proc.send_signal(signum)
    with trio.fail_after(CLEAN_STOP_WITHIN):
        code = await dev.proc.wait()
    assert code == 0, dev.output.read_text()[-2000:]
    alive = [p for p in dev.children if _alive(p)]
    assert alive == [], alive
    assert not _postgres_alive(dev.postgres)
    assert f"{signum.name}: stopping" in dev.output.read_text()


def _is_watchdog(process: psutil.Process) -> bool:
    """The Postgres watchdog: its exit is Postgres's stop, bounded on its own."""
    try:
        return "EmbeddedPostgres" in " ".join(process.cmdline())
    except psutil.NoSuchProcess:
        return False


def _still_running(processes: list[psutil.Process], dev_dir: Path) -> str:
    """What a timeout should say: each process left, and the tail of each child's log."""
    lines = []
    for process in processes:
        if _alive(process):
            try:
                lines.append(f"alive: {process.pid} {' '.join(process.cmdline())}")
            except psutil.NoSuchProcess:
                pass
    for log in sorted((dev_dir / ".dataplane" / "logs").glob("*.log")):
        lines.append(f"--- {log.name}\n" + log.read_text(errors="replace")[-1500:])
    return "\n".join(lines)


async def test_sigkill_children_exit_on_their_own_and_postgres_stops(
    dev: RunningDev, dev_dir: Path
) -> None:
    children = [p for p in dev.children if not _is_watchdog(p)]
    watchdogs = [p for p in dev.children if _is_watchdog(p)]
    assert len(watchdogs) == 1, [p.cmdline() for p in dev.children]
    dev.proc.kill()
    await dev.proc.wait()
    try:
        await wait_until(
            lambda: not any(_alive(p) for p in children), within=ORPHANS_EXIT_WITHIN, interval=0.1
        )
    except trio.TooSlowError:
        pytest.fail(f"children outlived their parent:\n{_still_running(children, dev_dir)}")
    # The watchdog stops Postgres (fast shutdown, a checkpoint: as slow as the disk)
    # once its pipe's writer is gone, then exits.
    try:
        await wait_until(
            lambda: not _postgres_alive(dev.postgres) and not _alive(watchdogs[0]),
            within=POSTGRES_STOP_WITHIN,
            interval=0.1,
        )
    except trio.TooSlowError:
        pytest.fail(f"Postgres outlived `dataplane dev`:\n{_still_running(watchdogs, dev_dir)}")
