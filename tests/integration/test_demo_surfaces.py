"""The demo surfaces (users, learnerviews, accounting, skills) on the seeded demo DB.

Handlers are called directly, as a worker would, over the read-only credential;
each answer is checked against an independent query written differently and run
through the admin DSN.
"""

from __future__ import annotations

import io
import json
import time
from collections import Counter, defaultdict
from typing import Any

import dataplane_lms as demo
import psycopg
import pytest
from dataplane_lms import accounting, learnerviews, skills, users
from psycopg.rows import dict_row
from pypdf import PdfReader

from dataplane.core.errors import HttpError
from dataplane.db import Database
from dataplane.queue.envelope import Auth
from dataplane.surfaces.manifest import BlobResult, OperationContext, Surface

ACME_BRANCHES = {"acme-east", "acme-north", "acme-south", "acme-west"}


def auth(*branches: str, staff: bool = False, client: str = "acme") -> Auth:
    return Auth(client=client, user_id="u1", actor_email="a@x", staff=staff, branches=branches)


NORTH = auth("acme-north")
ALL = auth("*")
STAFF_NORTH = auth("acme-north", staff=True)
STAFF_ALL = auth("*", staff=True)


async def call(
    surface: Surface, name: str, who: Auth, raw: dict[str, Any], client_db: Database
) -> Any:
    """Check params and gates, run the handler; a non-blob answer must be JSON."""
    op = surface.operation(name)
    params = op.check(who, raw)
    ctx = OperationContext(
        params=params, auth=who, job_id="t", dequeue_count=1, client_db=client_db
    )
    result = await op.handler(ctx)
    if not isinstance(result, BlobResult):
        json.dumps(result, allow_nan=False)
    return result


