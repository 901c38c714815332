"""The console's actions in Chromium (issue #41, item 5), each through real processes: a
``dataplane console``, a ``dataplane worker`` for surface-probe and a BFF (Hypercorn)
on the console's queue DB. An operator bulk-retries 100 poison ``probe.echo`` jobs from
the page and watches the wallboard drain them live; pauses surface-probe and sees a new
job stay pending until resumed; cancels a running ``probe.sleep`` whose BFF stream then
ends ``CANCELLED``. A viewer has no button and a forced POST is 403; an end user's token
is refused at sign-in; every action is on the audit page with the operator's name.
Screenshots in artifacts/screenshots/ as the other browser tests."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import psycopg
import pytest
import trio

from dataplane.db import DatabaseConfig, open_bridge, open_database
from dataplane.dev.embedded import free_port
from dataplane.queue import QueueClient, QueueConfig
from tests.browser.conftest import TIMEOUT_MS
from tests.browser.test_console import _expect, _shot, _sign_in, chromium, console, tab
from tests.console import Console, operator_token, viewer_token, wait_ready
from tests.helpers import (
    JWT_SECRET,
    NOTIFY_SECRET,
    BffProcess,
    WorkerProcess,
    bearer,
    capcom_process,
    submit,
)
from tests.helpers import token as mint

if TYPE_CHECKING:
    from playwright.sync_api import Page

__all__ = ["chromium", "console", "tab"]  # the fixtures this module shares

T = "surface-probe"
OPERATOR_NAME = "ops-1 <ops-1@acme.example>"  # operator_token()'s sub and email
END_USER = mint(sub="alice", branches=["acme-north"])  # a verified token, no console role
CAPCOM_TOKEN = "capcom-test-token"
WITHIN = 30.0  # seconds: every bounded wait of a row's state


@dataclass
class Plane:
    console: Console
    bff: str
    worker: WorkerProcess

    def rows(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.console.dsn, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()  # type: ignore[arg-type]

    def status(self, job_id: str) -> str:
        ((status,),) = self.rows("SELECT status FROM maestro_queues WHERE id = %s", (job_id,))
        return str(status)

    def statuses(self) -> dict[str, int]:
        found = self.rows(
            "SELECT status, count(*) FROM maestro_queues WHERE type = %s GROUP BY status", (T,)
        )
        return {status: n for status, n in found}

    def reset(self) -> None:
        self.console.clear()
        self.console.execute("DELETE FROM dataplane_audit")

    def echoes(self, values: list[Any]) -> list[str]:
        """Real ``probe.echo`` jobs, enqueued by the queue client (the ``submit`` helper)
        as the BFF would; their ids. In a thread: Trio's loop next to Playwright's."""

        async def run() -> list[str]:
            async with (
                open_bridge() as loop,
                open_database(DatabaseConfig(self.console.dsn, pool_size=2), loop=loop) as db,
            ):
                queue = QueueClient(db, QueueConfig(notify_secret=NOTIFY_SECRET))
                done = [await submit(queue, "probe", "echo", {"value": v}) for v in values]
                return [str(r.job_id) for r in done]

        with ThreadPoolExecutor(1) as pool:
            return pool.submit(trio.run, run).result(timeout=60)

    def poison_echoes(self, n: int) -> list[str]:
        """``n`` real echo jobs parked as poison, as a failing handler leaves them; the type
        is paused while they are enqueued so the worker cannot take one first."""
        self.console.execute(
            "INSERT INTO maestro_paused (type, paused_by) VALUES (%s, 'test setup')", (T,)
        )
        try:
            ids = self.echoes([f"poisoned {i}" for i in range(n)])
            self.console.execute(
                "UPDATE maestro_queues SET status = 'poison', completed_at = now(),"
                " last_error = 'RuntimeError: the client DB was down',"
                " dequeue_count = max_dequeues WHERE id = ANY(%s::uuid[])",
                (ids,),
            )
        finally:
            self.console.execute("DELETE FROM maestro_paused WHERE type = %s", (T,))
        assert self.statuses() == {"poison": n}
        return ids


def until(check: Callable[[], bool], what: str, within: float = WITHIN) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def plane(console: Console, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    logs = tmp_path_factory.mktemp("console-actions")
    common = {
        "MAESTRO_QUEUES_URL": console.dsn,
        "DATAPLANE_JWT_SECRET": JWT_SECRET,
        "DATAPLANE_PROBE": "1",
        "DATAPLANE_SWEEP_SECONDS": "1",
        "DATAPLANE_NOTIFY_SECRET": NOTIFY_SECRET,
        "PYTHONUNBUFFERED": "1",
        "DATAPLANE_QUEUE_SUFFIX": "",
        "DATAPLANE_JWT_PUBLIC_KEY": "",
        "DATAPLANE_STREAM_SECRET": "",
    }
    # capcom stores the worker's job reports in worker_runs: the wallboard's answers.
    capcom = capcom_process(common, str(logs / "capcom.log"), CAPCOM_TOKEN)
    bff = BffProcess(common, str(logs / "bff.log"), port=free_port(), args=("-k", "trio"))
    worker: WorkerProcess | None = None
    try:
        wait_ready(capcom)
        worker = WorkerProcess(
            {
                **common,
                "SURFACE_QUEUE_TYPE": T,
                "DATAPLANE_CAPCOM_URL": capcom.base,
                "DATAPLANE_CAPCOM_TOKEN": CAPCOM_TOKEN,
            },
            str(logs / "worker.log"),
        )
        worker.wait_ready_blocking()
        wait_ready(bff)
        yield Plane(console, bff.base, worker)
    finally:
        for proc in (bff, capcom, worker):
            if proc is not None:
                proc.stop()


def _audit_lists(page: Page, *expected: tuple[str, int]) -> None:
    """The audit page lists exactly ``expected`` (action, rows), newest first, each by
    the operator who signed in."""
    expect = _expect()
    page.goto("/audit")
    rows = page.get_by_test_id("audit-row")
    expect(rows).to_have_count(len(expected))
    for i, (action, n) in enumerate(expected):
        cells = rows.nth(i).locator("td")
        expect(cells.nth(1)).to_have_text(OPERATOR_NAME)
        expect(cells.nth(2)).to_have_text("console")
        expect(cells.nth(3)).to_have_text(action)
        expect(cells.nth(5)).to_have_text(str(n))


def _job_page_stays(page: Page, job_id: str, status: str, checks: int = 4) -> None:
    """The job's page shows ``status`` on each of ``checks`` loads, a second apart."""
    expect = _expect()
    for _ in range(checks):
        page.goto(f"/jobs/{job_id}")
        expect(page.get_by_test_id("status")).to_have_text(status)
        time.sleep(1.0)


