"""A ``dataplane dev`` child's output (dataplane/dev/children.py, failures.py): its log
file whole, its failed attempts' lines picked out in either log format, and a terminal
that does not read never in its way. The whole ``dataplane dev``:
tests/acceptance/test_dev.py."""

from __future__ import annotations

import io
import logging
import sys
import textwrap
import uuid
from datetime import UTC, datetime
from pathlib import Path

import trio

from dataplane.dev.children import Child, supervise
from dataplane.dev.failures import ECHO_BACKLOG, FailureEcho, failure_line
from dataplane.queue import ClaimedJob
from dataplane.worker.pipeline.failures import LOGGER, log_failure
from telemetry.failures import AttemptFailure
from telemetry.logs import TEXT_FORMAT, TextFormatter, json_formatter
from tests.conftest import wait_until

FAILED = "job 1 (shop.quote, attempt 1/5) failed at shop/h.py:3 in f: KeyError: 'oops'"


def _logged(formatter: logging.Formatter) -> list[bytes]:
    """A failed attempt's record as the worker logs it, in ``formatter``'s format."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    logger = logging.getLogger(LOGGER)
    logger.addHandler(handler)
    logger.propagate = False
    now = datetime.now(UTC)
    job = ClaimedJob(uuid.uuid4(), "surface-shop", "k", {}, 1, 5, now, now, now, now, "w")
    failure = AttemptFailure(
        1, "w", "KeyError", "'oops'", "Traceback\n> File x\nKeyError: 'oops'\n"
    )
    try:
        log_failure(job, "shop", "quote", KeyError("oops"), failure)
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    return [line.encode() for line in out.getvalue().splitlines()]


def test_a_failed_attempt_s_line_is_picked_out_of_either_log_format() -> None:
    for formatter in (TextFormatter(TEXT_FORMAT), json_formatter()):
        lines = _logged(formatter)
        shown = [failure_line(line) for line in lines]
        assert shown[0] is not None and shown[0].startswith("job ") and "KeyError" in shown[0]
        assert shown[1:] == [None] * (len(lines) - 1)  # the traceback's lines are not
    for other in (
        b"2026-12-01 08:45:10,123 INFO dataplane.access: GET /x 200",
        b"2026-12-01 08:45:10,123 WARNING dataplane.worker.pipeline.executor: job 1 poisoned",
        b'{"logger": "dataplane.access", "message": "job 1 failed"}',
        b"{not json",
        b'  File "x", line 1, in f',
    ):
        assert failure_line(other) is None, other


CHILD = textwrap.dedent(
    f"""
    import signal, sys, time
    def bye(*_):
        print("stopped: the last line", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, bye)
    line = "2026-12-01 08:45:10,123 ERROR {LOGGER}: {FAILED}\\n"
    for _ in range({ECHO_BACKLOG} * 50):  # far past the echo's backlog (600 KB)
        sys.stdout.write(line)
    sys.stdout.write("no newline yet")
    sys.stdout.flush()
    sys.stderr.write(" ... now there is one\\n")
    sys.stderr.flush()
    time.sleep(0.2)  # a read of its own: the file is written as it is read, unbuffered
    sys.stderr.write("written all\\n")
    sys.stderr.flush()
    time.sleep(600)
    """
)


async def test_a_worker_s_output_is_logged_whole_and_a_silent_terminal_blocks_nothing(
    tmp_path: Path,
) -> None:
    """Nobody prints the echo's lines (a terminal that does not read): the child still
    writes its 600 KB at once, the backlog stays bounded and the rest is counted; the log
    file holds every byte, stderr's too, and the lines the child writes while it is
    stopped."""
    echo = FailureEcho()
    child = Child("worker-shop", [sys.executable, "-c", CHILD], {}, echo=echo.watch("worker-shop"))
    log = tmp_path / "worker-shop.log"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(supervise, child, tmp_path)
        await wait_until(
            lambda: log.exists() and log.read_bytes().endswith(b"written all\n"), within=30
        )
        nursery.cancel_scope.cancel()
    text = log.read_text()
    assert text.count(FAILED) == ECHO_BACKLOG * 50
    assert "no newline yet ... now there is one\n" in text
    assert text.endswith("written all\nstopped: the last line\n")  # drained after SIGTERM
    assert echo.dropped == ECHO_BACKLOG * 50 - ECHO_BACKLOG
    received = echo._receive.receive_nowait()
    assert received == f"worker-shop: {FAILED}"
