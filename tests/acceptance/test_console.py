"""The operator console (issue #41) as a real ``dataplane console`` process on real
Postgres: who may see and do what, the wallboard's counts, the jobs list's filters and
keyset pages, a job's page and its attempts. (The actions' own effects are tested once
the operators' functions they call are in: tests of those go with them.)"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import jwt
import pytest

from tests.console import (
    TRACE_URL,
    VIEWER,
    Console,
    operator_token,
    running_console,
    viewer_token,
)
from tests.helpers import JWT_SECRET, token

VENDOR = Path(__file__).resolve().parents[2] / "dataplane" / "console" / "static" / "vendor"
# npm pack htmx.org@2.0.11 and htmx-ext-sse@2.2.4: dist/htmx.min.js, dist/sse.js, LICENSE.
VENDORED = {
    "htmx-2.0.11.min.js": "d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717",
    "htmx-2.0.11.LICENSE": "d3d2456f76414f2456104660ebd65aff1c04cd7966b942bdabd63f3cdb316a38",
    "htmx-ext-sse-2.2.4.js": "3b5992a541619babefc4c169505af474df5c3039da51e59b96ccf9241ecd61d2",
    "htmx-ext-sse-2.2.4.LICENSE": (
        "a17d224ce9afdc21ec9491b76a2f5d036d19aa641ac4f85ca29c21f9f7e54fdf"
    ),
}


@pytest.fixture(scope="module")
def console(
    pg_admin_dsn: str, template_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Console]:
    with running_console(pg_admin_dsn, template_db, tmp_path_factory.mktemp("console")) as c:
        yield c


@pytest.fixture
def fresh(console: Console) -> Console:
    console.clear()
    return console


def _csrf(client: httpx.Client) -> str:
    resp = client.get("/overview.json")
    assert resp.status_code == 200, resp.text
    return resp.headers["X-CSRF-Token"]


def test_vendored_htmx_is_the_pinned_release() -> None:
    found = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in VENDOR.iterdir()}
    assert found == VENDORED


def test_no_token_is_401_and_an_end_user_is_403_everywhere(console: Console) -> None:
    job = "00000000-0000-0000-0000-000000000001"
    gets = ["/", "/overview.json", "/events", "/jobs", f"/jobs/{job}", "/jobs/slowest", "/audit"]
    posts = [f"/jobs/{job}/retry", "/jobs/retry", "/queues/surface-x/pause", "/logout"]
    with console.client() as anon, console.client(token()) as user:
        for path in gets:
            assert anon.get(path).status_code == 401, path
            resp = user.get(path)
            assert resp.status_code == 403, path
            assert "no console role" in resp.json()["error"]["message"]
        for path in posts:
            assert anon.post(path).status_code == 401, path
            assert user.post(path).status_code == 403, path
        assert anon.get("/healthz").status_code == 200
        page = anon.get("/", headers={"Accept": "text/html"})
        assert page.status_code == 401 and 'href="/login"' in page.text


def test_a_viewer_reads_but_cannot_act(console: Console) -> None:
    with console.client(viewer_token()) as viewer:
        assert viewer.get("/").status_code == 200
        assert viewer.get("/jobs").status_code == 200
        csrf = _csrf(viewer)
        for path in ("/queues/surface-x/pause", "/jobs/retry"):
            resp = viewer.post(path, data={"csrf": csrf})
            assert resp.status_code == 403, path
            assert "viewer cannot act" in resp.json()["error"]["message"]


def test_the_audit_page_refuses_an_id_out_of_range(console: Console) -> None:
    """A keyset id Postgres's bigint cannot hold was a 503 (the database refused it)."""
    with console.client(viewer_token()) as viewer:
        for bad in ("9223372036854775808", "0", "-1", "1e3", "9" * 5000):
            resp = viewer.get("/audit", params={"before": bad})
            assert resp.status_code == 400, (bad[:30], resp.text)
            assert "before" in resp.json()["error"]["message"]
        assert viewer.get("/audit", params={"before": str(2**63 - 1)}).status_code == 200


