"""Render one invoice as a PDF (fpdf2, core Helvetica font only).

Core PDF fonts cover Latin-1 only: every text is sanitised to it first, so a
name with other characters renders with ``?`` instead of failing the job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fpdf import FPDF

# (heading, width in mm, alignment) of the line table; widths sum to 180 (A4 less margins)
_COLUMNS = (("Course", 28, "L"), ("Description", 82, "L"), ("Qty", 14, "R"),
            ("Unit", 28, "R"), ("Amount", 28, "R"))  # fmt: skip
_DESCRIPTION_CHARS = 48


def latin1(value: object) -> str:
    """``value`` as text the core fonts can draw (others become ``?``)."""
    text = "" if value is None else str(value)
    text = text.replace("\u2013", "-").replace("\u2014", "-").replace("\u2019", "'")
    return text.encode("latin-1", "replace").decode("latin-1")


def money(cents: int, currency: str = "") -> str:
    """Integer cents as ``1,234.56`` (plus the currency, when given)."""
    sign = "-" if cents < 0 else ""
    whole, frac = divmod(abs(int(cents)), 100)
    amount = f"{sign}{whole:,}.{frac:02d}"
    return f"{amount} {currency}".strip()


def _day(iso: object) -> str:
    return latin1(iso)[:10]


def render_invoice_pdf(invoice: Mapping[str, Any], lines: Sequence[Mapping[str, Any]]) -> bytes:
    """A one-or-more page A4 invoice: header, line table, total."""
    currency = latin1(invoice["currency"])
    pdf = FPDF(format="A4")
    pdf.set_title(latin1(f"Invoice {invoice['number']}"))
    pdf.set_author(latin1(invoice.get("client_name") or invoice.get("client_id")))
    pdf.set_auto_page_break(auto=True, margin=15)
    pdf.add_page()

    pdf.set_font("Helvetica", "B", 18)
    pdf.cell(0, 10, latin1(f"Invoice {invoice['number']}"), new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", "", 10)
    facts = (
        ("Client", f"{invoice.get('client_name') or ''} ({invoice.get('client_id') or ''})"),
        ("Branch", f"{invoice.get('branch_name') or ''} ({invoice.get('branch_id') or ''})"),
        ("Issued", _day(invoice.get("issued_at"))),
        ("Due", _day(invoice.get("due_at"))),
        ("Status", invoice.get("status")),
    )
    for label, value in facts:
        pdf.set_font("Helvetica", "B", 10)
        pdf.cell(25, 6, latin1(label))
        pdf.set_font("Helvetica", "", 10)
        pdf.cell(0, 6, latin1(value), new_x="LMARGIN", new_y="NEXT")
    pdf.ln(6)

    pdf.set_font("Helvetica", "B", 10)
    pdf.set_fill_color(230, 230, 230)
    for heading, width, align in _COLUMNS:
        pdf.cell(width, 7, heading, border=1, align=align, fill=True)
    pdf.ln()
    pdf.set_font("Helvetica", "", 9)
    for line in lines:
        description = latin1(line.get("description"))
        if len(description) > _DESCRIPTION_CHARS:
            description = description[: _DESCRIPTION_CHARS - 3] + "..."
        cells = (
            latin1(line.get("course_code") or ""),
            description,
            str(line["quantity"]),
            money(line["unit_cents"]),
            money(line["line_total_cents"]),
        )
        for text, (_, width, align) in zip(cells, _COLUMNS, strict=True):
            pdf.cell(width, 6, text, border=1, align=align)
        pdf.ln()

    pdf.set_font("Helvetica", "B", 11)
    label_width = sum(width for _, width, _ in _COLUMNS[:-1])
    pdf.cell(label_width, 8, "Total", border=1, align="R")
    pdf.cell(_COLUMNS[-1][1], 8, money(invoice["total_cents"]), border=1, align="R")
    pdf.ln(10)
    pdf.set_font("Helvetica", "", 9)
    pdf.cell(0, 5, latin1(f"All amounts in {currency}."), new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())