def _job_page_reaches(page: Page, job_id: str, status: str, within: float = WITHIN) -> None:
    deadline = time.monotonic() + within
    while True:
        page.goto(f"/jobs/{job_id}")
        shown = page.get_by_test_id("status").inner_text()
        if shown == status:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} shows {shown!r}, not {status!r}, after {within}s")
        time.sleep(0.5)


def test_an_operator_bulk_retries_100_poison_jobs_and_watches_them_finish(
    tab: Page, plane: Plane
) -> None:
    expect = _expect()
    plane.reset()
    plane.poison_echoes(100)
    _sign_in(tab, operator_token())
    card = tab.locator(f'[data-testid="card"][data-type="{T}"]')
    expect(card).to_have_class("card poison")
    expect(card.locator('[data-key="poison"]')).to_have_text("100")
    expect(card.locator('[data-key="answers_per_minute"]')).to_have_text("0.0")
    _shot(tab, "console-actions-poison-board")

    acting = tab.context.new_page()  # the wallboard stays open, live, in the first tab
    acting.goto("/jobs")
    acting.locator('input[name="type"]').fill(T)
    acting.locator('select[name="status"]').select_option("poison")
    acting.get_by_test_id("apply").click()
    expect(acting.get_by_test_id("job-row")).to_have_count(50)  # a page; 100 match
    expect(acting.get_by_test_id("next")).to_be_visible()
    acting.get_by_test_id("bulk-retry").click()
    expect(acting.get_by_test_id("confirm-count")).to_have_text("100")
    expect(acting.get_by_test_id("confirm")).to_have_text("Retry 100 job(s)")
    assert plane.statuses() == {"poison": 100}  # the confirmation page changed nothing
    _shot(acting, "console-actions-retry-confirm")
    acting.get_by_test_id("confirm").click()
    expect(acting.get_by_test_id("done")).to_contain_text("100 row(s) changed")

    # The wallboard, never reloaded: poison drains to 0, the worker's answers come in.
    expect(card.locator('[data-key="poison"]')).to_have_text("0")
    expect(card).to_have_class("card")
    expect(card.locator('[data-key="pending"]')).to_have_text("0")
    expect(card.locator('[data-key="in_flight"]')).to_have_text("0")
    expect(card.locator('[data-key="answers_per_minute"]')).to_have_text("20.0")  # 100 / 5 min
    _shot(tab, "console-actions-retried-board")
    assert plane.statuses() == {"done": 100}
    _audit_lists(acting, ("retry", 100))
    acting.close()


