"""The demo surfaces' result schemas hold for their real answers on the seeded demo DB.

``dataplane dev`` (and a worker told ``DATAPLANE_RESULT_CHECK=enforce``) fails a job
whose answer breaks its operation's result schema, so each schema is checked here
against what its handler answers, for several callers and parameters of every client,
and shown to refuse an answer of another shape (a field of another type, a missing or
an unknown one).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import dataplane_lms as demo
import pytest
from dataplane_lms import accounting, learnerviews, skills, users

from dataplane.db import Database
from dataplane.queue.envelope import Auth
from dataplane.surfaces.manifest import Surface
from tests.integration.test_demo_surfaces import auth, call

ACME = auth("*")
NORTH = auth("acme-north")
STAFF = auth("*", staff=True)
STAFF_NORTH = auth("acme-north", staff=True)
GLOBEX = auth("*", staff=True, client="globex")
INITECH = auth("*", staff=True, client="initech")
UMBRELLA = auth("*", staff=True, client="umbrella")

# (surface, operation, caller, params): realistic requests, some answering nothing.
CASES: list[tuple[Surface, str, Auth, dict[str, Any]]] = [
    (users.SURFACE, "list", NORTH, {}),
    (users.SURFACE, "list", ACME, {"limit": 200, "offset": 50}),
    (users.SURFACE, "list", ACME, {"q": "smith", "role": "learner"}),
    (users.SURFACE, "list", GLOBEX, {"role": "manager", "branch": "globex-paris"}),
    (users.SURFACE, "list", UMBRELLA, {"q": "nobody-is-called-this"}),
    (users.SURFACE, "detail", ACME, {"userId": 1}),
    (users.SURFACE, "detail", ACME, {"userId": 199}),  # no completed enrollment
    (users.SURFACE, "detail", GLOBEX, {"userId": 5140}),
    (users.SURFACE, "detail", INITECH, {"userId": 7801}),
    (learnerviews.SURFACE, "branchSummary", ACME, {}),
    (learnerviews.SURFACE, "branchSummary", NORTH, {"branch": "acme-north"}),
    (learnerviews.SURFACE, "branchSummary", GLOBEX, {"since": "2025-06-01"}),
    (learnerviews.SURFACE, "branchSummary", UMBRELLA, {"since": "2025-11-01"}),
    (learnerviews.SURFACE, "branchSummary", INITECH, {"since": "2030-01-01"}),
    (learnerviews.SURFACE, "courseSummary", ACME, {}),
    (learnerviews.SURFACE, "courseSummary", NORTH, {"category": "Safety", "limit": 5}),
    (learnerviews.SURFACE, "courseSummary", UMBRELLA, {"branch": "umbrella-tokyo", "limit": 200}),
    (learnerviews.SURFACE, "learner", ACME, {"userId": 1}),
    (learnerviews.SURFACE, "learner", ACME, {"userId": 199}),
    (learnerviews.SURFACE, "learner", ACME, {"userId": 2, "status": "enrolled"}),
    (learnerviews.SURFACE, "learner", INITECH, {"userId": 7801, "status": "failed"}),
    (accounting.SURFACE, "invoices", STAFF, {}),
    (accounting.SURFACE, "invoices", STAFF_NORTH, {"status": "overdue"}),
    (accounting.SURFACE, "invoices", STAFF, {"limit": 200, "offset": 100}),
    (accounting.SURFACE, "invoices", UMBRELLA, {"status": "paid", "branch": "umbrella-tokyo"}),
    (accounting.SURFACE, "invoices", GLOBEX, {"offset": 100_000}),
    (accounting.SURFACE, "invoice", STAFF, {"invoiceId": 1}),
    (accounting.SURFACE, "invoice", STAFF, {"invoiceId": 2}),
    (skills.SURFACE, "coverage", ACME, {}),
    (skills.SURFACE, "coverage", NORTH, {"category": "Leadership"}),
    (skills.SURFACE, "coverage", GLOBEX, {"branch": "globex-berlin"}),
    (skills.SURFACE, "profile", ACME, {"userId": 1}),
    (skills.SURFACE, "profile", ACME, {"userId": 199}),
    (skills.SURFACE, "profile", UMBRELLA, {"userId": 11237}),
]


def case_id(case: tuple[Surface, str, Auth, dict[str, Any]]) -> str:
    surface, name, who, params = case
    return f"{surface.id}.{name}-{who.client}-{json.dumps(params, sort_keys=True)}"


async def answer(surface: Surface, name: str, who: Auth, params: dict[str, Any], db: Any) -> Any:
    """The operation's answer, checked against its result schema as the worker checks
    it, and again as the client gets it (through JSON)."""
    op = surface.operation(name)
    got = await call(surface, name, who, params, db)
    where = f"{surface.id}.{name} {params}"
    assert op.result_problem(got) is None, f"{where}: {op.result_problem(got)}"
    assert op.result_problem(json.loads(json.dumps(got))) is None, where
    return got


def test_every_json_operation_declares_its_result_and_the_pdf_none() -> None:
    for s in demo.SURFACES:
        for name, op in s.operations.items():
            assert (op.result is None) == ((s.id, name) == ("accounting", "invoicePdf")), name
            if op.result is not None:
                assert op.result["type"] == "object" and op.result["required"], name
    covered = {(s.id, name) for s, name, _, _ in CASES}
    declared = {(s.id, n) for s in demo.SURFACES for n, op in s.operations.items() if op.result}
    assert covered == declared


@pytest.mark.parametrize("case", CASES, ids=case_id)
async def test_an_answer_matches_its_result_schema(
    case: tuple[Surface, str, Auth, dict[str, Any]], client_db: Database
) -> None:
    await answer(*case, client_db)


async def test_every_clients_listed_users_and_invoices_match_their_schemas(
    client_db: Database,
) -> None:
    """Each client's first users and invoices, as a client drills down into them."""
    for who in (STAFF, GLOBEX, INITECH, UMBRELLA):
        page = await answer(users.SURFACE, "list", who, {"limit": 4}, client_db)
        assert len(page["rows"]) == 4
        for row in page["rows"]:
            user = {"userId": row["id"]}
            await answer(users.SURFACE, "detail", who, user, client_db)
            await answer(learnerviews.SURFACE, "learner", who, user, client_db)
            await answer(skills.SURFACE, "profile", who, user, client_db)
        listed = await answer(accounting.SURFACE, "invoices", who, {"limit": 3}, client_db)
        assert len(listed["rows"]) == 3
        for row in listed["rows"]:
            await answer(accounting.SURFACE, "invoice", who, {"invoiceId": row["id"]}, client_db)


