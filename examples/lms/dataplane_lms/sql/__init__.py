"""The package's named SQL: its surfaces' queries, and its demo DB's seed files."""

from pathlib import Path

from dataplane.db.sql import NamedQueries

SQL_DIR = Path(__file__).resolve().parent
q = NamedQueries(SQL_DIR)