def test_every_action_needs_its_csrf_token(console: Console) -> None:
    with console.client(operator_token()) as ops, console.client(viewer_token()) as other:
        for path in ("/queues/surface-x/pause", "/jobs/retry", "/logout"):
            assert ops.post(path).status_code == 403, path
            wrong = ops.post(path, data={"csrf": _csrf(other)})  # another session's
            assert wrong.status_code == 403, path
            assert "CSRF" in wrong.json()["error"]["message"]
        # With it, the checks go on to the request itself: an unknown type is a 400.
        resp = ops.post("/queues/surface-nosuch/pause", data={"csrf": _csrf(ops)})
        assert resp.status_code == 400 and "unknown queue type" in resp.text
        resp = ops.post("/queues/not-a-type/pause", headers={"X-CSRF-Token": _csrf(ops)})
        assert resp.status_code == 400


def test_login_sets_a_strict_httponly_cookie_and_checks_the_origin(console: Console) -> None:
    with console.client() as browser:
        refused = browser.post("/login", data={"token": token()})
        assert refused.status_code == 403  # an end user's token makes no session
        for origin in ("https://evil.example", "null"):  # null: a sandboxed frame, data:
            evil = browser.post(
                "/login", data={"token": viewer_token()}, headers={"Origin": origin}
            )
            assert evil.status_code == 403, origin
            assert "is refused" in evil.json()["error"]["message"]
            assert "Set-Cookie" not in evil.headers
        same = browser.post(
            "/login", data={"token": viewer_token()}, headers={"Origin": console.base}
        )
        assert same.status_code == 303, same.text
        browser.cookies.clear()
        as_json = browser.post("/login", json={"token": viewer_token()})
        assert as_json.status_code == 415, as_json.text
        for exp in (10**20, 10**400):  # a cookie cannot expire then: was a 500
            claims = {"sub": "v", "roles": VIEWER, "exp": exp}
            forever = browser.post("/login", data={"token": jwt.encode(claims, JWT_SECRET)})
            assert forever.status_code == 401 and "exp" in forever.text, forever.text
        resp = browser.post("/login", data={"token": viewer_token()})
        assert resp.status_code == 303 and resp.headers["Location"] == "/"
        cookie = resp.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert "Secure" not in cookie  # plain HTTP on loopback (docs/design.md)
        assert browser.get("/").status_code == 200  # the cookie is the session
        page = browser.get("/", headers={"Accept": "text/html"}).text
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
        assert csrf is not None
        out = browser.post("/logout", data={"csrf": csrf.group(1)})
        assert out.status_code == 303 and out.headers["Set-Cookie"].startswith(
            "dataplane_console=;"
        )


def test_a_sign_in_returns_to_the_page_that_asked_for_it(console: Console) -> None:
    """An alert's link opened without the cookie (another site's link under SameSite=
    Strict, or signed out): the 401 page's sign-in returns to it, and goes straight on
    when the cookie is good; never to another site."""
    html = {"Accept": "text/html"}
    wanted = "/jobs/slowest?since=1h&type=surface-a"
    with console.client() as browser:
        page = browser.get(wanted, headers=html)
        assert page.status_code == 401
        link = re.search(r'data-testid="sign-in-link" href="([^"]+)"', page.text)
        assert link is not None and link.group(1) == (
            "/login?next=/jobs/slowest%3Fsince%3D1h%26type%3Dsurface-a"
        )
        form = browser.get(link.group(1).replace("&amp;", "&"), headers=html)
        assert (
            form.status_code == 200
            and f'name="next" value="{wanted.replace("&", "&amp;")}"' in form.text
        )
        resp = browser.post("/login", data={"token": viewer_token(), "next": wanted})
        assert resp.status_code == 303 and resp.headers["Location"] == wanted
        again = browser.get("/login", params={"next": wanted}, headers=html)  # the cookie sent
        assert again.status_code == 303 and again.headers["Location"] == wanted
        for evil in ("//evil.example/x", "https://evil.example/", "/\\evil.example", "x", "/\n"):
            resp = browser.post("/login", data={"token": viewer_token(), "next": evil})
            assert resp.status_code == 303 and resp.headers["Location"] == "/", evil
            assert browser.get("/login", params={"next": evil}).headers["Location"] == "/"


