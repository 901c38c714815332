"""Logging for every process of the plane, configured here and nowhere else.

:func:`configure_logging` runs once per process — :func:`dataplane.cli.main` for
``dataplane worker``, ``dataplane dev`` and the other commands; the lifespan of the
BFF and of capcom (Hypercorn processes) — and gives the root logger one stderr
handler, formatted as ``DATAPLANE_LOG_FORMAT`` says:

* ``text`` (the default): ``2026-12-01 08:45:10,123 INFO dataplane.access: GET ...``;
  a record's ``traceback`` field (a failed attempt's, formatted and bounded where it
  was made) follows its line, as a logged exception's does;
* ``json``: one JSON object a line (python-json-logger's formatter): ``timestamp``
  (ISO 8601, UTC), ``level``, ``logger``, ``message``; ``trace_id`` and ``span_id``
  (hex, as OTLP backends show them) when the line is logged inside a span; the
  record's ``extra`` fields (the access log's ``method``, ``route``, ``status``, ...; a
  failed attempt's ``traceback``); ``exc_info`` with a logged exception's traceback.

Calling it again replaces our handler (never adds a second one) and leaves other
handlers alone (pytest's). httpx's per-request INFO lines are silenced (WARNING);
Python warnings are logged (``py.warnings``), so they keep the format too.
Hypercorn's error log reaches the same handler (:class:`dataplane.http.EdgeLogger`);
its access log is replaced by ``dataplane.access``.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from pythonjsonlogger.json import JsonFormatter

from dataplane.core.settings import from_env, setting

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
QUIET = {"httpx": logging.WARNING, "httpcore": logging.WARNING}  # per-request chatter


@dataclass(frozen=True, slots=True)
class LogConfig:
    format: str = setting("DATAPLANE_LOG_FORMAT", "text", choices=LOG_FORMATS)


class TraceIds(logging.Filter):
    """Adds ``trace_id`` and ``span_id`` of the current span, when there is one (and
    the record has none of its own: the access log names its request's span)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "trace_id" in record.__dict__:
            return True
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id = format(context.trace_id, "032x")
            record.span_id = format(context.span_id, "016x")
        return True


class TextFormatter(logging.Formatter):
    """:data:`TEXT_FORMAT`, then the record's ``traceback`` field when it has one."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        text = record.__dict__.get("traceback")
        return f"{line}\n{text.rstrip()}" if isinstance(text, str) and text else line


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler writing to whatever ``sys.stderr`` is when a line is written
    (as logging's last-resort handler does): a redirect or a test's capture is followed,
    never a stale stream written to."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def json_formatter() -> logging.Formatter:
    return JsonFormatter(
        "%(levelname)s %(name)s %(message)s",
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp=True,
        json_ensure_ascii=False,
    )


def configure_logging(config: LogConfig | None = None, *, level: int = logging.INFO) -> None:
    """Route every logger to stderr in the configured format (see the module docstring)."""
    config = config if config is not None else from_env(LogConfig)
    handler = StderrHandler()
    if config.format == "json":
        handler.setFormatter(json_formatter())
        handler.addFilter(TraceIds())
    else:
        handler.setFormatter(TextFormatter(TEXT_FORMAT))
    handler.set_name("dataplane")
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == "dataplane"]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name, quiet in QUIET.items():
        logging.getLogger(name).setLevel(quiet)
    logging.captureWarnings(True)  # warnings too, in the same format (``py.warnings``)
