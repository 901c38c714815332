"""The seeded demo client DB in a benchmark (``soak.py``): its name,
its removal, the ids and categories the requests draw on."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from bench.harness.common import Server, drop_database


@contextlib.contextmanager
def demo_db_scope(server: Server) -> Iterator[str]:
    """The demo client DB's name (beside the queue DB); on an external server, where
    the name is a scratch one, the DB is dropped at the end."""
    queue_db = str(conninfo_to_dict(server.dsn).get("dbname") or "postgres")
    name = f"{queue_db}_demo" if server.kind == "external" else "dataplane_demo"
    try:
        yield name
    finally:
        if server.kind == "external":
            with contextlib.suppress(psycopg.Error):
                drop_database(server.dsn, name)


@dataclass
class DemoIds:
    """Ids and categories of the seeded demo data of client ``acme``."""

    users: list[int]
    invoices: list[int]
    course_categories: list[str]
    skill_categories: list[str]


def demo_ids(admin_dsn: str, application_name: str | None = None) -> DemoIds:
    with psycopg.connect(admin_dsn, autocommit=True, application_name=application_name) as conn:

        def column(stmt: str) -> list[Any]:
            return [r[0] for r in conn.execute(stmt).fetchall()]

        return DemoIds(
            users=column("SELECT id FROM lms.users WHERE client_id = 'acme' ORDER BY id"),
            invoices=column("SELECT id FROM lms.invoices WHERE client_id = 'acme' ORDER BY id"),
            course_categories=column(
                "SELECT DISTINCT category FROM lms.courses WHERE client_id = 'acme' ORDER BY 1"
            ),
            skill_categories=column(
                "SELECT DISTINCT category FROM lms.skills WHERE client_id = 'acme' ORDER BY 1"
            ),
        )
