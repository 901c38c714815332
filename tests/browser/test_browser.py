"""The demo page and dataClient.js in Chromium against the real stack (see conftest)."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pypdf import PdfReader

from tests.browser.conftest import Stack, browser_tools_missing

if TYPE_CHECKING:
    from playwright.sync_api import Page

_MS = re.compile(r"^\d+ ms$")
DEMO_SLOTS = (
    "users-list",
    "users-detail",
    "lv-branches",
    "lv-courses",
    "lv-learner",
    "acc-invoices",
    "acc-invoice",
    "skills-coverage",
    "skills-profile",
)


def _expect() -> Any:
    from playwright.sync_api import expect

    return expect


def _open(page: Page, url: str) -> None:
    """Open the page and wait for its first round (every panel's queries on load) to
    settle, so a test's own requests are the only ones after."""
    page.goto(url)
    _expect()(page.get_by_test_id("ready")).to_be_visible()
    _expect()(page.locator("body")).to_have_attribute("data-loaded", re.compile(r".+"))


def _cells(page: Page, table: str, column: str) -> list[str]:
    return page.locator(f'[data-testid="{table}"] td[data-col="{column}"]').all_inner_texts()


def _value(page: Page, table: str, key: str) -> str:
    return page.locator(f'[data-testid="{table}"] td[data-key="{key}"]').inner_text()


def _record_requests(page: Page) -> list[str]:
    """Every request the page makes from now on, as "METHOD path?query"."""
    log: list[str] = []
    page.on("request", lambda request: log.append(f"{request.method} {request.url}"))
    return log


def _kinds(log: list[str], job_id: str) -> list[str]:
    """The requests of ``log`` about one job: "stream", "poll", "blob" or "withdraw"."""
    kinds = []
    for line in log:
        if f"/q/{job_id}" in line:
            path = line.split("?")[0]
            kinds.append(
                "withdraw"
                if line.startswith("DELETE ")
                else "stream"
                if path.endswith("/stream")
                else "blob"
                if path.endswith("/blob")
                else "poll"
            )
    return kinds


def test_chromium_and_playwright_are_installed() -> None:
    missing = browser_tools_missing()
    assert missing is None, missing


def test_every_panel_fills_with_seeded_data(page: Page, stack: Stack, screenshot: Any) -> None:
    expect = _expect()
    _open(page, stack.page_url())
    expect(page).to_have_title("Surface Data Plane — demo")
    expect(page.get_by_test_id("token")).to_have_value(stack.token)
    expect(page.locator("body")).to_have_attribute("data-loaded", "true")

    # Nothing clicked: every panel ran its queries when the page opened.
    for key in DEMO_SLOTS:
        slot = page.get_by_test_id(f"slot-{key}")
        expect(slot).to_have_attribute("data-state", "done")
        expect(page.get_by_test_id(f"status-{key}")).to_contain_text("done")
        expect(page.get_by_test_id(f"e2e-{key}")).to_have_text(_MS)
        expect(page.get_by_test_id(f"cache-{key}")).to_be_visible()
        expect(page.get_by_test_id(f"coalesced-{key}")).to_have_attribute("data-value", "false")
    # Lists are cached by the worker; drill-downs (PII) never are.
    expect(page.get_by_test_id("cache-users-list")).to_have_attribute("data-value", "miss")
    expect(page.get_by_test_id("cache-users-detail")).to_have_attribute("data-value", "bypass")
    # The answer carries the execution's queue wait (claimed_at - created_at).
    expect(page.get_by_test_id("queue-users-list")).to_have_text(_MS)

    # users: the first page, in the order of the query, exactly as in the client DB.
    emails = _cells(page, "table-users-list-rows", "email")
    assert len(emails) == 10 and all(e.endswith("@acme.example") for e in emails), emails
    with_db = stack.demo_one(
        "SELECT array_agg(email ORDER BY full_name, id), (SELECT count(*) FROM lms.users"
        " WHERE client_id = 'acme') FROM (SELECT email, full_name, id FROM lms.users"
        " WHERE client_id = 'acme' ORDER BY full_name, id LIMIT 10) first_page"
    )
    assert emails == with_db[0]
    assert _value(page, "table-users-list-summary", "total") == str(with_db[1])
    user_id = page.get_by_test_id("user-id").input_value()
    email = stack.demo_one("SELECT email FROM lms.users WHERE id = %s", int(user_id))[0]
    assert _value(page, "table-users-detail-summary", "email") == email
    assert _value(page, "table-lv-learner-learner", "email") == email
    assert _value(page, "table-skills-profile-user", "id") == user_id

    # learnerviews: one row per acme branch.
    branches = sorted(_cells(page, "table-lv-branches-rows", "branch_id"))
    assert branches == ["acme-east", "acme-north", "acme-south", "acme-west"]
    expect(page.get_by_test_id("table-lv-courses-rows")).to_have_attribute("data-rows", "10")

    # accounting: acme's invoices, newest first, and the matching total.
    numbers = _cells(page, "table-acc-invoices-rows", "number")
    assert len(numbers) == 10 and all(n.startswith("INV-ACM-") for n in numbers), numbers
    newest, invoices = stack.demo_one(
        "SELECT (SELECT number FROM lms.invoices WHERE client_id = 'acme'"
        " ORDER BY issued_at DESC, id DESC LIMIT 1), count(*) FROM lms.invoices"
        " WHERE client_id = 'acme'"
    )
    assert numbers[0] == newest
    assert _value(page, "table-acc-invoices-summary", "total") == str(invoices)
    assert _value(page, "table-acc-invoice-invoice", "number") == newest

    # skills: every acme skill for every acme branch.
    skills = stack.demo_one("SELECT count(*) FROM lms.skills WHERE client_id = 'acme'")[0]
    expect(page.get_by_test_id("table-skills-coverage-rows")).to_have_attribute(
        "data-rows", str(4 * skills)
    )
    screenshot("01-panels")

    # The same list again ("Run all panels") is a worker cache hit.
    page.get_by_test_id("run-all").click()
    expect(page.get_by_test_id("cache-users-list")).to_have_attribute("data-value", "hit")
    expect(page.get_by_test_id("slot-users-list")).to_have_attribute("data-state", "done")

    # The token survives a reload without ?token= (localStorage).
    _open(page, "/")
    expect(page.get_by_test_id("token")).to_have_value(stack.token)


def test_burst_of_50_identical_queries_is_one_execution(
    page: Page, stack: Stack, screenshot: Any
) -> None:
    expect = _expect()
    _open(page, stack.page_url())
    page.get_by_test_id("burst-ms").fill("1234")
    page.get_by_test_id("burst-run").click()
    result = page.get_by_test_id("burst-result")
    expect(result).to_have_attribute("data-state", "done")
    expect(result).to_have_text("50 answers, 1 execution")
    expect(result).to_have_attribute("data-answers", "50")
    expect(result).to_have_attribute("data-executions", "1")
    expect(result).to_have_attribute("data-coalesced", "49")
    expect(page.get_by_test_id("slot-burst")).to_have_attribute("data-state", "done")
    screenshot("02-burst")

    job_id = result.get_attribute("data-job-ids")
    assert job_id
    rows, status = stack.queue_one(
        "SELECT count(*), min(status) FROM maestro_queues"
        " WHERE dedupe_key = (SELECT dedupe_key FROM maestro_queues WHERE id = %s)",
        job_id,
    )
    assert (rows, status) == (1, "done")


def test_invoice_pdf_downloads_as_a_pdf(page: Page, stack: Stack) -> None:
    expect = _expect()
    _open(page, stack.page_url())
    page.get_by_test_id("run-acc-invoices").click()
    expect(page.get_by_test_id("slot-acc-invoices")).to_have_attribute("data-state", "done")
    number = _cells(page, "table-acc-invoices-rows", "number")[0]
    button = page.get_by_test_id("invoice-pdf")
    expect(button).to_be_enabled()
    with page.expect_download() as info:
        button.click()
    download = info.value
    assert download.suggested_filename == f"invoice-{number}.pdf"
    data = Path(download.path()).read_bytes()
    assert data.startswith(b"%PDF")
    text = "".join(p.extract_text() for p in PdfReader(io.BytesIO(data)).pages)
    assert f"Invoice {number}" in text
    expect(page.get_by_test_id("pdf-info")).to_contain_text(f"{len(data)} bytes, application/pdf")
    expect(page.get_by_test_id("cache-acc-pdf")).to_have_attribute("data-value", "bypass")


def test_an_aborted_query_stops_cleanly(page: Page, stack: Stack) -> None:
    expect = _expect()
    _open(page, stack.page_url())
    log = _record_requests(page)
    outcome = page.evaluate("() => dataplaneDemo.abortAt('probe', 'sleep', {ms: 2000}, 'queued')")
    assert outcome["outcome"] == "rejected" and outcome["name"] == "AbortError", outcome
    assert outcome["events"] == ["queued"] and outcome["openStreams"] == 0, outcome
    # The abort withdraws the page from the job (one DELETE): nobody else waits for it,
    # so it is cancelled, pending or running (a page that merely goes away, or whose
    # stream times out, withdraws nothing). The page asks nothing more about it (no
    # stream reconnect, no poll, no blob), well past the job's end.
    page.wait_for_timeout(3500)
    assert _kinds(log, outcome["jobId"]) == ["stream", "withdraw"], log
    (status,) = stack.queue_one("SELECT status FROM maestro_queues WHERE id = %s", outcome["jobId"])
    assert status == "cancelled", status

    # The same through the page's buttons.
    page.get_by_test_id("abort-ms").fill("3000")
    page.get_by_test_id("abort-start").click()
    expect(page.get_by_test_id("status-abort")).to_contain_text("queued")
    page.get_by_test_id("abort-stop").click()
    # Said in words, not as the browser's "AbortError: signal is aborted without reason".
    expect(page.get_by_test_id("abort-output")).to_have_text(
        "Aborted: the job was withdrawn · open streams: 0"
    )
    expect(page.get_by_test_id("slot-abort")).to_have_attribute("data-state", "error")
    expect(page.get_by_test_id("status-abort")).to_contain_text("aborted")
    expect(page.get_by_test_id("error-abort")).to_have_text("Aborted: the job was withdrawn")
    assert "signal is aborted" not in page.get_by_test_id("panel-probe").inner_text()


def test_stream_timeout_falls_back_to_polling(page: Page, stack: Stack) -> None:
    _open(page, stack.page_url(stack.short_deadline_base))
    started = time.monotonic()
    # 3.5 s: past the POST's 1 s Prefer wait and the stream's 1 s deadline, with room.
    answer = page.evaluate("() => dataplaneDemo.query('probe', 'sleep', {ms: 3500})")
    assert answer["ok"], answer
    assert answer["result"] == {"slept_ms": 3500}
    assert time.monotonic() - started < 15
    names = [name for name, _ in answer["events"]]
    data = dict(answer["events"])
    assert names[:2] == ["queued", "error"] and data["error"]["code"] == "TIMEOUT", names
    polls = [d["httpStatus"] for name, d in answer["events"] if name == "poll"]
    assert polls[-1] == 200 and 202 in polls and names[-1] == "done", answer["events"]
    assert data["done"]["result"] == {"slept_ms": 3500}

    # Aborting while polling stops the polling and withdraws the page from the job.
    log = _record_requests(page)
    outcome = page.evaluate("() => dataplaneDemo.abortAt('probe', 'sleep', {ms: 4000}, 'poll')")
    assert outcome["outcome"] == "rejected" and outcome["name"] == "AbortError", outcome
    assert outcome["events"] == ["queued", "error", "poll"], outcome
    page.wait_for_timeout(3000)  # polls came every second before the abort
    assert _kinds(log, outcome["jobId"]) == ["stream", "poll", "withdraw"], log


def test_a_stream_that_cannot_connect_falls_back_to_polling(page: Page, stack: Stack) -> None:
    _open(page, stack.page_url())
    page.route(re.compile(r"/stream\?"), lambda route: route.abort())
    # Slower than the POST's 1 s Prefer wait, so the client turns to the stream.
    answer = page.evaluate("() => dataplaneDemo.query('probe', 'sleep', {ms: 1600})")
    assert answer["ok"] and answer["result"] == {"slept_ms": 1600}, answer
    names = [name for name, _ in answer["events"]]
    assert "queued" not in names and "error" not in names, names
    assert names[-2:] == ["poll", "done"] and answer["events"][-2][1]["httpStatus"] == 200


def _record_posts(page: Page) -> list[tuple[str, str | None]]:
    """Every POST the page makes from now on, as (path, its Prefer header)."""
    posts: list[tuple[str, str | None]] = []

    def record(request: Any) -> None:
        if request.method == "POST":
            posts.append((request.url.split("?")[0], request.headers.get("prefer")))

    page.on("request", record)
    return posts


def test_a_fast_answer_comes_in_one_round_trip(page: Page, stack: Stack) -> None:
    _open(page, stack.page_url())
    log = _record_requests(page)
    posts = _record_posts(page)
    answer = page.evaluate("() => dataplaneDemo.query('probe', 'echo', {value: 'one trip'})")
    assert answer["ok"] and answer["result"] == {"echo": "one trip", "client": "acme"}, answer
    assert [name for name, _ in answer["events"]] == ["done"], answer["events"]
    job_id = answer["events"][0][1]["jobId"]
    assert posts == [(f"{stack.base}/api/probe/q", "wait=1")], posts
    # The POST's 200 carried the answer: no EventSource, no poll, nothing else asked.
    assert not any("/stream" in line for line in log) and _kinds(log, job_id) == [], log
    assert len(log) == 1, log
    assert page.evaluate("() => dataplaneDemo.openStreams()") == 0


def test_a_slow_answer_comes_over_the_stream(page: Page, stack: Stack) -> None:
    _open(page, stack.page_url())
    log = _record_requests(page)
    answer = page.evaluate("() => dataplaneDemo.query('probe', 'sleep', {ms: 1700})")
    assert answer["ok"] and answer["result"] == {"slept_ms": 1700}, answer
    names = [name for name, _ in answer["events"]]
    assert names == ["queued", "done"], answer["events"]  # the POST's wait ran out: 202
    job_id = answer["events"][-1][1]["jobId"]
    assert _kinds(log, job_id) == ["stream"], log


def test_a_job_that_reports_progress_fills_its_bar(page: Page, stack: Stack) -> None:
    expect = _expect()
    _open(page, stack.page_url())
    answer = page.evaluate("() => dataplaneDemo.query('probe', 'progress', {steps: 4, ms: 400})")
    assert answer["ok"] and answer["result"] == {"steps": 4}, answer
    # The POST waited 1 s (Prefer: wait) before its 202: the stream then gets the kept
    # progress first, then each newer one, then the answer.
    names = [name for name, _ in answer["events"]]
    assert names[0] == "queued" and names[-1] == "done" and "progress" in names, names
    done = [data["done"] for name, data in answer["events"] if name == "progress"]
    assert done == sorted(set(done)) and done[0] >= 1, answer["events"]

    # Through the page's button: the slot's bar fills step by step, then the job is done.
    page.get_by_test_id("progress-steps").fill("5")
    page.get_by_test_id("progress-ms").fill("500")
    page.get_by_test_id("progress-start").click()
    bar = page.get_by_test_id("progress-progress")
    expect(bar).to_be_visible()
    expect(page.get_by_test_id("progress-message-progress")).to_have_text("step 2 of 5")
    assert 0.2 < float(bar.evaluate("b => b.value")) < 1.0
    expect(page.get_by_test_id("slot-progress")).to_have_attribute("data-state", "done")
    expect(page.get_by_test_id("status-progress")).to_contain_text("progress ×5")
    assert float(bar.evaluate("b => b.value")) == 1.0


def test_a_parked_job_is_a_typed_poison_error(page: Page, stack: Stack) -> None:
    _open(page, stack.page_url())
    answer = page.evaluate(
        "() => dataplaneDemo.query('probe', 'fail', {times: 5, nonce: 'browser-poison'})"
    )
    assert not answer["ok"], answer
    assert (answer["name"], answer["status"], answer["code"]) == ("DataPlaneError", 500, "POISON")
    assert "failed 2 time(s)" in answer["message"] and answer["jobId"], answer
    name, data = answer["events"][-1]
    assert name == "error" and data["code"] == "POISON", answer["events"]
    assert stack.queue_one("SELECT status FROM maestro_queues WHERE id = %s", answer["jobId"]) == (
        "poison",
    )


def test_a_failed_attempt_shows_in_its_panel_while_the_job_waits(page: Page, stack: Stack) -> None:
    """The fail panel says which attempt failed, with what, and when the next try is due
    while the job waits out its backoff (the stack's workers: 2 s, at most 2 attempts;
    no notify secret: the BFF reads the row), then the answer of the attempt that
    succeeded, the failed one still said."""
    expect = _expect()
    _open(page, stack.page_url())
    page.get_by_test_id("fail-times").fill("1")
    page.get_by_test_id("fail-start").click()
    line = page.get_by_test_id("retry-fail")
    failed = "attempt 1 of 2 failed: ProbeFailure: probe.fail: attempt 1 of 1"
    expect(line).to_have_text(re.compile(rf"^{re.escape(failed)}; next try in [12] s$"))
    assert 0 < int(line.get_attribute("data-retry-in-ms") or 0) <= 2000
    expect(page.get_by_test_id("slot-fail")).to_have_attribute("data-state", "done")
    expect(line).to_have_text(failed)  # the wait is over; what failed stays
    expect(page.get_by_test_id("status-fail")).to_contain_text("attempt 1 failed → done")
    assert _value(page, "table-fail-summary", "succeeded_on_attempt") == "2"


ERROR_CASES = {
    # case: (status, code, part of the message, after enqueue?)
    "bad-token": ("401", "UNAUTHORIZED", "", False),
    "unknown-op": ("404", "NOT_FOUND", "unknown operation 'noSuchOperation'", False),
    "bad-params": ("400", "BAD_REQUEST", "limit", False),
    "reject-400": ("400", "BAD_REQUEST", "the probe rejects this (400)", True),
    "reject-404": ("404", "NOT_FOUND", "the probe found nothing (404)", True),
}


def _expect_error_slot(page: Page, case: str) -> None:
    """The slot of ``case`` holds its own typed error, field by field."""
    expect = _expect()
    status, code, message, enqueued = ERROR_CASES[case]
    out = page.get_by_test_id(f"error-output-{case}")
    expect(out).to_be_visible()
    expect(out).to_have_attribute("data-case", case)
    expect(out).to_have_attribute("data-name", "DataPlaneError")
    expect(out).to_have_attribute("data-status", status)
    expect(out).to_have_attribute("data-code", code)
    expect(page.get_by_test_id(f"error-{case}-message")).to_contain_text(message)
    job = page.get_by_test_id(f"error-{case}-job")
    if enqueued:
        expect(job).not_to_have_text("—")
    else:
        expect(job).to_have_text("—")
    expect(page.get_by_test_id(f"slot-err-{case}")).to_have_attribute("data-state", "error")
    expect(page.get_by_test_id(f"error-err-{case}")).to_contain_text(f"{status} {code}")


def test_error_paths_are_typed_errors_each_in_its_own_slot(
    page: Page, stack: Stack, screenshot: Any
) -> None:
    expect = _expect()
    _open(page, stack.page_url())
    # Run on load, unclicked: five slots, each with its case's error, side by side.
    expect(page.get_by_test_id("error-slots").locator(".slot")).to_have_count(len(ERROR_CASES))
    for case in ERROR_CASES:
        _expect_error_slot(page, case)
    messages = [page.get_by_test_id(f"error-{case}-message").inner_text() for case in ERROR_CASES]
    assert len(set(messages)) == len(ERROR_CASES), messages
    screenshot("03-errors")
    # A case run again fills its own slot and leaves the others as they were.
    before = page.get_by_test_id("error-reject-404-job").inner_text()
    for case in ERROR_CASES:
        page.get_by_test_id(f"run-err-{case}").click()
        _expect_error_slot(page, case)
    page.get_by_test_id("run-err-reject-400").click()
    expect(page.get_by_test_id("error-output-reject-404")).to_have_attribute("data-status", "404")
    assert page.get_by_test_id("error-reject-404-job").inner_text() not in ("—", before)


def test_without_a_token_the_panels_wait_for_one(browser: Any, stack: Stack) -> None:
    """No token yet: nothing runs and the page says so; a pasted one runs every panel."""
    expect = _expect()
    context = browser.new_context(base_url=stack.base, viewport={"width": 1400, "height": 1000})
    try:
        page = context.new_page()
        page.goto("/")
        expect(page.locator("body")).to_have_attribute("data-loaded", "no-token")
        expect(page.get_by_test_id("first-round")).to_have_text("paste a token to run the panels")
        expect(page.get_by_test_id("slot-users-list")).to_have_attribute("data-state", "idle")
        page.get_by_test_id("token").fill(stack.token)
        page.get_by_test_id("token").dispatch_event("change")
        expect(page.locator("body")).to_have_attribute("data-loaded", "true")
        for key in DEMO_SLOTS:
            expect(page.get_by_test_id(f"slot-{key}")).to_have_attribute("data-state", "done")
    finally:
        context.close()


_OVERFLOWS = """() => [...document.querySelectorAll('table')].flatMap((table) => {
  const panel = table.closest('.panel');
  const box = panel.getBoundingClientRect();
  const style = getComputedStyle(panel);
  const left = box.left + parseFloat(style.borderLeftWidth) + parseFloat(style.paddingLeft);
  const right = box.right - parseFloat(style.borderRightWidth) - parseFloat(style.paddingRight);
  const at = table.getBoundingClientRect();
  const out = table.closest('.out');
  const scrolls = out && out.scrollWidth > out.clientWidth + 1;
  const fits = at.left >= left - 1 && at.right <= right + 1 && !scrolls && box.right <= innerWidth;
  return fits ? [] : [{table: table.dataset.testid, width: at.width, panel: right - left,
                       viewport: innerWidth, panelRight: box.right, scrolls}];
})"""


def test_every_table_fits_its_panel_wide_and_narrow(
    page: Page, stack: Stack, screenshot: Any
) -> None:
    """No table is wider than its panel's content box, nor does it need a sideways scroll,
    and no panel runs past the viewport: on a wide screen and on a phone's."""
    _open(page, stack.page_url())
    for width, shot in ((1400, None), (390, "04-narrow")):
        page.set_viewport_size({"width": width, "height": 900})
        page.evaluate("() => dataplaneDemo.runAll()")
        tables = page.locator("table").count()
        assert tables >= 10, tables
        assert page.evaluate(_OVERFLOWS) == [], width
        assert page.evaluate("() => document.documentElement.scrollWidth <= innerWidth"), width
        if shot:
            screenshot(shot)
