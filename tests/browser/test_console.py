"""The operator console in Chromium (issue #41): sign in with an operator's token, see
the poison cards first and watch them update live over SSE, filter the jobs list; a
viewer sees no action; a job a real handler failed shows each attempt and its
traceback (issue 55). A real ``dataplane console`` on a queue DB of its own
(tests/console.py); screenshots in artifacts/screenshots/ as the demo page's tests."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.browser.conftest import SCREENSHOTS, TIMEOUT_MS, launched_chromium
from tests.console import TRACE_URL, Console, operator_token, running_console, viewer_token
from tests.helpers import WorkerProcess, capcom_process, envelope, failing_surface

CAPCOM_TOKEN = "capcom-token-of-the-console-browser-tests"

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page


@pytest.fixture(scope="module")
def console(
    pg_admin_dsn: str, template_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Console]:
    logs = tmp_path_factory.mktemp("console-browser")
    with running_console(pg_admin_dsn, template_db, logs) as c:
        yield c


@pytest.fixture(scope="module")
def chromium(console: Console) -> Iterator[Browser]:
    with launched_chromium() as browser:
        yield browser


@pytest.fixture
def tab(chromium: Browser, console: Console) -> Iterator[Page]:
    from playwright.sync_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    context = chromium.new_context(base_url=console.base, viewport={"width": 1400, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "console",
        lambda msg: errors.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    try:
        yield page
    finally:
        context.close()
    assert not errors, f"errors on the page: {errors}"


def _shot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def _sign_in(page: Page, tok: str) -> None:
    page.goto("/login")
    page.locator("textarea[name=token]").fill(tok)
    page.get_by_test_id("sign-in").click()
    page.wait_for_url("**/")


def _expect() -> Any:
    from playwright.sync_api import expect

    return expect


def test_an_operator_sees_the_poison_cards_first_and_live(tab: Page, console: Console) -> None:
    expect = _expect()
    console.clear()
    for _ in range(3):
        console.add_job("surface-zeta", "poison", error="RuntimeError: boom")
    for _ in range(5):
        console.add_job("surface-alpha", "pending")
    console.add_job("surface-alpha", "in_progress")
    _sign_in(tab, operator_token())
    cards = tab.get_by_test_id("card")
    expect(cards.first).to_have_attribute("data-type", "surface-zeta")
    expect(cards.first).to_have_class("card poison")
    expect(cards.first.locator('[data-key="poison"]')).to_have_text("3")
    alpha = tab.locator('[data-testid="card"][data-type="surface-alpha"]')
    expect(alpha.locator('[data-key="pending"]')).to_have_text("5")
    expect(alpha.locator('[data-key="in_flight"]')).to_have_text("1")
    _shot(tab, "console-wallboard")
    # Over SSE, without a reload: two more jobs go to poison.
    console.add_job("surface-zeta", "poison")
    console.add_job("surface-zeta", "poison")
    expect(cards.first.locator('[data-key="poison"]')).to_have_text("5")
    expect(tab.get_by_test_id("who")).to_contain_text("operator")


def test_an_operator_filters_the_jobs_list(tab: Page, console: Console) -> None:
    expect = _expect()
    console.clear()
    base = datetime.now(UTC) - timedelta(minutes=30)
    for i in range(4):
        console.add_job(
            "surface-zeta", "poison", error=f"ValueError: {i}", created_at=base + timedelta(i)
        )
    for i in range(3):
        console.add_job("surface-alpha", "done", created_at=base + timedelta(minutes=i))
    _sign_in(tab, operator_token())
    tab.goto("/jobs")
    expect(tab.get_by_test_id("job-row")).to_have_count(7)
    tab.locator('input[name="type"]').fill("surface-zeta")
    tab.locator('select[name="status"]').select_option("poison")
    tab.get_by_test_id("apply").click()
    expect(tab.get_by_test_id("job-row")).to_have_count(4)
    expect(tab.locator('[data-testid="job-row"] td[data-col="status"]').first).to_have_text(
        "poison"
    )
    expect(tab.get_by_test_id("bulk-retry")).to_be_visible()
    _shot(tab, "console-jobs")
    tab.locator('[data-testid="job-row"] a').first.click()
    expect(tab.get_by_test_id("status")).to_have_text("poison")
    _shot(tab, "console-job")


def test_a_viewer_sees_no_action(tab: Page, console: Console) -> None:
    expect = _expect()
    console.clear()
    job = console.add_job("surface-zeta", "poison")
    _sign_in(tab, viewer_token())
    expect(tab.get_by_test_id("who")).to_contain_text("viewer")
    tab.goto("/jobs")
    expect(tab.get_by_test_id("job-row")).to_have_count(1)
    expect(tab.get_by_test_id("bulk-retry")).to_have_count(0)
    tab.goto(f"/jobs/{job}")
    expect(tab.get_by_test_id("job-retry")).to_have_count(0)


def test_the_latency_alert_link_leads_to_the_slowest_job_and_its_trace(
    tab: Page, console: Console
) -> None:
    """The alerts' trace_url (``/jobs/slowest?since=1h``) opened in a browser not signed
    in: the 401 page's sign-in returns to it, and it lands on the slowest done job's
    page, whose trace link names that job's trace. Signed in, the sign-in link goes
    straight on (what a link from another site, sent no Strict cookie, needs)."""
    expect = _expect()
    console.clear()
    now = datetime.now(UTC)
    trace = "5b8efff798038103d269b633813fc60c"
    console.add_job("surface-alpha", "done", created_at=now - timedelta(seconds=1))
    slow = console.add_job(
        "surface-alpha",
        "done",
        created_at=now - timedelta(seconds=40),
        traceparent=f"00-{trace}-eee19b7ec3c1b174-01",
    )
    console.add_job("surface-alpha", "done", created_at=now - timedelta(seconds=5))
    tab.goto("/jobs/slowest?since=1h")
    expect(tab.get_by_test_id("error")).to_contain_text("sign in")
    tab.get_by_test_id("sign-in-link").click()
    tab.locator("textarea[name=token]").fill(viewer_token())
    tab.get_by_test_id("sign-in").click()
    tab.wait_for_url(f"**/jobs/{slow}")
    expect(tab.get_by_test_id("job-id")).to_have_text(slow)
    link = tab.get_by_test_id("trace")
    expect(link).to_have_text(trace)
    expect(link).to_have_attribute("href", TRACE_URL.format(trace_id=trace))
    _shot(tab, "console-slowest")
    tab.goto("/")
    tab.goto("/login?next=/jobs/slowest%3Fsince%3D1h")
    tab.wait_for_url(f"**/jobs/{slow}")
    expect(tab.get_by_test_id("trace")).to_have_text(trace)
    tab.goto("/jobs/slowest?since=1h&type=surface-none")
    expect(tab.get_by_test_id("error")).to_contain_text("no job of type surface-none completed")


def _failed_twice(console: Console, tmp_path: Path) -> tuple[str, str]:
    """A job of the ``shop`` surface package (tests/helpers.py: a real file outside the
    plane) that a real worker fails twice, poisoned, with capcom's two reports: its id
    and the surface's frame."""
    shop = failing_surface(tmp_path)
    common = {"MAESTRO_QUEUES_URL": console.dsn, "PYTHONUNBUFFERED": "1"}
    capcom = capcom_process(common, str(tmp_path / "capcom.log"), CAPCOM_TOKEN)
    worker = None
    try:
        capcom.wait_ready_blocking()
        worker = WorkerProcess(
            {
                **common,
                **shop.env,
                "SURFACE_QUEUE_TYPE": shop.queue_type,
                "DATAPLANE_FAIL_BACKOFF_SECONDS": "0",
                "DATAPLANE_CAPCOM_URL": capcom.base,
                "DATAPLANE_CAPCOM_TOKEN": CAPCOM_TOKEN,
            },
            str(tmp_path / "worker.log"),
        )
        worker.wait_ready_blocking()
        request = envelope("shop", "quote", {})  # as the BFF enqueues it: two tries
        (job,) = console.one(
            "INSERT INTO maestro_queues (type, dedupe_key, payload, client, max_dequeues)"
            " VALUES (%s, %s, %s, 'acme', 2) RETURNING id::text",
            (shop.queue_type, request.dedupe_key, json.dumps(request.to_json())),
        )
        deadline = time.monotonic() + 30
        while console.one(
            "SELECT count(*) FROM worker_runs r JOIN maestro_queues q ON q.id = r.job_id"
            " WHERE q.id = %s AND q.status = 'poison'",
            (job,),
        ) != (2,):
            assert time.monotonic() < deadline, worker.output()
            time.sleep(0.1)
        return job, shop.frame
    finally:
        for proc in (worker, capcom):
            if proc is not None:
                proc.stop()


