"""The console's actions (issue #41) through a real ``dataplane console`` process, the
operators' code path the CLI uses: a bulk retry of 100 poison jobs with its dry-run
count, a discard, pause and resume, a cancel (and its 409 on a finished job), each
audited with the operator's name; none of them touches another type's rows. An action
does exactly what it was asked or nothing (issue 55): a body that is not a form is 415,
an unknown field 400, every job of every type only with "all", and the audit row
records the filter as applied."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from tests.console import Console, operator_token, running_console, viewer_token


@pytest.fixture(scope="module")
def console(
    pg_admin_dsn: str, template_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Console]:
    with running_console(pg_admin_dsn, template_db, tmp_path_factory.mktemp("actions")) as c:
        yield c


@pytest.fixture
def fresh(console: Console) -> Console:
    console.clear()
    console.execute("DELETE FROM dataplane_audit")
    return console


def _csrf(client: httpx.Client) -> str:
    resp = client.get("/overview.json")
    assert resp.status_code == 200, resp.text
    return resp.headers["X-CSRF-Token"]


def _rows(console: Console, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(console.dsn, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()  # type: ignore[arg-type]


def _statuses(console: Console, queue_type: str) -> dict[str, int]:
    rows = _rows(
        console,
        "SELECT status, count(*) FROM maestro_queues WHERE type = %s GROUP BY status",
        (queue_type,),
    )
    return {status: n for status, n in rows}


def test_a_bulk_retry_counts_first_then_retries_only_what_it_named(fresh: Console) -> None:
    for _ in range(100):
        fresh.add_job("surface-probe", "poison", error="boom")
    for _ in range(3):
        fresh.add_job("surface-probe-dev", "poison", error="boom")
    with fresh.client(operator_token()) as ops:
        confirm = ops.get("/jobs/confirm", params={"action": "retry", "type": "surface-probe"})
        assert confirm.status_code == 200 and "100" in confirm.text, confirm.text
        assert _statuses(fresh, "surface-probe") == {"poison": 100}  # a count changes nothing
        done = ops.post(
            "/jobs/retry", data={"csrf": _csrf(ops), "type": "surface-probe", "status": "poison"}
        )
        assert done.status_code == 200 and "100 row(s) changed" in done.text, done.text
    assert _statuses(fresh, "surface-probe") == {"pending": 100}
    assert _statuses(fresh, "surface-probe-dev") == {"poison": 3}  # another tier: untouched
    ((actor, via, action, rows),) = _rows(
        fresh, "SELECT actor, via, action, rows FROM dataplane_audit"
    )
    assert (actor, via, action, rows) == ("ops-1 <ops-1@acme.example>", "console", "retry", 100)


def test_discard_one_job_and_a_retry_of_a_live_one_is_refused(fresh: Console) -> None:
    gone = fresh.add_job("surface-probe", "poison")
    live = fresh.add_job("surface-probe", "pending")
    with fresh.client(operator_token()) as ops:
        csrf = _csrf(ops)
        assert ops.post(f"/jobs/{gone}/discard", data={"csrf": csrf}).status_code == 200
        refused = ops.post(f"/jobs/{live}/retry", data={"csrf": csrf})
        assert refused.status_code == 409, refused.text
    assert _rows(fresh, "SELECT status FROM maestro_queues") == [("pending",)]


def test_pause_and_resume_a_type_and_a_viewer_cannot(fresh: Console) -> None:
    fresh.add_job("surface-probe", "pending")
    with fresh.client(operator_token()) as ops, fresh.client(viewer_token()) as viewer:
        assert (
            viewer.post("/queues/surface-probe/pause", data={"csrf": _csrf(viewer)}).status_code
            == 403
        )
        paused = ops.post("/queues/surface-probe/pause", data={"csrf": _csrf(ops)})
        assert paused.status_code == 200 and "paused" in paused.text
        assert _rows(fresh, "SELECT type, paused_by FROM maestro_paused") == [
            ("surface-probe", "ops-1 <ops-1@acme.example>")
        ]
        assert "surface-probe" in ops.get("/overview.json").text
        resumed = ops.post("/queues/surface-probe/resume", data={"csrf": _csrf(ops)})
        assert resumed.status_code == 200
    assert _rows(fresh, "SELECT type FROM maestro_paused") == []
    actions = [a for (a,) in _rows(fresh, "SELECT action FROM dataplane_audit ORDER BY id")]
    assert actions == ["pause", "resume"]


def test_cancel_a_pending_job_then_409_with_its_status(fresh: Console) -> None:
    job = fresh.add_job("surface-probe", "pending")
    with fresh.client(operator_token()) as ops:
        csrf = _csrf(ops)
        done = ops.post(f"/jobs/{job}/cancel", data={"csrf": csrf})
        assert done.status_code == 200 and "cancelled" in done.text, done.text
        again = ops.post(f"/jobs/{job}/cancel", data={"csrf": csrf})
        assert again.status_code == 409 and "cancelled" in again.text
        unknown = ops.post("/jobs/00000000-0000-4000-8000-000000000000/cancel", data={"csrf": csrf})
        assert unknown.status_code == 404
    assert _rows(fresh, "SELECT status FROM maestro_queues") == [("cancelled",)]
    assert _rows(fresh, "SELECT action, rows FROM dataplane_audit") == [("cancel", 1)]


def test_an_unknown_job_is_404_and_the_confirm_page_is_an_operator_s(fresh: Console) -> None:
    fresh.add_job("surface-probe", "poison")
    with fresh.client(operator_token()) as ops, fresh.client(viewer_token()) as viewer:
        unknown = ops.post(
            "/jobs/00000000-0000-4000-8000-000000000000/retry", data={"csrf": _csrf(ops)}
        )
        assert unknown.status_code == 404, unknown.text
        page = viewer.get("/jobs/confirm", params={"action": "retry", "type": "surface-probe"})
        assert page.status_code == 403, page.text  # a viewer cannot act: nothing to confirm
        assert "a viewer cannot act" in page.json()["error"]["message"]
        mine = ops.get("/jobs/confirm", params={"action": "retry", "type": "surface-probe"})
        assert mine.status_code == 200 and 'data-testid="confirm-count">1<' in mine.text
        assert 'data-testid="confirm"' in mine.text


def test_the_list_and_the_action_match_an_error_alike(fresh: Console) -> None:
    fresh.add_job("surface-probe", "poison", error="Timeout: the client DB")
    fresh.add_job("surface-probe", "poison", error="KeyError: 'x'")
    with fresh.client(operator_token()) as ops:
        listed = ops.get("/jobs", params={"status": "poison", "error": "timeout"})
        assert listed.status_code == 200 and listed.text.count("Timeout: the client DB") >= 1
        assert "KeyError" not in listed.text
        done = ops.post(
            "/jobs/retry",
            data={"csrf": _csrf(ops), "status": "poison", "error": "timeout"},
        )
        assert done.status_code == 200 and "1 row(s) changed" in done.text, done.text
    assert sorted(_statuses(fresh, "surface-probe").items()) == [("pending", 1), ("poison", 1)]


def _poison_of_two_types(console: Console) -> dict[str, str]:
    """Three poison jobs of surface-probe (two clients) and two of surface-demo; a row
    of every status but poison, each of which an action on poison must leave."""
    before = {
        console.add_job("surface-probe", "poison", error="boom", client="acme"): "poison",
        console.add_job("surface-probe", "poison", error="boom", client="acme"): "poison",
        console.add_job("surface-probe", "poison", error="boom", client="beta"): "poison",
        console.add_job("surface-demo", "poison", error="boom"): "poison",
        console.add_job("surface-demo", "poison", error="boom"): "poison",
    }
    for status in ("pending", "in_progress", "done", "cancelled"):
        before[console.add_job("surface-probe", status)] = status
    return before


def _now(console: Console) -> dict[str, str]:
    return {str(i): s for i, s in _rows(console, "SELECT id, status FROM maestro_queues")}


def test_a_bulk_retry_posted_as_json_is_refused_and_changes_nothing(fresh: Console) -> None:
    """JSON was read as an empty form: the filter dropped, every poison job retried."""
    before = _poison_of_two_types(fresh)
    with fresh.client(operator_token()) as ops:
        csrf = _csrf(ops)
        for action in ("retry", "discard"):
            refused = ops.post(
                f"/jobs/{action}",
                json={"type": "surface-probe", "client": "beta", "status": "poison"},
                headers={"X-CSRF-Token": csrf},
            )
            assert refused.status_code == 415, refused.text
            error = refused.json()["error"]
            assert error["code"] == "UNSUPPORTED_MEDIA_TYPE" and "form" in error["message"]
        plain = ops.post(
            "/jobs/retry",
            content=b"type=surface-probe",
            headers={"X-CSRF-Token": csrf, "Content-Type": "text/plain"},
        )
        assert plain.status_code == 415, plain.text
        browser = ops.post(
            "/jobs/retry",
            json={"type": "surface-probe"},
            headers={"X-CSRF-Token": csrf, "Accept": "text/html"},
        )
        assert browser.status_code == 415 and "text/html" in browser.headers["Content-Type"]
    assert _now(fresh) == before  # every row untouched
    assert _rows(fresh, "SELECT count(*) FROM dataplane_audit") == [(0,)]


def test_an_unknown_repeated_or_malformed_field_is_a_400_naming_it(fresh: Console) -> None:
    before = _poison_of_two_types(fresh)
    with fresh.client(operator_token()) as ops:
        csrf = _csrf(ops)
        for form, named in (
            ({"typ": "surface-probe"}, "'typ'"),  # a typo is not "no type"
            ({"type": ["surface-probe", "surface-demo"]}, "'type'"),
            ({"type": "surface-probe", "all": "maybe"}, "all"),
            ({"type": "surface-probe", "status": "failed"}, "status"),
            ({"type": "surface-probe", "since": "0001-01-01T00:00+14:00"}, "since"),
        ):
            refused = ops.post("/jobs/retry", data={"csrf": csrf, **form})
            assert refused.status_code == 400, (form, refused.text)
            assert named in refused.json()["error"]["message"], form
        job = next(iter(before))
        extra = ops.post(f"/jobs/{job}/discard", data={"csrf": csrf, "type": "surface-demo"})
        assert extra.status_code == 400 and "'type'" in extra.text, extra.text
        pause = ops.post("/queues/surface-probe/pause", data={"csrf": csrf, "for": "1h"})
        assert pause.status_code == 400 and "'for'" in pause.text, pause.text
        typo = ops.get("/jobs/confirm", params={"action": "retry", "clinet": "beta"})
        assert typo.status_code == 400 and "'clinet'" in typo.text, typo.text
    assert _now(fresh) == before
    assert _rows(
        fresh,
        "SELECT (SELECT count(*) FROM maestro_paused), (SELECT count(*) FROM dataplane_audit)",
    ) == [(0, 0)]


def test_every_job_of_every_type_needs_all_and_the_audit_says_what_was_done(
    fresh: Console,
) -> None:
    before = _poison_of_two_types(fresh)
    with fresh.client(operator_token()) as ops:
        csrf = _csrf(ops)
        page = ops.get("/jobs/confirm", params={"action": "retry"})  # the list unfiltered
        assert page.status_code == 200 and 'data-testid="confirm-count">5<' in page.text
        assert 'name="all" value="1" required' in page.text  # the operator must choose
        for form in ({}, {"status": "poison"}, {"all": ""}):
            refused = ops.post("/jobs/retry", data={"csrf": csrf, **form})
            assert refused.status_code == 400, (form, refused.text)
            assert "choose all" in refused.json()["error"]["message"]
        both = ops.post("/jobs/retry", data={"csrf": csrf, "all": "1", "type": "surface-demo"})
        assert both.status_code == 400 and "without a filter" in both.text, both.text
        assert _now(fresh) == before

        narrowed = ops.post(
            "/jobs/retry", data={"csrf": csrf, "type": "surface-probe", "client": "beta"}
        )
        assert narrowed.status_code == 200 and "1 row(s) changed" in narrowed.text
        done = ops.post("/jobs/retry", data={"csrf": csrf, "all": "1", "status": "poison"})
        assert done.status_code == 200 and "4 row(s) changed" in done.text, done.text
    assert {s for i, s in _now(fresh).items() if before[i] == "poison"} == {"pending"}
    assert {i: s for i, s in _now(fresh).items() if before[i] != "poison"} == {
        i: s for i, s in before.items() if s != "poison"
    }
    every_field = ("status", "queue_type", "client", "operation", "error", "since", "until")
    audits = _rows(fresh, "SELECT action, target, rows FROM dataplane_audit ORDER BY id")
    assert [(a, n) for a, _, n in audits] == [("retry", 1), ("retry", 4)]
    first, second = (target for _, target, _ in audits)
    assert {k: first[k] for k in every_field} == {
        "status": "poison",  # defaulted, and recorded
        "queue_type": "surface-probe",
        "client": "beta",
        "operation": None,
        "error": None,
        "since": None,
        "until": None,
    }
    assert (first["all"], second["all"]) == (False, True)
    assert {k: second[k] for k in every_field} == {"status": "poison"} | dict.fromkeys(
        every_field[1:]
    )
