"""The demo LMS through the plane's test kit (dataplane.testing): its operations run by
the real worker on the package's own seeded client DB (its builder, read through the
read-only role the worker proves), and through a real BFF."""

from __future__ import annotations

import dataplane_lms
import pytest
from dataplane_lms import users

from dataplane.testing import Plane, RunOperation, token

pytestmark = pytest.mark.dataplane(surfaces=dataplane_lms.PACKAGE)  # its builder, too

NORTH = token("acme", sub="u7", branches=["acme-north"])


async def test_users_list_answers_the_callers_branch_and_is_cached(
    run_operation: RunOperation,
) -> None:
    first = await run_operation(users.SURFACE, "list", {"limit": 200}, auth=NORTH)
    page = first.result
    assert page["total"] > 0 and page["limit"] == 200 and first.cache == "miss"
    assert {row["branch_id"] for row in page["rows"]} == {"acme-north"}
    again = await run_operation(users.SURFACE, "list", {"limit": 200}, auth=NORTH)
    assert again.cache == "hit" and again.result == page


async def test_users_refuses_another_branch_and_answers_an_unknown_user_404(
    run_operation: RunOperation,
) -> None:
    other = await run_operation("users", "list", {"branch": "acme-east"}, auth=NORTH)
    assert other.status == 403
    unknown = await run_operation("users", "detail", {"userId": 999_999_999}, auth=NORTH)
    assert unknown.status == 200 and unknown.error is not None
    assert unknown.error["status"] == 404


async def test_users_list_through_the_bff(plane: Plane) -> None:
    answer = await plane.query("users", "list", {"q": "a", "limit": 5}, auth=NORTH)
    assert answer.events[-1].name == "done"
    assert len(answer.result["rows"]) <= 5
    (run,) = await plane.executions("users", "list")
    assert run.outcome == "done" and run.cache == "miss"
