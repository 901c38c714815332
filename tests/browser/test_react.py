"""``@surface-dataplane/client/react`` in Chromium with real React (issue 42, item 4).

The package is built (``npm run build`` in clients/js), then esbuild bundles
tests/browser/react_app.tsx with React, react-dom and the built ``dist/react.js`` and
``dist/index.js`` (imported by the package's name, through its ``exports``) into one
file. Playwright serves that page and its bundle on the BFF's own origin
(``page.route``, only those two paths): every query goes to the real BFF and the real
probe worker of the browser stack (see conftest). The app runs React's development
build under StrictMode, so the double mount of development is part of every test.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.browser.conftest import Stack

if TYPE_CHECKING:
    from playwright.sync_api import Page, Request, Route

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "js"
APP = Path(__file__).with_name("react_app.tsx")
PAGE_PATH = "/react-test/"
BUILD_WITHIN = 120  # seconds for npm run build, esbuild, tsc
SETTLED_WITHIN = 20.0  # seconds for a withdrawn job to reach a final status
_STREAM = re.compile(r"/api/probe/q/([^/?]+)/stream")
_LINKED = ("react", "react-dom", "@types/react", "@types/react-dom")
_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>useQuery</title></head>
<body><div id="root"></div><script src="{path}app.js"></script></body></html>
"""


@dataclass(frozen=True)
class App:
    dir: Path  # app.tsx, its node_modules (links into clients/js) and tsconfig.json
    bundle: bytes


def _run(args: list[str], cwd: Path) -> str:
    done = subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=BUILD_WITHIN, check=False
    )
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> App:
    """The package freshly built, the test app bundled (fails, never skips, without npm)."""
    modules = PACKAGE / "node_modules"
    if not (modules / ".bin" / "esbuild").exists():
        pytest.fail(f"{modules} is missing: run npm ci in clients/js", pytrace=False)
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("npm is missing: `apt-get install -y npm` (Debian's Node)", pytrace=False)
    _run([npm, "run", "build"], PACKAGE)
    for built in ("react.js", "react.d.ts", "index.js"):
        assert (PACKAGE / "dist" / built).is_file(), f"npm run build wrote no dist/{built}"

    # The app imports the package by name, as a team's app would: a node_modules of
    # links, so the one React of clients/js is bundled once.
    where = tmp_path_factory.mktemp("react-app")
    (where / "node_modules" / "@types").mkdir(parents=True)
    (where / "node_modules" / "@surface-dataplane").mkdir()
    (where / "node_modules" / "@surface-dataplane" / "client").symlink_to(PACKAGE)
    for name in _LINKED:
        (where / "node_modules" / name).symlink_to(modules / name)
    shutil.copyfile(APP, where / "app.tsx")
    tsconfig = {
        "compilerOptions": {
            "target": "es2022",
            "module": "esnext",
            "moduleResolution": "bundler",
            "lib": ["es2022", "dom", "dom.iterable"],
            "jsx": "react-jsx",
            "types": [],
            "strict": True,
            "noEmit": True,
            "skipLibCheck": True,
        },
        "files": ["app.tsx"],
    }
    (where / "tsconfig.json").write_text(json.dumps(tsconfig))
    _run(
        [
            str(modules / ".bin" / "esbuild"),
            "app.tsx",
            "--bundle",
            "--format=iife",
            "--target=es2022",
            "--jsx=automatic",
            "--define:process.env.NODE_ENV='development'",
            "--outfile=app.js",
            "--log-level=warning",
        ],
        where,
    )
    return App(where, (where / "app.js").read_bytes())


@pytest.fixture
def harness(page: Page, stack: Stack, app: App) -> Page:
    """The test app open on the BFF's origin, its harness ready."""

    def serve(route: Route) -> None:
        path = route.request.url.split("?")[0].removeprefix(stack.base)
        if path == PAGE_PATH:
            route.fulfill(body=_PAGE.format(path=PAGE_PATH), content_type="text/html")
        elif path == f"{PAGE_PATH}app.js":
            route.fulfill(body=app.bundle, content_type="text/javascript")
        else:
            route.fallback()

    page.route(f"{stack.base}{PAGE_PATH}**", serve)
    page.goto(f"{PAGE_PATH}?token={stack.token}")
    page.wait_for_function("() => window.harness !== undefined")
    return page


@pytest.fixture
def requests(harness: Page) -> Iterator[list[Request]]:
    """Every request of the page from now on."""
    log: list[Request] = []
    harness.on("request", lambda request: log.append(request))
    yield log


def _expect() -> Any:
    from playwright.sync_api import expect

    return expect


def _show(page: Page, view: str | None, **props: Any) -> None:
    page.evaluate("([view, props]) => harness.show(view, props)", [view, props])


