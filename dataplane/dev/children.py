"""Child processes of ``dataplane dev``: started, supervised, stopped, never orphaned.

:func:`supervise` runs one :class:`Child` until cancelled, restarting it with
backoff when it dies (a child that ran :data:`STABLE_AFTER` resets its backoff), and
at once when asked (:meth:`Child.restart`: ``dataplane dev --reload``);
cancellation stops it (SIGTERM, then SIGKILL after :data:`CHILD_STOP_GRACE`).
Each child is started with ``PR_SET_PDEATHSIG`` = SIGTERM (Linux), from the main
thread (the death signal follows the thread that forked), so it stops on its own
if ``dataplane dev`` dies uncleanly.

A child's output (stdout and stderr) is appended to ``<log dir>/<name>.log``: directly,
or, for a child with an ``echo`` (the workers: :mod:`dataplane.dev.failures`), through
a pipe :func:`copy_output` reads as fast as the child writes, appending every byte to
the file and showing each whole line to the echo. When the child is stopped, the pipe
is read to its end (at most :data:`DRAIN_SECONDS`), so its last lines reach the file.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import trio

log = logging.getLogger("dataplane.dev")

CHILD_STOP_GRACE = 3.0  # seconds between SIGTERM and SIGKILL for a child
RESTART_BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0)  # seconds before restarting a dead child
STABLE_AFTER = 30.0  # a child that ran this long resets its backoff
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
CHUNK = 65536  # bytes read from a child's pipe at once
LINE_MAX = 65536  # bytes of a line shown to an echo; a longer one is written, not shown
DRAIN_SECONDS = CHILD_STOP_GRACE + 2.0  # reading a stopping child's last output, at most


@dataclass
class Child:
    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    restarts: int = 0
    echo: Callable[[bytes], None] | None = None  # shown each whole line of its output
    pid: int | None = field(default=None)
    _running: trio.CancelScope | None = field(default=None, repr=False)
    _restart_why: str | None = field(default=None, repr=False)

    def restart(self, why: str) -> None:
        """Stop the running process and start it again at once (no backoff)."""
        self._restart_why = why
        if self._running is not None:
            self._running.cancel()


def _prctl() -> object | None:
    """libc's prctl, looked up once in the parent (the child only calls it)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    return libc.prctl


_PRCTL = _prctl()


def _die_with_parent(parent_pid: int) -> None:
    """In the child, before exec: SIGTERM me when my parent's spawning thread dies.

    The kernel ties the signal to the *thread* that forked, so children are spawned
    from the main thread (:meth:`ChildProcess.spawn`), never from a worker thread
    that may exit while they run. A parent already gone before the call: exit now.
    """
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)  # type: ignore[operator]
    if os.getppid() != parent_pid:
        os._exit(1)


class ChildProcess:
    """A child spawned from the main thread with :func:`_die_with_parent`.

    ``trio.lowlevel.open_process`` forks from a worker thread of Trio's cache, which
    exits when idle: ``PR_SET_PDEATHSIG`` would then fire seconds after the spawn.
    Forking here blocks the loop for the few milliseconds of fork and exec.
    """

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen
        self.pid = popen.pid

    @classmethod
    def spawn(
        cls, argv: Sequence[str], env: Mapping[str, str], out: IO[bytes] | int
    ) -> ChildProcess:
        parent = os.getpid()
        return cls(
            subprocess.Popen(
                list(argv),
                env=dict(env),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches the supervisor, which stops children
                preexec_fn=lambda: _die_with_parent(parent),
            )
        )

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    async def wait(self) -> int:
        """Block until the child exits (a pidfd where there is one); reap it."""
        if self.popen.poll() is None:
            try:
                fd = os.pidfd_open(self.pid)
            except (AttributeError, OSError):  # no pidfd: a thread waits instead
                return await trio.to_thread.run_sync(self.popen.wait, abandon_on_cancel=True)
            try:
                await trio.lowlevel.wait_readable(fd)
            finally:
                os.close(fd)
        return self.popen.wait()

    def terminate(self) -> None:
        self.popen.terminate()

    def kill(self) -> None:
        self.popen.kill()


async def _stop_child(process: ChildProcess) -> None:
    """Cancel delivery: SIGTERM, a short grace, then SIGKILL (and reap)."""
    try:
        process.terminate()
        with trio.move_on_after(CHILD_STOP_GRACE):
            await process.wait()
            return
        process.kill()
        await process.wait()
    except ProcessLookupError:
        pass


async def copy_output(
    stream: trio.abc.ReceiveStream, out: Any, echo: Callable[[bytes], None]
) -> None:
    """Append what a child writes to ``out`` until its end, showing ``echo`` each whole
    line; cancelled, go on (shielded, at most :data:`DRAIN_SECONDS`) to the end."""
    pending = b""

    async def take(chunk: bytes | bytearray) -> None:
        nonlocal pending
        view = memoryview(chunk)
        while view:  # an unbuffered file: in the file as soon as it is read
            view = view[await out.write(view) :]
        *lines, pending = (pending + bytes(chunk)).split(b"\n")
        if len(pending) > LINE_MAX:
            pending = b""  # a line this long is in the file, never shown
        for line in lines:
            echo(line)

    try:
        while chunk := await stream.receive_some(CHUNK):
            await take(chunk)
    except trio.Cancelled:
        with trio.CancelScope(shield=True), trio.move_on_after(DRAIN_SECONDS):
            while chunk := await stream.receive_some(CHUNK):
                await take(chunk)
        raise
    finally:
        await stream.aclose()


async def _run_once(child: Child, out: Any) -> int | None:
    """Start ``child`` once, its output to ``out`` (through :func:`copy_output` when it
    has an echo), and wait for it to exit; stop it if cancelled. Its exit status."""
    env = {**os.environ, **child.env}
    if child.echo is None:
        return await _wait_or_stop(child, ChildProcess.spawn(child.argv, env, out.wrapped))
    read_end, write_end = os.pipe()
    try:
        process = ChildProcess.spawn(child.argv, env, write_end)
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)  # the child holds the only write end: its exit is our EOF
    async with trio.open_nursery() as nursery:
        nursery.start_soon(copy_output, trio.lowlevel.FdStream(read_end), out, child.echo)
        return await _wait_or_stop(child, process)


async def _wait_or_stop(child: Child, process: ChildProcess) -> int | None:
    child.pid = process.pid
    code: int | None = None
    try:
        with trio.CancelScope() as child._running:
            code = await process.wait()
    finally:
        child._running = None
        if process.returncode is None:
            with trio.CancelScope(shield=True):
                await _stop_child(process)
    return code


async def supervise(child: Child, log_dir: Path) -> None:
    """Run ``child`` forever: restart it with backoff when it exits."""
    failures = 0
    while True:
        log_path = log_dir / f"{child.name}.log"
        started = trio.current_time()
        async with await trio.open_file(log_path, "ab", buffering=0) as out:
            code = await _run_once(child, out)
        if child._restart_why is not None:  # asked for: again now, and a fresh backoff
            log.info("%s restarted: %s", child.name, child._restart_why)
            child._restart_why, failures = None, 0
            child.restarts += 1
            continue
        if trio.current_time() - started > STABLE_AFTER:
            failures = 0
        delay = RESTART_BACKOFF[min(failures, len(RESTART_BACKOFF) - 1)]
        failures += 1
        child.restarts += 1
        log.warning(
            "%s exited with status %s; restarting in %gs (log: %s)",
            child.name,
            code,
            delay,
            log_path,
        )
        await trio.sleep(delay)