def test_every_job_of_every_type_needs_the_all_box_ticked(tab: Page, plane: Plane) -> None:
    """The jobs list unfiltered: its confirm page asks for "all" with a required box;
    Chromium does not send the form without it, and sends ``all=1`` with it."""
    expect = _expect()
    plane.reset()
    other = "surface-zeta"
    ids = [plane.console.add_job(t, "poison", error="boom") for t in (T, T, other)]
    _sign_in(tab, operator_token())
    tab.goto("/jobs")  # no filter
    tab.get_by_test_id("bulk-discard").click()
    expect(tab.get_by_test_id("confirm-count")).to_have_text("3")
    expect(tab.get_by_test_id("unfiltered")).to_contain_text("every poison job of every type")
    box = tab.get_by_test_id("confirm-all")
    tab.get_by_test_id("confirm").click()  # the box unticked: the browser keeps the form
    expect(box).to_be_visible()
    assert box.evaluate("b => !b.validity.valid")
    _shot(tab, "console-actions-all-required")
    assert plane.rows("SELECT count(*) FROM maestro_queues") == [(3,)]
    box.check()
    with tab.expect_request(lambda r: r.method == "POST") as sent:
        tab.get_by_test_id("confirm").click()
    assert "all=1" in (sent.value.post_data or "")
    expect(tab.get_by_test_id("done")).to_contain_text("3 row(s) changed")
    assert plane.rows("SELECT id FROM maestro_queues WHERE id = ANY(%s::uuid[])", (ids,)) == []
    ((target,),) = plane.rows("SELECT target FROM dataplane_audit")
    assert target["all"] is True and target["status"] == "poison" and target["queue_type"] is None
    _audit_lists(tab, ("discard", 3))


def test_a_paused_type_keeps_a_new_job_pending_until_resumed(tab: Page, plane: Plane) -> None:
    expect = _expect()
    plane.reset()
    (first,) = plane.echoes(["before the pause"])  # the type in use: it has a report
    until(lambda: plane.status(first) == "done", f"{first} done")
    _sign_in(tab, operator_token())
    tab.goto(f"/jobs?type={T}")
    tab.get_by_test_id("queue-pause").click()
    expect(tab.get_by_test_id("done")).to_have_text(f"{T} is paused")
    tab.goto("/")
    card = tab.locator(f'[data-testid="card"][data-type="{T}"]')
    expect(card.get_by_test_id("paused")).to_be_visible()
    expect(card).to_contain_text(f"paused by {OPERATOR_NAME}")

    (job,) = plane.echoes(["while paused"])
    expect(card.locator('[data-key="pending"]')).to_have_text("1")  # live on the board
    _job_page_stays(tab, job, "pending")
    ((claimed,),) = plane.rows("SELECT dequeue_count FROM maestro_queues WHERE id = %s", (job,))
    assert claimed == 0  # never claimed while paused
    _shot(tab, "console-actions-paused-job")

    tab.goto(f"/jobs?type={T}")
    tab.get_by_test_id("queue-resume").click()
    expect(tab.get_by_test_id("done")).to_have_text(f"{T} is resumed")
    _job_page_reaches(tab, job, "done")
    expect(tab.get_by_test_id("attempts")).to_contain_text("done")
    tab.goto("/")
    expect(card.get_by_test_id("paused")).to_have_count(0)
    _audit_lists(tab, ("resume", 1), ("pause", 1))


def _read_stream(url: str, events: list[dict[str, str]], opened: threading.Event) -> None:
    """The BFF's event stream of a job, until its final event (or the server closes)."""
    timeout = httpx.Timeout(10.0, read=WITHIN + 20.0)
    with httpx.Client(timeout=timeout) as client, client.stream("GET", url) as resp:
        assert resp.status_code == 200, resp.read()
        opened.set()
        current: dict[str, str] = {}
        for line in resp.iter_lines():
            if line == "":
                if current:
                    events.append(current)
                    if current.get("event") in ("done", "error"):
                        return
                current = {}
            elif not line.startswith(":"):
                key, _, value = line.partition(":")
                current[key] = value.removeprefix(" ")