def admin(demo_db: tuple[str, str], sql: str, params: Any = None) -> list[dict[str, Any]]:
    with psycopg.connect(demo_db[0], autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(sql, params).fetchall()


def close(a: float | None, b: float | None, tol: float = 0.051) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(float(a) - float(b)) <= tol


# --- the manifest --------------------------------------------------------------------------


def test_the_demo_surfaces_and_their_caching_and_gates() -> None:
    found = {s.id: s for s in demo.SURFACES}
    assert list(found) == ["users", "learnerviews", "accounting", "skills"]
    ttl = {(s.id, n): op.ttl_seconds for s in demo.SURFACES for n, op in s.operations.items()}
    assert ttl == {
        ("users", "list"): 60,
        ("users", "detail"): 0,
        ("learnerviews", "branchSummary"): 120,
        ("learnerviews", "courseSummary"): 120,
        ("learnerviews", "learner"): 0,
        ("accounting", "invoices"): 60,
        ("accounting", "invoice"): 0,
        ("accounting", "invoicePdf"): 0,
        ("skills", "coverage"): 300,
        ("skills", "profile"): 0,
    }
    for op in accounting.SURFACE.operations.values():
        assert "staff" in [g.name for g in op.gates]
    for s in demo.SURFACES:
        assert s.needs_client_db
        for op in s.operations.values():
            assert op.params["additionalProperties"] is False
            assert ("branch" in op.params["properties"]) == any(
                g.name == "branch-in-scope:branch" for g in op.gates
            )


# --- users -----------------------------------------------------------------------------------


async def test_users_list_one_branch_matches_an_independent_query(
    client_db: Database, demo_db: tuple[str, str]
) -> None:
    expected = admin(
        demo_db,
        "SELECT u.id FROM lms.branches b JOIN lms.users u ON u.branch_id = b.id"
        " WHERE b.client_id = 'acme' AND b.id = 'acme-north' ORDER BY u.full_name, u.id",
    )
    first = await call(users.SURFACE, "list", NORTH, {}, client_db)
    assert first["total"] == len(expected) > 0
    assert [r["id"] for r in first["rows"]] == [r["id"] for r in expected[:50]]
    assert {r["branch_id"] for r in first["rows"]} == {"acme-north"}
    second = await call(users.SURFACE, "list", NORTH, {"limit": 200, "offset": 50}, client_db)
    assert [r["id"] for r in second["rows"]] == [r["id"] for r in expected[50:250]]
    row = first["rows"][0]
    assert set(row) == {"id", "full_name", "email", "role", "active", "branch_id", "created_at"}
    assert row["created_at"].endswith("Z")


async def test_users_list_search_and_role_filters(
    client_db: Database, demo_db: tuple[str, str]
) -> None:
    everyone = admin(
        demo_db,
        "SELECT id, full_name, email, role FROM lms.users"
        " WHERE client_id = 'acme' AND branch_id = 'acme-north'",
    )
    smiths = sorted(
        (u["full_name"], u["id"])
        for u in everyone
        if "smith" in u["full_name"].lower() or "smith" in u["email"].lower()
    )
    got = await call(users.SURFACE, "list", NORTH, {"q": "SMITH", "limit": 200}, client_db)
    assert got["total"] == len(smiths) > 0
    assert [(r["full_name"], r["id"]) for r in got["rows"]] == smiths[:200]

    managers = [u["id"] for u in everyone if u["role"] == "manager"]
    got = await call(users.SURFACE, "list", NORTH, {"role": "manager", "limit": 200}, client_db)
    assert 0 < got["total"] == len(managers) <= 200
    assert sorted(r["id"] for r in got["rows"]) == sorted(managers)
    assert {r["role"] for r in got["rows"]} == {"manager"}


async def test_users_list_all_branches_sees_the_whole_client_and_nothing_else(
    client_db: Database, demo_db: tuple[str, str]
) -> None:
    per_branch = {
        r["branch_id"]: r["n"]
        for r in admin(
            demo_db,
            "SELECT branch_id, count(*) AS n FROM lms.users WHERE client_id = 'acme'"
            " GROUP BY branch_id",
        )
    }
    got = await call(users.SURFACE, "list", ALL, {"limit": 200}, client_db)
    assert got["total"] == sum(per_branch.values()) == 4800
    assert {r["branch_id"] for r in got["rows"]} <= ACME_BRANCHES
    assert all(1 <= r["id"] <= 4800 for r in got["rows"])
    east = await call(users.SURFACE, "list", ALL, {"branch": "acme-east"}, client_db)
    assert east["total"] == per_branch["acme-east"]
    assert {r["branch_id"] for r in east["rows"]} == {"acme-east"}
    # another client's branch passes the gate for '*' but the client filter still holds
    other = await call(users.SURFACE, "list", ALL, {"branch": "globex-paris"}, client_db)
    assert other == {"rows": [], "total": 0, "limit": 50, "offset": 0}
    # a multi-branch caller sees exactly its branches
    two = auth("acme-north", "acme-south")
    got = await call(users.SURFACE, "list", two, {"limit": 200}, client_db)
    assert got["total"] == per_branch["acme-north"] + per_branch["acme-south"]
    assert {r["branch_id"] for r in got["rows"]} <= {"acme-north", "acme-south"}


async def test_users_detail_matches_and_hides_out_of_scope_users(
    client_db: Database, demo_db: tuple[str, str]
) -> None:
    (pick,) = admin(
        demo_db,
        "SELECT u.id, u.email, count(e.*) AS n,"
        " sum(CASE WHEN e.status = 'completed' THEN 1 ELSE 0 END) AS done"
        " FROM lms.users u JOIN lms.enrollments e ON e.user_id = u.id"
        " WHERE u.branch_id = 'acme-north' GROUP BY u.id ORDER BY u.id LIMIT 1",
    )
    got = await call(users.SURFACE, "detail", NORTH, {"userId": pick["id"]}, client_db)
    assert got["id"] == pick["id"] and got["email"] == pick["email"]
    assert got["enrollments"] == pick["n"] and got["completed"] == pick["done"]
    assert got["branch_id"] == "acme-north" and got["client_id"] == "acme"
    assert got["completed"] + got["in_progress"] + got["not_started"] + got["failed"] == pick["n"]

    (east,) = admin(demo_db, "SELECT min(id) AS id FROM lms.users WHERE branch_id = 'acme-east'")
    for who, user_id in ((NORTH, east["id"]), (ALL, 5000), (ALL, 999_999)):
        with pytest.raises(HttpError) as err:
            await call(users.SURFACE, "detail", who, {"userId": user_id}, client_db)
        assert err.value.status == 404
    got = await call(users.SURFACE, "detail", ALL, {"userId": east["id"]}, client_db)
    assert got["branch_id"] == "acme-east"


# --- learnerviews ----------------------------------------------------------------------------

BRANCH_STATS = """
SELECT branch_id, count(*) AS enrollments, count(DISTINCT user_id) AS learners,
       sum(CASE WHEN status = 'completed' THEN 1 ELSE 0 END) AS completed,
       sum(CASE WHEN status = 'failed' THEN 1 ELSE 0 END) AS failed,
       avg(CASE WHEN status = 'completed' THEN score END)::float8 AS avg_score
FROM lms.enrollments
WHERE client_id = %(client)s AND (%(since)s::timestamptz IS NULL OR enrolled_at >= %(since)s)
GROUP BY branch_id
"""


async def test_branch_summary_matches_an_independent_query(
    client_db: Database, demo_db: tuple[str, str]
) -> None:
    stats = {
        r["branch_id"]: r for r in admin(demo_db, BRANCH_STATS, {"client": "acme", "since": None})
    }
    got = await call(learnerviews.SURFACE, "branchSummary", ALL, {}, client_db)
    assert [r["branch_id"] for r in got["rows"]] == sorted(ACME_BRANCHES)
    for row in got["rows"]:
        want = stats[row["branch_id"]]
        for key in ("enrollments", "learners", "completed", "failed"):
            assert row[key] == want[key], key
        assert close(row["completion_pct"], 100.0 * want["completed"] / want["enrollments"])
        assert close(row["avg_completed_score"], want["avg_score"])

    north = await call(learnerviews.SURFACE, "branchSummary", NORTH, {}, client_db)
    assert [r["branch_id"] for r in north["rows"]] == ["acme-north"]
    assert north["rows"][0]["enrollments"] == stats["acme-north"]["enrollments"]

    since = {
        r["branch_id"]: r
        for r in admin(demo_db, BRANCH_STATS, {"client": "acme", "since": "2025-06-01T00:00:00Z"})
    }
    got = await call(
        learnerviews.SURFACE, "branchSummary", ALL, {"since": "2025-06-01", "branch": "acme-west"},
        client_db,
    )  # fmt: skip
    assert [r["branch_id"] for r in got["rows"]] == ["acme-west"]
    assert got["rows"][0]["enrollments"] == since["acme-west"]["enrollments"]
    assert since["acme-west"]["enrollments"] < stats["acme-west"]["enrollments"]

    with pytest.raises(HttpError) as err:
        await call(learnerviews.SURFACE, "branchSummary", ALL, {"since": "2025-13-40"}, client_db)
    assert err.value.status == 400


async def test_course_summary_matches_an_independent_query(
    client_db: Database, demo_db: tuple[str, str]
) -> None:
    rows = admin(
        demo_db,
        "SELECT course_id, status FROM lms.enrollments"
        " WHERE client_id = 'acme' AND branch_id IN ('acme-north', 'acme-south')",
    )
    totals: Counter[int] = Counter(r["course_id"] for r in rows)
    done: Counter[int] = Counter(r["course_id"] for r in rows if r["status"] == "completed")
    who = auth("acme-north", "acme-south")
    got = await call(learnerviews.SURFACE, "courseSummary", who, {"limit": 200}, client_db)
    assert {r["course_id"] for r in got["rows"]} == set(totals)
    assert all(1 <= r["course_id"] <= 100 for r in got["rows"])
    for row in got["rows"]:
        assert row["enrollments"] == totals[row["course_id"]]
        assert row["completed"] == done[row["course_id"]]
    pcts = [r["completion_pct"] for r in got["rows"]]
    assert pcts == sorted(pcts)

    top = await call(learnerviews.SURFACE, "courseSummary", who, {"limit": 5}, client_db)
    assert top["rows"] == got["rows"][:5]
    finance = await call(
        learnerviews.SURFACE, "courseSummary", ALL, {"category": "Finance", "limit": 200}, client_db
    )
    (n,) = admin(
        demo_db,
        "SELECT count(DISTINCT e.course_id) AS n FROM lms.enrollments e, lms.courses c"
        " WHERE c.id = e.course_id AND c.category = 'Finance' AND e.client_id = 'acme'",
    )
    assert len(finance["rows"]) == n["n"] > 0
    assert {r["category"] for r in finance["rows"]} == {"Finance"}


async def test_learner_enrollments_match_and_hide_out_of_scope_users(
    client_db: Database, demo_db: tuple[str, str]
) -> None:
    (pick,) = admin(
        demo_db,
        "SELECT user_id FROM lms.enrollments WHERE branch_id = 'acme-north'"
        " GROUP BY user_id HAVING count(*) >= 5 ORDER BY user_id LIMIT 1",
    )
    user_id = pick["user_id"]
    expected = admin(
        demo_db,
        "SELECT id, status FROM lms.enrollments WHERE user_id = %s"
        " ORDER BY enrolled_at DESC, id DESC",
        (user_id,),
    )
    got = await call(learnerviews.SURFACE, "learner", NORTH, {"userId": user_id}, client_db)
    assert got["learner"]["id"] == user_id and got["learner"]["branch_id"] == "acme-north"
    assert [e["enrollment_id"] for e in got["enrollments"]] == [e["id"] for e in expected]
    status = expected[0]["status"]
    got = await call(
        learnerviews.SURFACE, "learner", NORTH, {"userId": user_id, "status": status}, client_db
    )
    assert [e["enrollment_id"] for e in got["enrollments"]] == [
        e["id"] for e in expected if e["status"] == status
    ]
    for who, other in ((auth("acme-east"), user_id), (ALL, 5000), (NORTH, 999_999)):
        with pytest.raises(HttpError) as err:
            await call(learnerviews.SURFACE, "learner", who, {"userId": other}, client_db)
        assert err.value.status == 404


# --- accounting ------------------------------------------------------------------------------


async def test_accounting_is_staff_only(client_db: Database) -> None:
    for name, raw in (
        ("invoices", {}),
        ("invoice", {"invoiceId": 1}),
        ("invoicePdf", {"invoiceId": 1}),
    ):
        with pytest.raises(HttpError) as err:
            await call(accounting.SURFACE, name, ALL, raw, client_db)
        assert err.value.status == 403


async def test_invoices_list_matches_an_independent_query(
    client_db: Database, demo_db: tuple[str, str]
) -> None:
    expected = admin(
        demo_db,
        "SELECT i.id, i.status, i.total_cents FROM lms.invoices i"
        " JOIN lms.branches b ON (b.client_id, b.id) = (i.client_id, i.branch_id)"
        " WHERE b.id = 'acme-north' ORDER BY i.issued_at DESC, i.id DESC",
    )
    got = await call(accounting.SURFACE, "invoices", STAFF_NORTH, {"limit": 200}, client_db)
    assert got["total"] == len(expected) > 0
    assert [r["id"] for r in got["rows"]] == [r["id"] for r in expected[:200]]
    assert {r["branch_id"] for r in got["rows"]} == {"acme-north"}
    assert sum(t["total_cents"] for t in got["totals"]) == sum(r["total_cents"] for r in expected)
    by_status = Counter(r["status"] for r in expected)
    assert {t["status"]: t["invoices"] for t in got["totals"]} == dict(by_status)
    lines = {
        r["invoice_id"]: r["n"]
        for r in admin(
            demo_db, "SELECT invoice_id, count(*) AS n FROM lms.invoice_lines GROUP BY invoice_id"
        )
    }
    assert all(r["line_count"] == lines[r["id"]] for r in got["rows"])

    paid = await call(
        accounting.SURFACE, "invoices", STAFF_NORTH, {"status": "paid", "limit": 200}, client_db
    )
    assert paid["total"] == by_status["paid"]
    assert {r["status"] for r in paid["rows"]} == {"paid"}

    (n,) = admin(demo_db, "SELECT count(*) AS n FROM lms.invoices WHERE client_id = 'acme'")
    everything = await call(accounting.SURFACE, "invoices", STAFF_ALL, {"limit": 200}, client_db)
    assert everything["total"] == n["n"]
    assert {r["branch_id"] for r in everything["rows"]} <= ACME_BRANCHES
    assert all(r["number"].startswith("INV-ACM-") for r in everything["rows"])


async def test_invoice_detail_and_scope(client_db: Database, demo_db: tuple[str, str]) -> None:
    (inv,) = admin(
        demo_db,
        "SELECT id, number, total_cents FROM lms.invoices WHERE branch_id = 'acme-north'"
        " ORDER BY id LIMIT 1",
    )
    lines = admin(
        demo_db,
        "SELECT id, quantity * unit_cents AS amount FROM lms.invoice_lines"
        " WHERE invoice_id = %s ORDER BY id",
        (inv["id"],),
    )
    got = await call(
        accounting.SURFACE, "invoice", STAFF_NORTH, {"invoiceId": inv["id"]}, client_db
    )
    assert got["invoice"]["number"] == inv["number"]
    assert got["invoice"]["total_cents"] == inv["total_cents"]
    assert got["invoice"]["client_name"] and got["invoice"]["currency"]
    assert [ln["line_id"] for ln in got["lines"]] == [ln["id"] for ln in lines]
    assert [ln["line_total_cents"] for ln in got["lines"]] == [ln["amount"] for ln in lines]
    assert sum(ln["line_total_cents"] for ln in got["lines"]) == inv["total_cents"]

    (east,) = admin(demo_db, "SELECT min(id) AS id FROM lms.invoices WHERE branch_id = 'acme-east'")
    (globex,) = admin(demo_db, "SELECT min(id) AS id FROM lms.invoices WHERE client_id = 'globex'")
    for who, invoice_id in (
        (STAFF_NORTH, east["id"]),
        (STAFF_ALL, globex["id"]),
        (STAFF_ALL, 10**9),
    ):
        for name in ("invoice", "invoicePdf"):
            with pytest.raises(HttpError) as err:
                await call(accounting.SURFACE, name, who, {"invoiceId": invoice_id}, client_db)
            assert err.value.status == 404


async def test_invoice_pdf_is_a_real_pdf(client_db: Database, demo_db: tuple[str, str]) -> None:
    (inv,) = admin(
        demo_db,
        "SELECT i.id, i.number, count(l.*) AS n FROM lms.invoices i"
        " JOIN lms.invoice_lines l ON l.invoice_id = i.id"
        " WHERE i.client_id = 'umbrella' GROUP BY i.id ORDER BY count(l.*) DESC, i.id LIMIT 1",
    )
    who = auth("*", staff=True, client="umbrella")
    blob = await call(accounting.SURFACE, "invoicePdf", who, {"invoiceId": inv["id"]}, client_db)
    assert isinstance(blob, BlobResult)
    assert blob.content_type == "application/pdf"
    assert blob.filename == f"invoice-{inv['number']}.pdf"
    assert blob.data.startswith(b"%PDF-")
    reader = PdfReader(io.BytesIO(blob.data))
    text = "\n".join(page.extract_text() for page in reader.pages)
    assert inv["number"] in text
    assert "Total" in text
    detail = await call(accounting.SURFACE, "invoice", who, {"invoiceId": inv["id"]}, client_db)
    for line in detail["lines"]:
        assert line["course_code"] in text


# --- skills ------------------------------------------------------------------------------------


async def test_skills_coverage_matches_an_independent_query(
    client_db: Database, demo_db: tuple[str, str]
) -> None:
    held = admin(
        demo_db,
        "SELECT u.branch_id, us.skill_id, us.level FROM lms.user_skills us, lms.users u"
        " WHERE u.id = us.user_id AND u.active AND u.client_id = 'acme'",
    )
    heads = {
        r["branch_id"]: r["n"]
        for r in admin(
            demo_db,
            "SELECT branch_id, count(*) AS n FROM lms.users WHERE active AND client_id = 'acme'"
            " GROUP BY branch_id",
        )
    }
    count: Counter[tuple[str, int]] = Counter((r["branch_id"], r["skill_id"]) for r in held)
    levels: dict[tuple[str, int], list[int]] = defaultdict(list)
    for r in held:
        levels[(r["branch_id"], r["skill_id"])].append(r["level"])

    got = await call(skills.SURFACE, "coverage", ALL, {}, client_db)
    assert {(r["branch_id"], r["skill_id"]) for r in got["rows"]} == set(count)
    for row in got["rows"]:
        key = (row["branch_id"], row["skill_id"])
        assert row["users_with_skill"] == count[key]
        assert row["branch_users"] == heads[row["branch_id"]]
        assert row["proficient_users"] == sum(1 for lv in levels[key] if lv >= 4)
        assert close(row["avg_level"], sum(levels[key]) / len(levels[key]), 0.0051)
        assert close(row["coverage_pct"], 100.0 * count[key] / heads[row["branch_id"]])
        assert 1 <= row["skill_id"] <= 50

    north = await call(skills.SURFACE, "coverage", NORTH, {}, client_db)
    assert {r["branch_id"] for r in north["rows"]} == {"acme-north"}
    assert north["rows"] == [r for r in got["rows"] if r["branch_id"] == "acme-north"]
    only = await call(skills.SURFACE, "coverage", ALL, {"branch": "acme-south"}, client_db)
    assert only["rows"] == [r for r in got["rows"] if r["branch_id"] == "acme-south"]
    category = got["rows"][0]["category"]
    by_cat = await call(skills.SURFACE, "coverage", NORTH, {"category": category}, client_db)
    assert by_cat["rows"] == [r for r in north["rows"] if r["category"] == category]


async def test_skills_profile_matches_and_hides_out_of_scope_users(
    client_db: Database, demo_db: tuple[str, str]
) -> None:
    (pick,) = admin(
        demo_db,
        "SELECT us.user_id FROM lms.user_skills us JOIN lms.users u ON u.id = us.user_id"
        " WHERE u.client_id = 'globex' GROUP BY us.user_id HAVING count(*) >= 3"
        " ORDER BY us.user_id LIMIT 1",
    )
    user_id = pick["user_id"]
    expected = admin(
        demo_db,
        "SELECT skill_id, level FROM lms.user_skills WHERE user_id = %s",
        (user_id,),
    )
    taught = admin(
        demo_db,
        "SELECT cs.skill_id, count(*) AS n FROM lms.enrollments e"
        " JOIN lms.course_skills cs USING (course_id)"
        " WHERE e.user_id = %s AND e.status = 'completed' GROUP BY cs.skill_id",
        (user_id,),
    )
    who = auth("*", client="globex")
    got = await call(skills.SURFACE, "profile", who, {"userId": user_id}, client_db)
    assert got["user"]["id"] == user_id
    assert {s["skill_id"]: s["level"] for s in got["skills"]} == {
        r["skill_id"]: r["level"] for r in expected
    }
    n_taught = {r["skill_id"]: r["n"] for r in taught}
    for s in got["skills"]:
        assert s["completed_courses_with_skill"] == n_taught.get(s["skill_id"], 0)
    for other, uid in ((ALL, user_id), (auth("globex-zzz", client="globex"), user_id)):
        with pytest.raises(HttpError) as err:
            await call(skills.SURFACE, "profile", other, {"userId": uid}, client_db)
        assert err.value.status == 404


# --- gates and validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("surface", "name", "raw"),
    [
        (users.SURFACE, "list", {"branch": "acme-east"}),
        (learnerviews.SURFACE, "branchSummary", {"branch": "acme-south"}),
        (learnerviews.SURFACE, "courseSummary", {"branch": "globex-paris"}),
        (skills.SURFACE, "coverage", {"branch": "acme-west"}),
        (accounting.SURFACE, "invoices", {"branch": "acme-east"}),
    ],
)
def test_a_branch_outside_scope_is_403(surface: Surface, name: str, raw: dict[str, Any]) -> None:
    with pytest.raises(HttpError) as err:
        surface.operation(name).check(STAFF_NORTH, raw)
    assert err.value.status == 403