def test_a_failed_job_s_page_shows_each_attempt_and_its_traceback(
    tab: Page, console: Console, tmp_path: Path
) -> None:
    expect = _expect()
    console.clear()
    job, frame = _failed_twice(console, tmp_path)
    _sign_in(tab, operator_token())
    tab.goto(f"/jobs/{job}")
    expect(tab.get_by_test_id("status")).to_have_text("poison")
    rows = tab.get_by_test_id("attempt")
    expect(rows).to_have_count(2)
    for i, outcome in enumerate(("failed", "poison")):
        row = rows.nth(i)
        expect(row.locator('[data-key="try"]')).to_have_text(str(i + 1))
        expect(row.locator('[data-key="outcome"]')).to_have_text(outcome)
        expect(row.locator('[data-key="worker"]')).to_contain_text("surface-shop@")
        expect(row.locator('[data-key="duration"]')).to_have_text(re.compile(r"^\d+\.\d$"))
        expect(row.locator('[data-key="error-type"]')).to_have_text("KeyError")
        expect(row.locator('[data-key="error-message"]')).to_have_text("'oops'")
        expect(row.locator('[data-key="frame"]')).to_have_text(frame)
    first = rows.first.get_by_test_id("traceback")
    expect(first.locator("pre")).to_be_hidden()  # collapsed until asked for
    first.locator("summary").click()
    expect(first.locator("pre")).to_be_visible()
    expect(first.locator("pre")).to_contain_text("KeyError: 'oops'")
    marks = first.get_by_test_id("surface-frame")
    expect(marks).to_have_count(2)  # quote, then price_of: the surface's own frames
    expect(marks.last).to_contain_text("shopsurface/__init__.py")
    expect(marks.last).to_contain_text("in price_of")
    expect(rows.nth(1).get_by_test_id("traceback").locator("pre")).to_be_hidden()
    _shot(tab, "console-job-attempts")