def test_an_operator_cancels_a_running_job_and_its_stream_ends_cancelled(
    tab: Page, plane: Plane
) -> None:
    expect = _expect()
    plane.reset()
    asked = httpx.post(
        f"{plane.bff}/api/probe/q",
        json={"operation": "sleep", "params": {"ms": 20000}},
        headers=bearer(mint(sub="bob", branches=["acme-north"])),
        timeout=10,
    )
    assert asked.status_code == 202, asked.text
    body = asked.json()
    job = body["jobId"]
    events: list[dict[str, str]] = []
    opened = threading.Event()
    reader = threading.Thread(
        target=_read_stream, args=(f"{plane.bff}{body['streamUrl']}", events, opened), daemon=True
    )
    reader.start()
    assert opened.wait(10), "the BFF's stream did not open"
    until(lambda: plane.status(job) == "in_progress", f"{job} running")

    _sign_in(tab, operator_token())
    tab.goto(f"/jobs/{job}")
    expect(tab.get_by_test_id("status")).to_have_text("in_progress")
    _shot(tab, "console-actions-running-job")
    tab.get_by_test_id("job-cancel").click()
    expect(tab.get_by_test_id("done")).to_have_text(f"job {job} cancelled (it was running)")
    reader.join(5.0)  # the sleep had ~19 s to go: the cancel ends it, not the handler
    assert not reader.is_alive(), f"the stream is still open: {events}"
    assert events and events[-1].get("event") == "error", events
    final = json.loads(events[-1]["data"])
    assert final["code"] == "CANCELLED" and final["jobId"] == job, final
    tab.goto(f"/jobs/{job}")
    expect(tab.get_by_test_id("status")).to_have_text("cancelled")
    _shot(tab, "console-actions-cancelled-job")
    assert plane.status(job) == "cancelled"
    _audit_lists(tab, ("cancel", 1))


def test_a_viewer_cannot_act_and_an_end_user_cannot_sign_in(tab: Page, plane: Plane) -> None:
    expect = _expect()
    plane.reset()
    job = plane.console.add_job(T, "poison", error="RuntimeError: boom")
    _sign_in(tab, viewer_token())
    expect(tab.get_by_test_id("who")).to_contain_text("viewer")
    tab.goto(f"/jobs?type={T}&status=poison")
    expect(tab.get_by_test_id("job-row")).to_have_count(1)
    for button in ("bulk-retry", "bulk-discard", "queue-pause", "queue-resume"):
        expect(tab.get_by_test_id(button)).to_have_count(0)
    tab.goto(f"/jobs/{job}")
    expect(tab.get_by_test_id("status")).to_have_text("poison")
    for button in ("job-retry", "job-discard", "job-cancel"):
        expect(tab.get_by_test_id(button)).to_have_count(0)
    _shot(tab, "console-actions-viewer-job")
    # A POST the page does not offer, with the viewer's own cookie and CSRF token: the
    # role refuses it, not the CSRF check.
    csrf = tab.locator('form[action="/logout"] input[name="csrf"]').get_attribute("value")
    assert csrf
    for path in (f"/jobs/{job}/retry", f"/jobs/{job}/discard", f"/queues/{T}/pause"):
        refused = tab.request.post(path, form={"csrf": csrf})
        assert refused.status == 403 and "a viewer cannot act" in refused.text(), path
    assert plane.status(job) == "poison"
    assert plane.rows("SELECT count(*) FROM maestro_paused") == [(0,)]
    assert plane.rows("SELECT count(*) FROM dataplane_audit") == [(0,)]

    user = tab.context.browser.new_context(base_url=plane.console.base)  # type: ignore[union-attr]
    user.set_default_timeout(TIMEOUT_MS)
    try:
        page = user.new_page()
        page.goto("/login")
        page.locator("textarea[name=token]").fill(END_USER)
        with page.expect_response(lambda r: r.request.method == "POST") as answer:
            page.get_by_test_id("sign-in").click()
        assert answer.value.status == 403
        expect(page.get_by_test_id("error")).to_contain_text("no console role")
        _shot(page, "console-actions-end-user-refused")
        assert user.cookies() == []  # no session was set
        assert page.goto("/").status == 401  # type: ignore[union-attr]
    finally:
        user.close()
