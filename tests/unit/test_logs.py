"""The log formats of telemetry.logs (the processes' logs are read in
tests/acceptance/test_logs.py)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider

from dataplane.core.errors import ConfigError
from dataplane.core.settings import from_env
from telemetry.logs import LogConfig, TraceIds, configure_logging, json_formatter


def json_logger(name: str) -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(json_formatter())
    handler.addFilter(TraceIds())
    logger = logging.getLogger(name)
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger, out


def test_a_json_line_has_the_fields_and_the_extras() -> None:
    logger, out = json_logger("test.logs.fields")
    logger.info("GET %s %d", "/x", 200, extra={"status": 200, "job_id": None, "client": "é"})
    (line,) = out.getvalue().splitlines()
    record = json.loads(line)
    assert record["level"] == "INFO" and record["logger"] == "test.logs.fields"
    assert record["message"] == "GET /x 200"
    assert record["timestamp"].endswith("+00:00")  # ISO 8601, UTC
    assert record["status"] == 200 and record["job_id"] is None and record["client"] == "é"
    assert "trace_id" not in record and "span_id" not in record  # not inside a span


def test_inside_a_span_a_line_carries_its_ids() -> None:
    logger, out = json_logger("test.logs.span")
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("work") as span:
        logger.warning("inside")
    context = span.get_span_context()
    record = json.loads(out.getvalue())
    assert record["trace_id"] == format(context.trace_id, "032x")
    assert record["span_id"] == format(context.span_id, "016x")


def test_a_traceback_stays_on_one_line() -> None:
    logger, out = json_logger("test.logs.exc")
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("failed")
    (line,) = out.getvalue().splitlines()
    assert "ValueError: boom" in json.loads(line)["exc_info"]


@pytest.fixture
def root_restored() -> Iterator[logging.Logger]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    httpx_level = logging.getLogger("httpx").level
    yield root
    root.handlers = handlers
    root.setLevel(level)
    logging.getLogger("httpx").setLevel(httpx_level)
    logging.captureWarnings(False)


def test_configured_twice_there_is_one_handler_and_httpx_is_quiet(
    root_restored: logging.Logger,
) -> None:
    configure_logging(LogConfig(format="json"))
    configure_logging(LogConfig(format="text"))
    ours = [h for h in root_restored.handlers if h.get_name() == "dataplane"]
    assert len(ours) == 1
    assert not isinstance(ours[0].formatter, type(json_formatter()))
    assert logging.getLogger("httpx").getEffectiveLevel() == logging.WARNING


def test_the_format_is_checked() -> None:
    assert from_env(LogConfig, {}).format == "text"
    assert from_env(LogConfig, {"DATAPLANE_LOG_FORMAT": "json"}).format == "json"
    with pytest.raises(ConfigError, match="DATAPLANE_LOG_FORMAT"):
        from_env(LogConfig, {"DATAPLANE_LOG_FORMAT": "yaml"})


def test_a_failed_attempt_s_traceback_follows_its_line_in_both_formats(
    root_restored: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record's ``traceback`` field (a failed attempt's, formatted where it was made)
    is printed under its line in the text format and is a field of the JSON line."""
    tb = 'Traceback (most recent call last):\n> File "shop/h.py", line 3, in f\nKeyError: 1\n'
    log = logging.getLogger("test.logs.attempt")
    configure_logging(LogConfig(format="text"))
    log.error("job j failed", extra={"traceback": tb})
    first, rest = capsys.readouterr().err.split("\n", 1)
    assert first.endswith(" ERROR test.logs.attempt: job j failed")
    assert rest == tb
    configure_logging(LogConfig(format="json"))
    log.error("job j failed", extra={"traceback": tb})
    record = json.loads(capsys.readouterr().err)
    assert record["message"] == "job j failed" and record["traceback"] == tb