def test_the_wallboard_counts_the_rows_poison_first(fresh: Console) -> None:
    for _ in range(3):
        fresh.add_job("surface-alpha", "pending")
    fresh.add_job("surface-alpha", "pending", available_in=3600)  # backing off
    for _ in range(2):
        fresh.add_job("surface-alpha", "in_progress")
    done = fresh.add_job("surface-alpha", "done")
    fresh.add_run("surface-alpha", done, cache="hit", coalesced=True, wall_ms=40.0)
    fresh.add_run("surface-alpha", done, cache="miss", wall_ms=20.0)
    for _ in range(4):
        fresh.add_job("surface-zeta", "poison", error="boom")
    fresh.add_job("surface-beta-dev", "pending")
    fresh.execute("INSERT INTO maestro_paused (type, paused_by) VALUES ('surface-beta-dev', 'x')")
    with fresh.client(viewer_token()) as viewer:
        cards = {c["type"]: c for c in viewer.get("/overview.json").json()}
        first = viewer.get("/overview.json").json()[0]["type"]
        html = viewer.get("/").text
    assert first == "surface-zeta"  # the poison card first
    alpha, zeta, beta = cards["surface-alpha"], cards["surface-zeta"], cards["surface-beta-dev"]
    assert (alpha["pending"], alpha["ready"], alpha["in_flight"], alpha["poison"]) == (4, 3, 2, 0)
    assert alpha["runs"] == 2 and alpha["cache_hit_ratio"] == 0.5
    assert alpha["coalesced_ratio"] == 0.5 and alpha["exec_p95_ms"] == pytest.approx(39.0)
    assert alpha["answers_per_minute"] == pytest.approx(2 * 60 / 300)
    assert zeta["poison"] == 4 and zeta["pending"] == 0
    assert beta["tier"] == "dev" and beta["paused"] and beta["paused_by"] == "x"
    assert html.index('data-type="surface-zeta"') < html.index('data-type="surface-alpha"')
    assert 'sse-connect="/events"' in html


def test_the_wallboard_streams_its_cards(fresh: Console) -> None:
    """The stream sends the newest cards at once, then each new reading: the row added
    shows up in an event within a few of the loop's readings (every 0.2 s here)."""
    fresh.add_job("surface-live", "poison")
    events = 0
    with fresh.client(operator_token()) as ops, ops.stream("GET", "/events") as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        data: list[str] = []
        for line in resp.iter_lines():
            if line == "event: cards":
                events, data = events + 1, []
            elif line.startswith("data: "):
                data.append(line.removeprefix("data: "))
            elif not line and 'data-type="surface-live"' in "\n".join(data):
                break
            assert events < 20, "the new card never came"
    assert 'class="card poison"' in "\n".join(data)


