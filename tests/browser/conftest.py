"""The demo page in a real browser: Debian's Chromium driven by Playwright (sync API).

The stack runs as real processes on a queue DB of this module's own (a copy of the
migrated template): two Hypercorn BFFs (one with the default stream deadline, one
with ``DATAPLANE_SSE_DEADLINE_SECONDS=1`` for the TIMEOUT -> polling path) and one
``dataplane worker`` per surface, the demo surfaces on the seeded demo client DB.
Everything here is synchronous: Playwright's sync API and these processes need no
event loop, so the tests are plain (non-async) pytest tests under trio_mode.

Nothing skips: without Chromium or Playwright the tests fail, saying what to install.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from dataplane.db import with_params
from dataplane.dev.embedded import free_port
from tests.helpers import JWT_SECRET, BffProcess, WorkerProcess, token

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 30_000  # every Playwright wait
READY_WITHIN = 30.0  # seconds for a BFF to answer /readyz
SURFACES = ("users", "learnerviews", "accounting", "skills", "probe")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"


def browser_tools_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return (
            "Playwright for Python is not installed: `pip install playwright` (no "
            "`playwright install`: the tests drive Debian's Chromium)"
        )
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing: `apt-get update && apt-get install -y chromium`"
    return None


@dataclass
class Stack:
    base: str  # the BFF with the default SSE deadline
    short_deadline_base: str  # the BFF whose streams end in TIMEOUT after 1 s
    queue_dsn: str
    demo_dsn: str  # admin DSN of the seeded demo client DB
    token: str = field(default_factory=lambda: token(staff=True, sub="1"))  # acme staff

    def page_url(self, base: str | None = None) -> str:
        return f"{base or self.base}/?token={self.token}"

    def queue_one(self, sql: str, *params: Any) -> Any:
        with psycopg.connect(self.queue_dsn) as conn:
            return conn.execute(sql, params).fetchone()  # type: ignore[arg-type]

    def demo_one(self, sql: str, *params: Any) -> Any:
        with psycopg.connect(self.demo_dsn) as conn:
            return conn.execute(sql, params).fetchone()  # type: ignore[arg-type]


def _admin(admin_dsn: str, statement: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(statement)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def stack(
    pg_admin_dsn: str,
    template_db: str,
    demo_db: tuple[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("browser-stack")
    name = f"t_browser_{uuid.uuid4().hex[:12]}"
    _admin(pg_admin_dsn, f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    queue_dsn = with_params(pg_admin_dsn, dbname=name)
    common = {
        "MAESTRO_QUEUES_URL": queue_dsn,
        "DATAPLANE_JWT_SECRET": JWT_SECRET,
        "DATAPLANE_PROBE": "1",
        "DATAPLANE_SWEEP_SECONDS": "1",
        "PYTHONUNBUFFERED": "1",
        # A failing job is parked (POISON) after two attempts, 2 s apart (dataplane dev's
        # backoff): long enough for a page to show the failed attempt while it waits.
        "DATAPLANE_MAX_DEQUEUES": "2",
        "DATAPLANE_FAIL_BACKOFF_SECONDS": "2",
        # Empty means unset: nothing from the caller's environment leaks in.
        "DATAPLANE_QUEUE_SUFFIX": "",
        "DATAPLANE_JWT_PUBLIC_KEY": "",
        "DATAPLANE_STREAM_SECRET": "",
    }
    workers: list[WorkerProcess] = []
    bffs: list[BffProcess] = []
    try:
        for surface in SURFACES:
            env = {**common, "SURFACE_QUEUE_TYPE": f"surface-{surface}"}
            if surface != "probe":
                env["DATAPLANE_CLIENT_DB_URL"] = demo_db[1]
            workers.append(WorkerProcess(env, str(logs / f"worker-{surface}.log")))
        for deadline in ("60", "1"):
            bffs.append(
                BffProcess(
                    {**common, "DATAPLANE_SSE_DEADLINE_SECONDS": deadline},
                    str(logs / f"bff-deadline-{deadline}.log"),
                    port=free_port(),
                    args=("-k", "trio"),
                )
            )
        for worker in workers:
            worker.wait_ready_blocking()
        for bff in bffs:
            bff.wait_ready_blocking(READY_WITHIN)
        yield Stack(bffs[0].base, bffs[1].base, queue_dsn, demo_db[0])
    finally:
        for proc in [*bffs, *workers]:
            proc.stop()
        _admin(pg_admin_dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def launched_chromium() -> Iterator[Browser]:
    """Debian's Chromium under Playwright until the block ends (fails, never skips,
    without it): the demo page's tests and the console's share it."""
    missing = browser_tools_missing()
    if missing:
        pytest.fail(missing, pytrace=False)
    from playwright.sync_api import sync_playwright

    # trio-asyncio (imported by dataplane.db) makes asyncio.new_event_loop() hand out its
    # own loop outside Trio unless a policy is set for the thread: Playwright's sync API
    # needs a plain asyncio loop, so set the stock policy while the browser lives.
    asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())
    try:
        with sync_playwright() as pw:
            chromium = pw.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS, timeout=TIMEOUT_MS
            )
            try:
                yield chromium
            finally:
                chromium.close()
    finally:
        asyncio.set_event_loop_policy(None)


@pytest.fixture(scope="module")
def browser(stack: Stack) -> Iterator[Browser]:
    with launched_chromium() as chromium:
        yield chromium


@pytest.fixture
def page(browser: Browser, stack: Stack) -> Iterator[Page]:
    """A fresh browser context and page; fails the test on an uncaught page error."""
    from playwright.sync_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    context = browser.new_context(
        base_url=stack.base, accept_downloads=True, viewport={"width": 1400, "height": 1000}
    )
    context.set_default_timeout(TIMEOUT_MS)
    context.set_default_navigation_timeout(TIMEOUT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page
    finally:
        context.close()
    assert not errors, f"uncaught errors on the page: {errors}"


@pytest.fixture
def screenshot(page: Page) -> Any:
    """screenshot(name): a full-page PNG in artifacts/screenshots/."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(name: str) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take