def _log(page: Page) -> list[dict[str, Any]]:
    return page.evaluate("() => harness.log")  # type: ignore[no-any-return]


def _seen(requests: list[Request]) -> list[str]:
    """The requests as "METHOD path" (without the signed query), at most 30: a message."""
    lines = [f"{r.method} {r.url.split('?')[0]}" for r in requests]
    return lines if len(lines) <= 30 else [*lines[:30], f"... {len(lines) - 30} more"]


def _posts(requests: list[Request]) -> list[dict[str, Any]]:
    return [json.loads(r.post_data or "") for r in requests if r.method == "POST"]


def _stream_job(page: Page, requests: list[Request], *, besides: str = "") -> str:
    """The job of the first stream the page opened (another job's than ``besides``)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for request in requests:
            if (match := _STREAM.search(request.url)) and match.group(1) != besides:
                return match.group(1)
        page.wait_for_timeout(50)
    raise AssertionError(f"no stream opened: {_seen(requests)}")


def _about(requests: list[Request], job_id: str) -> list[str]:
    """The page's requests about one job: "stream", "poll" or "withdraw"."""
    kinds = []
    for request in requests:
        if f"/q/{job_id}" in request.url:
            path = request.url.split("?")[0]
            kinds.append(
                "withdraw"
                if request.method == "DELETE"
                else "stream"
                if path.endswith("/stream")
                else "poll"
            )
    return kinds


def _wait_settled(stack: Stack, job_id: str) -> str:
    """The job's final status (done or cancelled), waited for within SETTLED_WITHIN."""
    deadline = time.monotonic() + SETTLED_WITHIN
    while time.monotonic() < deadline:
        (status,) = stack.queue_one("SELECT status FROM maestro_queues WHERE id = %s", job_id)
        if status in ("done", "cancelled"):
            return str(status)
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} still {status} after {SETTLED_WITHIN}s")


def test_the_hook_is_typed_by_the_plane_types(app: App) -> None:
    # The app's typed calls compile and each @ts-expect-error is an error indeed (an
    # unused one fails tsc): a wrong operation, surface or param type, missing params.
    _run([str(PACKAGE / "node_modules" / ".bin" / "tsc"), "-p", "tsconfig.json"], app.dir)
    # React is the app's to bring (a peer): the built hook imports it, never holds it.
    built = (PACKAGE / "dist" / "react.js").read_text()
    assert re.search(r'^import .* from "react";$', built, re.M), built[:500]
    assert "react.development" not in built and len(built) < 16_000


def test_loading_then_the_typed_answer(harness: Page, requests: list[Request]) -> None:
    expect = _expect()
    _show(harness, "echo", value="from react")
    state = harness.get_by_test_id("state")
    expect(state).to_have_attribute("data-status", "success")
    expect(state).to_have_text("from react for acme")
    assert [e["status"] for e in _log(harness)] == ["loading", "success"], _log(harness)
    # StrictMode's mount, unmount, mount sent one POST (the first run was aborted
    # before it left), and it answered in its own 200: nothing else was asked.
    assert _posts(requests) == [{"operation": "echo", "params": {"value": "from react"}}], _seen(
        requests
    )
    assert len(requests) == 1, _seen(requests)

    # Rendered again with equal params (a new object every render): no new query.
    _show(harness, "echo", value="from react")
    _show(harness, "echo", value="from react")
    harness.wait_for_timeout(300)
    assert len(requests) == 1, _seen(requests)
    # refetch() runs it again; the answer stays shown while it runs.
    harness.get_by_test_id("refetch").click()
    expect(state).to_have_attribute("data-status", "success")
    harness.wait_for_function("() => harness.log.length >= 4")
    assert [(e["status"], e["text"]) for e in _log(harness)][2:] == [
        ("loading", "from react for acme"),
        ("success", "from react for acme"),
    ], _log(harness)
    assert len(_posts(requests)) == 2, _seen(requests)


def test_enabled_false_waits_until_enabled(harness: Page, requests: list[Request]) -> None:
    expect = _expect()
    state = harness.get_by_test_id("state")
    _show(harness, "echo", value="later", enabled=False)
    expect(state).to_have_attribute("data-status", "idle")
    harness.wait_for_timeout(300)
    assert requests == [], _seen(requests)
    _show(harness, "echo", value="later", enabled=True)
    expect(state).to_have_text("later for acme")
    assert len(_posts(requests)) == 1, _seen(requests)
    # Disabled again: the answer stays, nothing is asked; refetch() still runs it.
    _show(harness, "echo", value="later", enabled=False)
    harness.wait_for_timeout(300)
    expect(state).to_have_attribute("data-status", "success")
    assert len(_posts(requests)) == 1, _seen(requests)
    harness.get_by_test_id("refetch").click()
    harness.wait_for_function("() => harness.log.length >= 5")
    expect(state).to_have_attribute("data-status", "success")
    assert len(_posts(requests)) == 2, _seen(requests)