async def test_the_nulls_the_schemas_allow_are_real(client_db: Database) -> None:
    """The nullable fields the demo data makes null: the schemas must allow them."""
    detail = await answer(users.SURFACE, "detail", ACME, {"userId": 199}, client_db)
    assert detail["avg_completed_score"] is None and detail["completed"] == 0
    pending = await answer(
        learnerviews.SURFACE, "learner", ACME, {"userId": 2, "status": "enrolled"}, client_db
    )
    assert pending["enrollments"], "user 2 has an enrollment not started"
    assert {(e["score"], e["completed_at"]) for e in pending["enrollments"]} == {(None, None)}
    recent = await answer(
        learnerviews.SURFACE, "branchSummary", UMBRELLA, {"since": "2025-11-01"}, client_db
    )
    nothing_completed = [r for r in recent["rows"] if r["completed"] == 0]
    assert nothing_completed, "a branch with no completion since 2025-11-01"
    for row in recent["rows"]:
        assert (row["avg_completed_score"] is None) == (row["completed"] == 0), row


def _other(value: Any) -> Any:
    """A value of another JSON type than ``value``'s."""
    if isinstance(value, bool) or value is None:
        return [value]
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return 7
    return "not a " + type(value).__name__


def broken(value: Any, path: str = "result") -> Iterator[tuple[str, Any]]:
    """``value`` broken in one place each: a field of another type, dropped, or added
    (in every object, through the first item of every array)."""
    if isinstance(value, dict):
        yield f"{path}.unexpected added", {**value, "unexpected": 1}
        for key, sub in value.items():
            yield f"{path}.{key} dropped", {k: v for k, v in value.items() if k != key}
            yield f"{path}.{key} retyped", {**value, key: _other(sub)}
            for where, wrong in broken(sub, f"{path}.{key}"):
                yield where, {**value, key: wrong}
    elif isinstance(value, list) and value:
        yield f"{path}[0] retyped", [_other(value[0]), *value[1:]]
        for where, wrong in broken(value[0], f"{path}[0]"):
            yield where, [wrong, *value[1:]]


@pytest.mark.parametrize(
    "case",
    [(s, n, w, p) for s, n, w, p in CASES if p in ({}, {"userId": 1}, {"invoiceId": 1})],
    ids=case_id,
)
async def test_a_schema_refuses_an_answer_of_another_shape(
    case: tuple[Surface, str, Auth, dict[str, Any]], client_db: Database
) -> None:
    surface, name, who, params = case
    got = await answer(surface, name, who, params, client_db)
    op = surface.operation(name)
    tried = 0
    for where, wrong in broken(got):
        assert op.result_problem(wrong) is not None, f"{surface.id}.{name}: {where} passed"
        tried += 1
    assert tried > 10
    if isinstance(got.get("rows"), list):
        assert got["rows"], "an empty page would test no row"