def test_jobs_filter_and_page_by_keyset(fresh: Console) -> None:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    ids = [
        fresh.add_job(
            "surface-alpha",
            "poison",
            created_at=base + timedelta(minutes=i),
            error=f"Traceback\nValueError: bad row {i}",
            client="acme" if i % 2 else "globex",
            operation="list" if i < 5 else "detail",
        )
        for i in range(7)
    ]
    fresh.add_job("surface-alpha", "done", created_at=base)
    fresh.add_job("surface-other", "poison", created_at=base)

    def listed(http: httpx.Client, **args: str) -> tuple[list[str], str | None]:
        page = http.get("/jobs", params=args, headers={"Accept": "text/html"})
        assert page.status_code == 200, page.text
        found = re.findall(r'data-testid="job-row" data-id="([0-9a-f-]+)"', page.text)
        after = re.search(r'data-testid="next" href="/jobs\?[^"]*after=([^"&]+)', page.text)
        from urllib.parse import unquote

        return found, unquote(after.group(1)) if after else None

    with fresh.client(viewer_token()) as viewer:
        seen: list[str] = []
        after = None
        for _ in range(3):
            args = {"type": "surface-alpha", "status": "poison", "limit": "3"}
            page, after = listed(viewer, **args, **({"after": after} if after else {}))
            seen += page
            if after is None:
                break
        assert seen == ids[::-1]  # newest first, every one once, in pages of 3, 3, 1
        got = listed(viewer, client="acme", type="surface-alpha", status="poison")[0]
        assert got == [ids[5], ids[3], ids[1]]
        assert listed(viewer, operation="detail")[0] == [ids[6], ids[5]]
        assert listed(viewer, error="BAD ROW 4")[0] == [ids[4]]
        assert listed(viewer, error="%")[0] == []  # LIKE's wildcards are text here
        window = {"since": (base + timedelta(minutes=2)).isoformat(), "until": "2026-01-01T00:04Z"}
        assert listed(viewer, **window)[0] == [ids[3], ids[2]]
        for bad in (
            {"status": "lost"},
            {"type": "nope"},
            {"after": "x"},
            {"after": f"0001-01-01T00:00+14:00_{ids[0]}"},
            {"since": "soon"},
            {"until": "9999-12-31T23:59-14:00"},
            {"limit": "0"},
            {"limit": "501"},
            {"limit": "9" * 30},
        ):
            resp = viewer.get("/jobs", params=bad)
            assert resp.status_code == 400, (bad, resp.text)
            assert next(iter(bad)) in resp.json()["error"]["message"], (bad, resp.text)


def test_a_job_page_shows_no_credential_and_links_its_trace(fresh: Console) -> None:
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    job = fresh.add_job(
        "surface-alpha",
        "poison",
        error="Traceback\nRuntimeError: the client DB said no",
        params={"page": 2, "apiToken": "s3cr3t-value", "nested": {"password": "hunter2"}},
        traceparent=f"00-{trace}-00f067aa0ba902b7-01",
    )
    fresh.add_run("surface-alpha", job, outcome="poison", trace_id=trace)
    with fresh.client(operator_token()) as ops:
        page = ops.get(f"/jobs/{job}", headers={"Accept": "text/html"})
        assert page.status_code == 200
        text = page.text
        assert "s3cr3t-value" not in text and "hunter2" not in text and "[redacted]" in text
        assert 'href="' + TRACE_URL.format(trace_id=trace) + '"' in text
        for shown in ("scope-k1", "RuntimeError: the client DB said no", "acme", "42"):
            assert shown in text, shown
        assert "ops@acme.test" not in text  # the envelope's fields it names, no more
        missing = ops.get("/jobs/00000000-0000-0000-0000-000000000009")
        assert missing.status_code == 404
        assert ops.get("/jobs/not-a-uuid").status_code == 400


def test_a_cancelled_job_s_page_says_who_cancelled_it_and_when(fresh: Console) -> None:
    """Issue 55: its header names who (the requesters, or the operator) and whether it
    ran; the console's own cancel of a running job names the operator who acted."""
    withdrawn = fresh.add_job("surface-alpha", "pending")
    fresh.execute(
        "UPDATE maestro_queues SET status = 'cancelled', completed_at = now(),"
        " cancelled_by = 'requesters', cancelled_running = false WHERE id = %s",
        (withdrawn,),
    )
    running = fresh.add_job("surface-alpha", "in_progress")
    with fresh.client(operator_token()) as ops:
        csrf = ops.get("/overview.json").headers["X-CSRF-Token"]
        assert ops.post(f"/jobs/{running}/cancel", data={"csrf": csrf}).status_code == 200
        said = {}
        for job in (withdrawn, running):
            page = ops.get(f"/jobs/{job}", headers={"Accept": "text/html"})
            assert page.status_code == 200
            line = re.search(r'<p data-testid="cancelled">([^<]*)</p>', page.text)
            assert line is not None, page.text
            said[job] = line.group(1)
    assert said[withdrawn].startswith(
        "Cancelled: the job was cancelled by its requesters (every one withdrew) before it"
        " ran, at 20"
    ), said
    assert said[running].startswith(
        "Cancelled: the job was cancelled by the operator ops-1 &lt;ops-1@acme.example&gt;"
        " while it ran, at 20"
    ), said


