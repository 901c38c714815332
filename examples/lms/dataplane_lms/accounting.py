"""The ``accounting`` surface: invoices over the read-only client DB (staff only).

* ``invoices {status?, branch?, limit, offset}``: a page of invoices in scope,
  the matching total and totals per status and currency (cached 60 s).
* ``invoice {invoiceId}``: one invoice with its lines (never cached).
* ``invoicePdf {invoiceId}``: the same invoice rendered as a PDF blob (never cached).

Every operation is gated ``STAFF_ONLY``; an invoice outside the caller's scope
is a 404, like one that does not exist.
"""

from __future__ import annotations

from typing import Any

from dataplane import (
    STAFF_ONLY,
    BlobResult,
    HttpError,
    Operation,
    OperationContext,
    branch_in_scope,
    surface,
)
from dataplane_lms.invoice_pdf import render_invoice_pdf
from dataplane_lms.results import (
    CENTS,
    COUNT,
    CURRENCY,
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
from dataplane_lms.users import BRANCH_SCHEMA

INVOICE_STATUSES = ("draft", "sent", "paid", "overdue")
INVOICE_ID_SCHEMA: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}
INVOICE_PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {"invoiceId": INVOICE_ID_SCHEMA},
    "required": ["invoiceId"],
    "additionalProperties": False,
}
STATUS = enum(INVOICE_STATUSES)

# accounting_invoices_list's and accounting_totals_by_status's columns.
INVOICES_RESULT = record(
    rows=rows_of(
        record(
            id=ID,
            number=TEXT,
            branch_id=TEXT,
            issued_at=TIMESTAMP,
            due_at=TIMESTAMP,
            status=STATUS,
            currency=CURRENCY,
            total_cents=CENTS,
            line_count=COUNT,
        ),
        "the page, newest first",
    ),
    total=COUNT,
    totals=rows_of(
        record(status=STATUS, currency=CURRENCY, invoices=COUNT, total_cents=CENTS),
        "every invoice matching the filters, per status and currency",
    ),
    limit=LIMIT,
    offset=OFFSET,
)
# accounting_invoice_get's and accounting_invoice_lines_list's columns.
INVOICE_RESULT = record(
    invoice=record(
        id=ID,
        number=TEXT,
        client_id=TEXT,
        client_name=TEXT,
        branch_id=TEXT,
        branch_name=TEXT,
        issued_at=TIMESTAMP,
        due_at=TIMESTAMP,
        status=STATUS,
        currency=CURRENCY,
        total_cents=CENTS,
    ),
    lines=rows_of(
        record(
            line_id=ID,
            course_id=nullable(ID, "the course billed (null: a line for no course)"),
            course_code=nullable(TEXT, "its code (null: a line for no course)"),
            description=TEXT,
            quantity={"type": "integer", "minimum": 1},
            unit_cents=CENTS,
            line_total_cents=CENTS,
        ),
        "in order",
    ),
)


async def list_invoices(ctx: OperationContext) -> Any:
    p = ctx.params
    filters = {**ctx.scope(), "status": p.get("status"), "branch": p.get("branch")}
    db = ctx.require_client_db()
    rows = await db.fetchall(
        q("accounting_invoices_list"), {**filters, "limit": p["limit"], "offset": p["offset"]}
    )
    totals = await db.fetchall(q("accounting_totals_by_status"), filters)
    total = sum(int(t["invoices"]) for t in totals)
    return {
        "rows": rows,
        "total": total,
        "totals": totals,
        "limit": p["limit"],
        "offset": p["offset"],
    }


async def _load_invoice(ctx: OperationContext) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    db = ctx.require_client_db()
    params = {**ctx.scope(), "invoice_id": ctx.params["invoiceId"]}
    header = await db.fetchone(q("accounting_invoice_get"), params)
    if header is None:
        raise HttpError(404, f"invoice {ctx.params['invoiceId']} not found")
    lines = await db.fetchall(q("accounting_invoice_lines_list"), params)
    return dict(header), [dict(line) for line in lines]


async def invoice(ctx: OperationContext) -> Any:
    header, lines = await _load_invoice(ctx)
    return {"invoice": header, "lines": lines}


async def invoice_pdf(ctx: OperationContext) -> Any:
    header, lines = await _load_invoice(ctx)
    data = render_invoice_pdf(header, lines)
    return BlobResult("application/pdf", data, filename=f"invoice-{header['number']}.pdf")


SURFACE = surface(
    Operation(
        "invoices",
        1,
        {
            "type": "object",
            "properties": {
                "status": {"type": "string", "enum": list(INVOICE_STATUSES)},
                "branch": BRANCH_SCHEMA,
                "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
                "offset": {"type": "integer", "minimum": 0, "maximum": 100_000, "default": 0},
            },
            "additionalProperties": False,
        },
        list_invoices,
        ttl_seconds=60,
        gates=(STAFF_ONLY, branch_in_scope("branch")),
        description="A page of invoices in scope with totals per status and currency.",
        result=INVOICES_RESULT,
    ),
    Operation(
        "invoice",
        1,
        INVOICE_PARAMS,
        invoice,
        ttl_seconds=0,
        gates=(STAFF_ONLY,),
        description="One invoice with its lines.",
        result=INVOICE_RESULT,
    ),
    Operation(
        "invoicePdf",
        1,
        INVOICE_PARAMS,
        invoice_pdf,
        ttl_seconds=0,
        gates=(STAFF_ONLY,),
        description="One invoice as a PDF document.",
    ),
    id="accounting",
    description="Invoices for staff: list with totals, detail, PDF.",
)
