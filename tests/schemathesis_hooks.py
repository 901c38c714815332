"""Schemathesis hooks of tests/acceptance/test_openapi_fuzz.py, loaded by the
``schemathesis`` process through ``SCHEMATHESIS_HOOKS`` (this file's path).

Why the fuzzer missed the job routes' 400 (a path that percent-encodes what needs no
encoding, refused by the HTTP edge before routing): Schemathesis never sends a ``/`` in
a path parameter, normalises every value to the escapes it needs (``%6d`` is sent as
``m``), and draws a ``{"type": "string"}`` job id from a handful of short strings, so
the one character that reaches the edge's refusal (a backslash, sent as ``%5C``) came
up in one run against ``dataplane dev`` and never in the suite's ten examples per
operation. Here every path parameter is also drawn from :data:`EDGE_VALUES` (beside the
schema's own values, one branch in two): characters an HTTP stack treats specially,
which the document must answer for like any other input.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import strategies as st

EDGE_VALUES = ("a\\b", "\\", "..\\x", "caf\u00e9", "a b", "100%", "%", "x;y", "?", "#")


@schemathesis.hook
def before_generate_path_parameters(context: Any, strategy: st.SearchStrategy) -> Any:
    edge = strategy.flatmap(
        lambda found: (
            st.fixed_dictionaries({name: st.sampled_from(EDGE_VALUES) for name in found})
            if isinstance(found, dict)
            else st.just(found)
        )
    )
    return st.one_of(strategy, edge)