@pytest.mark.parametrize(
    ("surface", "name", "raw"),
    [
        (users.SURFACE, "list", {"limit": "10"}),
        (users.SURFACE, "list", {"limit": 0}),
        (users.SURFACE, "list", {"limit": 201}),
        (users.SURFACE, "list", {"limit": 1.5}),
        (users.SURFACE, "list", {"offset": -1}),
        (users.SURFACE, "list", {"q": "x" * 101}),
        (users.SURFACE, "list", {"q": 5}),
        (users.SURFACE, "list", {"role": "root"}),
        (users.SURFACE, "list", {"client": "globex"}),
        (users.SURFACE, "list", {"branches": ["*"]}),
        (users.SURFACE, "list", {"branch": "ACME-NORTH"}),
        (users.SURFACE, "list", {"branch": "acme-north'; --"}),
        (users.SURFACE, "list", {"branch": "a" * 65}),
        (users.SURFACE, "detail", {}),
        (users.SURFACE, "detail", {"userId": "1"}),
        (users.SURFACE, "detail", {"userId": 0}),
        (users.SURFACE, "detail", {"userId": True}),
        (users.SURFACE, "detail", {"userId": 2**63}),
        (users.SURFACE, "detail", {"userId": 1, "extra": 1}),
        (learnerviews.SURFACE, "branchSummary", {"since": "yesterday"}),
        (learnerviews.SURFACE, "courseSummary", {"limit": 1000}),
        (learnerviews.SURFACE, "courseSummary", {"category": ""}),
        (learnerviews.SURFACE, "learner", {"userId": 1, "status": "done"}),
        (learnerviews.SURFACE, "learner", {"userId": -4}),
        (accounting.SURFACE, "invoices", {"status": "void"}),
        (accounting.SURFACE, "invoices", {"offset": 100_001}),
        (accounting.SURFACE, "invoice", {"invoiceId": None}),
        (accounting.SURFACE, "invoicePdf", {"invoiceId": 1, "format": "a4"}),
        (skills.SURFACE, "coverage", {"category": "x" * 65}),
        (skills.SURFACE, "profile", {"userId": [1]}),
    ],
)
def test_bad_params_are_400(surface: Surface, name: str, raw: dict[str, Any]) -> None:
    with pytest.raises(HttpError) as err:
        surface.operation(name).check(STAFF_ALL, raw)
    assert err.value.status == 400


