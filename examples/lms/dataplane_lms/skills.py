"""The ``skills`` surface: skill coverage and profiles over the read-only client DB.

* ``coverage {branch?, category?}``: per branch and skill, the share of active
  users holding it, their average level and proficient users (cached 300 s).
* ``profile {userId}``: one user's assessed skills (learner PII: never cached).
  A user outside the caller's scope is a 404.
"""

from __future__ import annotations

from typing import Any

from dataplane import HttpError, Operation, OperationContext, branch_in_scope, surface
from dataplane_lms.sql import q
from dataplane_lms.users import BRANCH_SCHEMA, USER_ID_SCHEMA


async def coverage(ctx: OperationContext) -> Any:
    params = {
        **ctx.scope(),
        "branch": ctx.params.get("branch"),
        "category": ctx.params.get("category"),
    }
    rows = await ctx.require_client_db().fetchall(q("skills_coverage_list"), params)
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
    ),
    id="skills",
    description="Skills: coverage per branch and per-user profiles.",
)
