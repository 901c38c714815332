"""The ``learnerviews`` surface: learning progress over the read-only client DB.

* ``branchSummary {branch?, since?}``: completion summary per branch in scope
  (cached 120 s).
* ``courseSummary {branch?, category?, limit}``: completion per course, least
  completed first (cached 120 s).
* ``learner {userId, status?}``: one learner's enrollments and progress (learner
  PII: never cached). A user outside the caller's scope is a 404.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from dataplane import HttpError, Operation, OperationContext, branch_in_scope, surface
from dataplane_lms.results import (
    AVG_SCORE,
    COUNT,
    FLAG,
    ID,
    PERCENT,
    SCORE,
    TEXT,
    TIMESTAMP,
    enum,
    nullable,
    record,
    rows_of,
)
from dataplane_lms.sql import q
from dataplane_lms.users import BRANCH_SCHEMA, ROLE, USER_ID_SCHEMA

ENROLLMENT_STATUSES = ("enrolled", "in_progress", "completed", "failed")

# learnerviews_branch_summary's columns: one branch, its enrollments by status.
BRANCH_SUMMARY_RESULT = record(
    rows=rows_of(
        record(
            branch_id=TEXT,
            branch_name=TEXT,
            region=TEXT,
            enrollments=COUNT,
            learners=COUNT,
            completed=COUNT,
            in_progress=COUNT,
            not_started=COUNT,
            failed=COUNT,
            completion_pct=PERCENT,
            avg_completed_score=AVG_SCORE,
        ),
        "one per branch in scope with enrollments, by branch id",
    )
)
# learnerviews_course_summary's columns: one course.
COURSE_SUMMARY_RESULT = record(
    rows=rows_of(
        record(
            course_id=ID,
            code=TEXT,
            title=TEXT,
            category=TEXT,
            enrollments=COUNT,
            completed=COUNT,
            completion_pct=PERCENT,
            avg_completed_score=AVG_SCORE,
        ),
        "one per course with enrollments in scope, least completed first",
    )
)
# learnerviews_learner_get's and learnerviews_enrollments_list's columns.
LEARNER_RESULT = record(
    learner=record(
        id=ID,
        full_name=TEXT,
        email=TEXT,
        role=ROLE,
        active=FLAG,
        branch_id=TEXT,
        branch_name=TEXT,
    ),
    enrollments=rows_of(
        record(
            enrollment_id=ID,
            course_id=ID,
            code=TEXT,
            title=TEXT,
            category=TEXT,
            duration_minutes={"type": "integer", "minimum": 1},
            status=enum(ENROLLMENT_STATUSES),
            progress_pct={"type": "integer", "minimum": 0, "maximum": 100},
            score=nullable(SCORE, "0-100 (null: not finished, enrolled or in_progress)"),
            enrolled_at=TIMESTAMP,
            completed_at=nullable(TIMESTAMP, "when it finished (null: not finished)"),
        ),
        "newest first",
    ),
)


def _since(value: str | None) -> datetime | None:
    """``YYYY-MM-DD`` as midnight UTC; a date that does not exist is a 400."""
    if value is None:
        return None
    try:
        day = date.fromisoformat(value)
    except ValueError:
        raise HttpError(400, f"params.since: {value!r} is not a valid date") from None
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


async def branch_summary(ctx: OperationContext) -> Any:
    params = {
        **ctx.scope(),
        "branch": ctx.params.get("branch"),
        "since": _since(ctx.params.get("since")),
    }
    rows = await ctx.require_client_db().fetchall(q("learnerviews_branch_summary"), params)
    return {"rows": rows}


async def course_summary(ctx: OperationContext) -> Any:
    params = {
        **ctx.scope(),
        "branch": ctx.params.get("branch"),
        "category": ctx.params.get("category"),
        "limit": ctx.params["limit"],
    }
    rows = await ctx.require_client_db().fetchall(q("learnerviews_course_summary"), params)
    return {"rows": rows}


async def learner(ctx: OperationContext) -> Any:
    db = ctx.require_client_db()
    scope = {**ctx.scope(), "user_id": ctx.params["userId"]}
    user = await db.fetchone(q("learnerviews_learner_get"), scope)
    if user is None:
        raise HttpError(404, f"learner {ctx.params['userId']} not found")
    rows = await db.fetchall(
        q("learnerviews_enrollments_list"), {**scope, "status": ctx.params.get("status")}
    )
    return {"learner": dict(user), "enrollments": rows}


SURFACE = surface(
    Operation(
        "branchSummary",
        1,
        {
            "type": "object",
            "properties": {
                "branch": BRANCH_SCHEMA,
                "since": {
                    "type": "string",
                    "pattern": r"^\d{4}-\d{2}-\d{2}$",
                    "description": "only enrollments from this date (YYYY-MM-DD, UTC)",
                },
            },
            "additionalProperties": False,
        },
        branch_summary,
        ttl_seconds=120,
        gates=(branch_in_scope("branch"),),
        description="Course completion summary per branch in scope.",
        result=BRANCH_SUMMARY_RESULT,
    ),
    Operation(
        "courseSummary",
        1,
        {
            "type": "object",
            "properties": {
                "branch": BRANCH_SCHEMA,
                "category": {"type": "string", "minLength": 1, "maxLength": 64},
                "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
            },
            "additionalProperties": False,
        },
        course_summary,
        ttl_seconds=120,
        gates=(branch_in_scope("branch"),),
        description="Completion per course in scope, least completed first.",
        result=COURSE_SUMMARY_RESULT,
    ),
    Operation(
        "learner",
        1,
        {
            "type": "object",
            "properties": {
                "userId": USER_ID_SCHEMA,
                "status": {"type": "string", "enum": list(ENROLLMENT_STATUSES)},
            },
            "required": ["userId"],
            "additionalProperties": False,
        },
        learner,
        ttl_seconds=0,
        user_param="userId",
        description="One learner's enrollments and progress (PII, never cached).",
        result=LEARNER_RESULT,
    ),
    id="learnerviews",
    description="Learning progress: per-branch and per-course summaries, learner drill-down.",
)