INJECTIONS = [
    "'; DROP TABLE lms.users; --",
    "%' OR 1=1 --",
    "%",
    "_",
    "\\",
    "' OR ''='",
    "%(client)s",
    "acme-north') OR ('1'='1",
]


@pytest.mark.parametrize("text", INJECTIONS)
async def test_injection_strings_are_just_text(
    text: str, client_db: Database, demo_db: tuple[str, str]
) -> None:
    (n,) = admin(
        demo_db,
        "SELECT count(*) AS n FROM lms.users WHERE branch_id = 'acme-north'"
        " AND (strpos(lower(full_name), lower(%(t)s)) > 0"
        "      OR strpos(lower(email), lower(%(t)s)) > 0)",
        {"t": text},
    )
    got = await call(users.SURFACE, "list", NORTH, {"q": text}, client_db)
    assert got["total"] == n["n"] == 0
    assert got["rows"] == []
    for surface, name in ((learnerviews.SURFACE, "courseSummary"), (skills.SURFACE, "coverage")):
        got = await call(surface, name, ALL, {"category": text}, client_db)
        assert got["rows"] == []
    (still,) = admin(demo_db, "SELECT count(*) AS n FROM lms.users")
    assert still["n"] == 12_000


# --- timings (information) -------------------------------------------------------------------


