"""The ``skills`` surface: skill coverage and profiles over the read-only client DB.

* ``coverage {branch?, category?}``: per branch and skill, the share of active
  users holding it, their average level and proficient users (cached 300 s); it
  reports its progress branch by branch.
* ``profile {userId}``: one user's assessed skills (learner PII: never cached).
  A user outside the caller's scope is a 404.
"""

from __future__ import annotations

from typing import Any

from dataplane import HttpError, Operation, OperationContext, branch_in_scope, surface
from dataplane_lms.results import COUNT, ID, PERCENT, TEXT, TIMESTAMP, record, rows_of
from dataplane_lms.sql import q
from dataplane_lms.users import BRANCH_SCHEMA, ROLE, USER_ID_SCHEMA

LEVEL = {"type": "integer", "minimum": 1, "maximum": 5}
# skills_coverage_list's columns: one skill in one branch.
COVERAGE_RESULT = record(
    rows=rows_of(
        record(
            branch_id=TEXT,
            skill_id=ID,
            skill=TEXT,
            category=TEXT,
            users_with_skill={**COUNT, "description": "active users of the branch holding it"},
            branch_users={**COUNT, "description": "active users of the branch"},
            coverage_pct=PERCENT,
            avg_level={"type": "number", "minimum": 1, "maximum": 5},
            proficient_users={**COUNT, "description": "of them, at level 4 or 5"},
        ),
        "one per branch and skill held, by branch, category and skill",
    )
)
# skills_profile_user_get's and skills_profile_list's columns.
PROFILE_RESULT = record(
    user=record(id=ID, full_name=TEXT, role=ROLE, branch_id=TEXT),
    skills=rows_of(
        record(
            skill_id=ID,
            skill=TEXT,
            category=TEXT,
            level=LEVEL,
            assessed_at=TIMESTAMP,
            completed_courses_with_skill=COUNT,
        ),
        "every skill assessed, by category and name",
    ),
)


async def coverage(ctx: OperationContext) -> Any:
    """Branch by branch, reporting each as a step of progress (a client DB of real size
    takes seconds here: the stream shows how far it is); the rows are the one query's."""
    db = ctx.require_client_db()
    params = {
        **ctx.scope(),
        "branch": ctx.params.get("branch"),
        "category": ctx.params.get("category"),
    }
    branches = [
        r["branch_id"] for r in await db.fetchall(q("skills_coverage_branches_list"), params)
    ]
    rows: list[Any] = []
    for done, branch in enumerate(branches, start=1):
        found = await db.fetchall(q("skills_coverage_list"), {**params, "branch": branch})
        rows.extend(found)
        await ctx.progress(
            done=done,
            total=len(branches),
            message=f"branch {branch}: {len(found)} skills",
            partial={"branch": branch, "skills": len(found)},
        )
    return {"rows": rows}


async def profile(ctx: OperationContext) -> Any:
    db = ctx.require_client_db()
    params = {**ctx.scope(), "user_id": ctx.params["userId"]}
    user = await db.fetchone(q("skills_profile_user_get"), params)
    if user is None:
        raise HttpError(404, f"user {ctx.params['userId']} not found")
    rows = await db.fetchall(q("skills_profile_list"), params)
    return {"user": dict(user), "skills": rows}


SURFACE = surface(
    Operation(
        "coverage",
        1,
        {
            "type": "object",
            "properties": {
                "branch": BRANCH_SCHEMA,
                "category": {"type": "string", "minLength": 1, "maxLength": 64},
            },
            "additionalProperties": False,
        },
        coverage,
        ttl_seconds=300,
        gates=(branch_in_scope("branch"),),
        description="Skill coverage per branch in scope (share of active users, level).",
        result=COVERAGE_RESULT,
    ),
    Operation(
        "profile",
        1,
        {
            "type": "object",
            "properties": {"userId": USER_ID_SCHEMA},
            "required": ["userId"],
            "additionalProperties": False,
        },
        profile,
        ttl_seconds=0,
        user_param="userId",
        description="One user's skill profile (PII, never cached).",
        result=PROFILE_RESULT,
    ),
    id="skills",
    description="Skills: coverage per branch and per-user profiles.",
)
