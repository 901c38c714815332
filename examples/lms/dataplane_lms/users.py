"""The ``users`` surface: the client's user directory over the read-only client DB.

* ``list {q?, role?, branch?, limit, offset}``: a page of users in scope plus the
  total for the pager (cached 60 s).
* ``detail {userId}``: one user with enrollment statistics (learner PII: never
  cached). A user outside the caller's scope is a 404, like one that does not exist.
"""

from __future__ import annotations

from typing import Any

from dataplane import HttpError, Operation, OperationContext, branch_in_scope, surface
from dataplane_lms.results import (
    AVG_SCORE,
    COUNT,
    FLAG,
    ID,
    LIMIT,
    OFFSET,
    TEXT,
    TIMESTAMP,
    enum,
    nullable,
    record,
    rows_of,
)
from dataplane_lms.sql import q

ROLES = ("learner", "manager", "admin")
BRANCH_SCHEMA: dict[str, Any] = {"type": "string", "maxLength": 64, "pattern": "^[a-z0-9-]+$"}
USER_ID_SCHEMA: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}
ROLE = enum(ROLES)

# users_list's columns: one user of the page.
USER_ROW = record(
    id=ID,
    full_name=TEXT,
    email=TEXT,
    role=ROLE,
    active=FLAG,
    branch_id=TEXT,
    created_at=TIMESTAMP,
)
LIST_RESULT = record(
    rows=rows_of(USER_ROW, "the page, by full name"),
    total=COUNT,
    limit=LIMIT,
    offset=OFFSET,
)
# users_get's columns: the user, its branch and its enrollments by status.
DETAIL_RESULT = record(
    id=ID,
    full_name=TEXT,
    email=TEXT,
    role=ROLE,
    active=FLAG,
    created_at=TIMESTAMP,
    client_id=TEXT,
    branch_id=TEXT,
    branch_name=TEXT,
    region=TEXT,
    enrollments=COUNT,
    completed=COUNT,
    in_progress=COUNT,
    not_started=COUNT,
    failed=COUNT,
    avg_completed_score=AVG_SCORE,
    last_enrolled_at=nullable(TIMESTAMP, "the latest enrollment (null: never enrolled)"),
)


def like_fragment(text: str) -> str:
    """``text`` for use inside an ILIKE pattern: ``\\``, ``%`` and ``_`` match literally."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


async def list_users(ctx: OperationContext) -> Any:
    p = ctx.params
    search = p.get("q")
    filters = {
        **ctx.scope(),
        "q": like_fragment(search) if search else None,
        "role": p.get("role"),
        "branch": p.get("branch"),
    }
    db = ctx.require_client_db()
    rows = await db.fetchall(
        q("users_list"), {**filters, "limit": p["limit"], "offset": p["offset"]}
    )
    count = await db.fetchone(q("users_count"), filters)
    total = int(count["total"]) if count else 0
    return {"rows": rows, "total": total, "limit": p["limit"], "offset": p["offset"]}


async def user_detail(ctx: OperationContext) -> Any:
    row = await ctx.require_client_db().fetchone(
        q("users_get"), {**ctx.scope(), "user_id": ctx.params["userId"]}
    )
    if row is None:
        raise HttpError(404, f"user {ctx.params['userId']} not found")
    return dict(row)


SURFACE = surface(
    Operation(
        "list",
        1,
        {
            "type": "object",
            "properties": {
                "q": {"type": "string", "maxLength": 100, "description": "name or email contains"},
                "role": {"type": "string", "enum": list(ROLES)},
                "branch": BRANCH_SCHEMA,
                "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
                "offset": {"type": "integer", "minimum": 0, "maximum": 100_000, "default": 0},
            },
            "additionalProperties": False,
        },
        list_users,
        ttl_seconds=60,
        gates=(branch_in_scope("branch"),),
        description="A page of users in scope (search by name/email, role, branch) and the total.",
        result=LIST_RESULT,
    ),
    Operation(
        "detail",
        1,
        {
            "type": "object",
            "properties": {"userId": USER_ID_SCHEMA},
            "required": ["userId"],
            "additionalProperties": False,
        },
        user_detail,
        ttl_seconds=0,
        user_param="userId",
        description="One user in scope with branch and enrollment statistics (PII, never cached).",
        result=DETAIL_RESULT,
    ),
    id="users",
    description="The client's user directory: list and detail.",
)