def _record(attempt: int, at: datetime, *, worker: str = "worker-1") -> dict[str, object]:
    """An attempt's record as job_fail stores it (migration 0023)."""
    return {
        "attempt": attempt,
        "at": at.isoformat(),
        "worker": worker,
        "type": "shop.errors.OutOfStock",
        "message": f"sku 42 (attempt {attempt})",
        "traceback": "Traceback (most recent call last):\n"
        '  File "/plane/executor.py", line 1, in _execute\n'
        '> File "/src/shop/handlers.py", line 9, in quote\n'
        f"shop.errors.OutOfStock: sku 42 (attempt {attempt})\n",
        "frame": "shop/handlers.py:9 in quote",
        "trace_id": None,
    }


def _attempts(html: str) -> list[tuple[str, str]]:
    return re.findall(r'data-testid="attempt" data-attempt="(\d+)" data-outcome="(\w+)"', html)


def test_a_job_page_merges_each_attempt_s_record_with_its_report(fresh: Console) -> None:
    """The attempts table: the records the row keeps merged with capcom's reports by
    attempt, worker and time, in time order across an operator's retry (the numbers
    start again); an attempt whose record came without a report, one nobody told of
    (its worker died), and the running one each say so."""
    now = datetime.now(UTC)
    job = fresh.add_job("surface-alpha", "in_progress", operation="quote")
    fresh.execute(
        "UPDATE maestro_queues SET dequeue_count = 4, errors = %s::jsonb WHERE id = %s",
        (
            json.dumps(
                [
                    _record(1, now - timedelta(minutes=10)),  # before the retry
                    _record(1, now - timedelta(seconds=30)),
                    _record(2, now - timedelta(seconds=20), worker="worker-2"),
                ]
            ),
            job,
        ),
    )
    for at, outcome in (
        (now - timedelta(minutes=10), "poison"),
        (now - timedelta(seconds=30), "failed"),
    ):
        fresh.add_run("surface-alpha", job, outcome=outcome, wall_ms=12.5, finished_at=at)
    with fresh.client(operator_token()) as ops:
        page = ops.get(f"/jobs/{job}").text
    assert _attempts(page) == [
        ("1", "poison"),  # the first round: its record and its report, one line
        ("1", "failed"),  # after the retry
        ("2", "failed"),  # its record, no report
        ("3", "unreported"),  # neither: its worker died
        ("4", "running"),
    ]
    assert page.count("12.5</td>") == 2
    assert page.count("no report of this attempt") == 2
    assert "its worker may have died" in page and "running: reported when it ends" in page
    assert page.count("shop.errors.OutOfStock</code>") == 3
    assert page.count('<mark class="surface" data-testid="surface-frame">') == 3
    assert "sku 42 (attempt 2)" in page and "shop/handlers.py:9 in quote" in page