def test_progress_shows_while_the_job_runs(harness: Page) -> None:
    expect = _expect()
    _show(harness, "progress", steps=5, ms=700)
    state = harness.get_by_test_id("state")
    expect(state).to_have_attribute("data-message", "step 4 of 5")
    expect(state).to_have_attribute("data-status", "loading")
    expect(state).to_have_attribute("data-status", "success")
    expect(state).to_have_text("5 steps")
    log = _log(harness)
    seen = [e["progress"] for e in log if e["status"] == "loading" and e["progress"]]
    # The POST held the first second (Prefer: wait), the stream then gave the latest
    # progress kept and each newer one: several, in order, before the answer.
    assert len(seen) >= 2 and seen == sorted(set(seen)) and seen[-1] <= 5, log
    assert log[-1] == {
        "view": "progress",
        "status": "success",
        "text": "5 steps",
        "progress": 5,
        "error": None,
    }, log


def test_a_failed_attempt_shows_while_the_job_waits_and_stays(harness: Page) -> None:
    """``jobRetry``: the attempt the plane tries again (the stack's workers wait 2 s before
    the next, of 2 at most), shown while the job waits and kept once it answered."""
    expect = _expect()
    _show(harness, "fail", times=1, nonce=f"react-{time.monotonic()}")
    state = harness.get_by_test_id("state")
    failed = "1 of 2: ProbeFailure: probe.fail: attempt 1 of 1"
    expect(state).to_have_attribute("data-retry", failed)
    expect(state).to_have_attribute("data-status", "success")
    expect(state).to_have_text("succeeded on attempt 2")
    expect(state).to_have_attribute("data-retry", failed)


def test_an_error_answer_is_a_data_plane_error(harness: Page) -> None:
    expect = _expect()
    _show(harness, "reject", status=404, message="nothing here (404)")
    state = harness.get_by_test_id("state")
    expect(state).to_have_attribute("data-status", "error")
    expect(state).to_have_attribute("data-error-class", "DataPlaneError")
    expect(state).to_have_attribute("data-error-status", "404")
    expect(state).to_have_attribute("data-error-code", "NOT_FOUND")
    expect(state).to_have_text("nothing here (404)")
    expect(state).not_to_have_attribute("data-error-job", "")  # the job answered it
    assert [e["status"] for e in _log(harness)] == ["loading", "error"], _log(harness)


def test_unmount_withdraws_the_job_once(
    harness: Page, stack: Stack, requests: list[Request]
) -> None:
    _show(harness, "sleep", ms=3000)
    job_id = _stream_job(harness, requests)
    _show(harness, None)
    # Nobody else waits for it: the withdrawal cancels it, running or not; wait for its
    # end, then check the page asked nothing more (no reconnect, no poll, no answer).
    assert _wait_settled(stack, job_id) == "cancelled"
    harness.wait_for_timeout(500)
    assert _about(requests, job_id) == ["stream", "withdraw"], _seen(requests)
    assert len(_posts(requests)) == 1, _seen(requests)
    assert harness.evaluate("() => harness.openStreams()") == 0
    # The aborted run's rejection was ignored: no error state was ever committed.
    assert [e["status"] for e in _log(harness)] == ["loading"], _log(harness)


def test_a_params_change_aborts_the_old_query(
    harness: Page, stack: Stack, requests: list[Request]
) -> None:
    expect = _expect()
    state = harness.get_by_test_id("state")
    _show(harness, "sleep", ms=3000)
    old = _stream_job(harness, requests)
    _show(harness, "sleep", ms=1200)
    new = _stream_job(harness, requests, besides=old)
    expect(state).to_have_text("slept 1200")
    assert _posts(requests) == [
        {"operation": "sleep", "params": {"ms": 3000}},
        {"operation": "sleep", "params": {"ms": 1200}},
    ], _seen(requests)
    assert _wait_settled(stack, old) == "cancelled"  # its only requester withdrew
    harness.wait_for_timeout(500)
    assert _about(requests, old) == ["stream", "withdraw"], _seen(requests)
    assert _about(requests, new) == ["stream"], _seen(requests)
    assert harness.evaluate("() => harness.openStreams()") == 0
    # The old query's end (rejected as aborted) changed nothing: still the new answer.
    expect(state).to_have_text("slept 1200")
    assert [(e["status"], e["text"]) for e in _log(harness)] == [
        ("loading", ""),
        ("success", "slept 1200"),
    ], _log(harness)
