"""The demo LMS package on its own: its registration, its declarations and its PDF
(no database needed; tests/integration/test_demo_surfaces.py runs its operations
against the seeded client DB)."""

from __future__ import annotations

import io
from importlib.metadata import entry_points

import dataplane_lms
from dataplane_lms import accounting, learnerviews, skills, users
from dataplane_lms.demo_db import demo_files
from dataplane_lms.sql import q
from pypdf import PdfReader

from dataplane import Auth, SurfacePackage

STAFF = Auth(client="acme", user_id="7", actor_email="", staff=True, branches=("*",))


def test_the_package_registers_through_its_entry_point() -> None:
    (ep,) = [e for e in entry_points(group="dataplane.surfaces") if e.name == "lms"]
    package = ep.load()
    assert package is dataplane_lms.PACKAGE and isinstance(package, SurfacePackage)
    assert [s.id for s in package.surfaces] == ["users", "learnerviews", "accounting", "skills"]
    assert package.build_demo_db is not None


def test_its_sql_and_seed_files_ship_with_it() -> None:
    assert q("users_list").lstrip().upper().startswith(("SELECT", "WITH"))
    names = [p.name for p in demo_files()]
    assert names[0].startswith("001_") and names[-1] == "900_readonly_role.sql"


def test_per_user_results_are_tagged_with_their_user() -> None:
    for surface, op in [(users, "detail"), (skills, "profile"), (learnerviews, "learner")]:
        declared = surface.SURFACE.operation(op)
        assert declared.cache_tags(STAFF, {"userId": 42}) == ["c:acme", "u:42", "c:acme|u:42"]
    assert accounting.SURFACE.operation("invoices").cacheable


def test_invoice_pdf_sanitises_text_outside_latin1() -> None:
    from dataplane_lms.invoice_pdf import money, render_invoice_pdf

    header = {
        "number": "INV-X-1", "client_id": "x", "client_name": "Zoë – 東京 ✓", "branch_id": "x-1",
        "branch_name": "Ωmega", "issued_at": "2025-01-01T00:00:00Z",
        "due_at": "2025-01-31T00:00:00Z", "status": "sent", "currency": "EUR",
        "total_cents": 123456,
    }  # fmt: skip
    lines = [
        {"course_code": "C-1", "description": "Ünïcode “quotes” " + "long " * 30, "quantity": 2,
         "unit_cents": 61728, "line_total_cents": 123456},
    ]  # fmt: skip
    data = render_invoice_pdf(header, lines)
    text = PdfReader(io.BytesIO(data)).pages[0].extract_text()
    assert "INV-X-1" in text and "1,234.56" in text and "Zoë" in text
    assert money(5) == "0.05" and money(100_000_00, "USD") == "100,000.00 USD"