def test_slowest_redirects_to_the_window_s_slowest_done_job(fresh: Console) -> None:
    """GET /jobs/slowest (the latency alerts' trace_url): 303 to the page of the done job
    that took longest from enqueue to completion in the window, of the type if given;
    a slower job that did not finish done, or finished before the window, is not it."""
    now = datetime.now(UTC)

    def ago(seconds: float) -> datetime:
        return now - timedelta(seconds=seconds)

    trace = "0af7651916cd43dd8448eb211c80319c"
    fresh.add_job("surface-alpha", "done", created_at=ago(0.5))
    slow = fresh.add_job(
        "surface-alpha", "done", created_at=ago(30), traceparent=f"00-{trace}-b7ad6b7169203331-01"
    )
    beta = fresh.add_job("surface-beta", "done", created_at=ago(90))
    fresh.add_job("surface-alpha", "poison", created_at=ago(600))  # not an answer
    fresh.add_job("surface-alpha", "cancelled", created_at=ago(600))
    fresh.add_job("surface-alpha", "in_progress", created_at=ago(900))  # not finished
    earlier = fresh.add_job(
        "surface-alpha", "done", created_at=ago(3 * 3600), completed_at=ago(2 * 3600)
    )
    with fresh.client(viewer_token()) as viewer:

        def slowest(**args: str) -> httpx.Response:
            return viewer.get("/jobs/slowest", params=args, headers={"Accept": "text/html"})

        for args, job in (
            ({}, beta),  # since=1h by default
            ({"since": "1h"}, beta),
            ({"since": "1h", "type": "surface-alpha"}, slow),
            ({"since": "3h", "type": "surface-alpha"}, earlier),
            ({"since": ago(2.5 * 3600).isoformat()}, earlier),
        ):
            resp = slowest(**args)
            assert resp.status_code == 303, (args, resp.text)
            assert resp.headers["Location"] == f"/jobs/{job}", args
        page = viewer.get(slowest(type="surface-alpha").headers["Location"])
        assert page.status_code == 200 and f'data-testid="job-id">{slow}<' in page.text
        assert 'href="' + TRACE_URL.format(trace_id=trace) + '"' in page.text
        none = slowest(type="surface-gamma")
        assert none.status_code == 404
        assert "no job of type surface-gamma completed since" in none.text
        for bad in (
            "soon",
            "2d",
            "25h",
            ago(2 * 86400).isoformat(),
            "999999d",  # before year 1: an OverflowError, a 500, until issue 55
            "0001-01-01T00:00+14:00",  # a time UTC cannot hold
            (now + timedelta(hours=1)).isoformat(),  # a window that starts later
        ):
            resp = viewer.get("/jobs/slowest", params={"since": bad})
            assert resp.status_code == 400, (bad, resp.text)
            assert "since" in resp.json()["error"]["message"]
        assert viewer.get("/jobs/slowest", params={"type": "nope"}).status_code == 400


def test_it_runs_as_a_member_of_dataplane_operator(
    pg_admin_dsn: str, template_db: str, tmp_path: Path
) -> None:
    import psycopg

    login, password = "console_login_test", "console-pw"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {login}")
        conn.execute(f"CREATE ROLE {login} LOGIN PASSWORD '{password}'")
        conn.execute(f"GRANT dataplane_operator TO {login}")
    try:
        with running_console(pg_admin_dsn, template_db, tmp_path, login=(login, password)) as c:
            job = c.add_job("surface-alpha", "poison")
            c.add_run("surface-alpha", job)
            with c.client(operator_token()) as ops:
                cards = ops.get("/overview.json").json()
                assert [card["poison"] for card in cards] == [1]
                assert ops.get("/jobs").status_code == 200
                assert ops.get(f"/jobs/{job}").status_code == 200  # blobs' heads included
                done = c.add_job("surface-alpha", "done")
                slowest = ops.get("/jobs/slowest")
                assert slowest.status_code == 303 and slowest.headers["Location"] == f"/jobs/{done}"
                assert ops.get("/audit").status_code == 200
    finally:
        with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
            conn.execute(f"DROP ROLE IF EXISTS {login}")


def test_a_login_outside_dataplane_operator_is_refused_at_boot(
    pg_admin_dsn: str, template_db: str, tmp_path: Path
) -> None:
    import psycopg

    login, password = "console_viewer_test", "console-pw"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {login}")
        conn.execute(f"CREATE ROLE {login} LOGIN PASSWORD '{password}'")
        conn.execute(f"GRANT dataplane_viewer TO {login}")
    try:
        with pytest.raises(AssertionError, match="not a member of dataplane_operator"):
            with running_console(pg_admin_dsn, template_db, tmp_path, login=(login, password)):
                pass
    finally:
        with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
            conn.execute(f"DROP ROLE IF EXISTS {login}")