async def test_every_operation_answers_quickly(
    client_db: Database, demo_db: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    (inv,) = admin(demo_db, "SELECT max(id) AS id FROM lms.invoices WHERE branch_id = 'acme-north'")
    (user,) = admin(demo_db, "SELECT max(id) AS id FROM lms.users WHERE branch_id = 'acme-north'")
    calls = [
        (users.SURFACE, "list", {"q": "an"}),
        (users.SURFACE, "detail", {"userId": user["id"]}),
        (learnerviews.SURFACE, "branchSummary", {}),
        (learnerviews.SURFACE, "courseSummary", {}),
        (learnerviews.SURFACE, "learner", {"userId": user["id"]}),
        (accounting.SURFACE, "invoices", {}),
        (accounting.SURFACE, "invoice", {"invoiceId": inv["id"]}),
        (accounting.SURFACE, "invoicePdf", {"invoiceId": inv["id"]}),
        (skills.SURFACE, "coverage", {}),
        (skills.SURFACE, "profile", {"userId": user["id"]}),
    ]
    report = []
    for who in (STAFF_ALL, STAFF_NORTH):
        for surface, name, raw in calls:
            await call(surface, name, who, raw, client_db)  # warm the pool and the caches
            best = float("inf")
            for _ in range(3):
                started = time.perf_counter()
                await call(surface, name, who, raw, client_db)
                best = min(best, time.perf_counter() - started)
            report.append(f"{surface.id}.{name} {who.branches}: {best * 1000:.1f} ms")
            assert best < 5.0
    with capsys.disabled():
        print("\n" + "\n".join(report))
