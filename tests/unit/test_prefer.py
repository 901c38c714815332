"""Parsing ``Prefer`` fields (RFC 7240 section 2): what is honoured, what is ignored."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataplane.bff.reply.prefer import DELTA_SECONDS_OVERFLOW, Preferences, parse_prefer


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ([], Preferences()),
        (["wait=5"], Preferences(wait=5)),
        (["respond-async, wait=10"], Preferences(wait=10, respond_async=True)),
        (["Respond-Async", "WAIT = 7"], Preferences(wait=7, respond_async=True)),
        (['wait="3"'], Preferences(wait=3)),
        (["wait=3; foo=bar; baz"], Preferences(wait=3)),
        (['x="a, wait=1", wait=4'], Preferences(wait=4)),
        (["wait=2", "wait=9"], Preferences(wait=2)),  # the first instance counts
        (["wait=abc, wait=3"], Preferences()),  # ... even when it cannot be honoured
        (["wait=0"], Preferences(wait=0)),
        (["wait=99999999999999999999"], Preferences(wait=DELTA_SECONDS_OVERFLOW)),
        (["wait=-1"], Preferences()),
        (["wait=1.5"], Preferences()),
        (["wait="], Preferences()),
        (["wait"], Preferences()),
        (['wait=""'], Preferences()),
        (["wait=\u00b2"], Preferences()),  # a digit, but not an ASCII one
        ([",,;=", ""], Preferences()),
    ],
)
def test_parse_prefer(fields: list[str], expected: Preferences) -> None:
    assert parse_prefer(fields) == expected


@given(st.lists(st.text(max_size=60), max_size=4))
def test_any_prefer_field_parses_without_error(fields: list[str]) -> None:
    prefs = parse_prefer(fields)
    assert prefs.wait is None or prefs.wait >= 0
