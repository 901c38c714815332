"""What an action's POST may carry: a form body, with only the fields its route names.

Quart reads a form only from a form's content type: a JSON body (or any other) was
read as an empty form, so a bulk retry posted as JSON lost its filter and took every
poison job of every type. Here every console POST (:func:`action_form`) is

* a form (``application/x-www-form-urlencoded``, or ``multipart/form-data`` without a
  file), or no body at all: anything else is 415;
* made of the route's fields only, each at most once: a field it does not know (a typo,
  ``typ=``), a field given twice or a file is a 400 naming it, never ignored.

"all" (:func:`wants_all`) is how the confirm page says the operator chose every job of
every type and client (:func:`dataplane.operator.jobs.check_scope`): ``1``, ``true``
or ``on`` (a checkbox without a value), or empty or absent for no; anything else is a
400 naming it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from quart import request

from dataplane.http import ApiError

FORM_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data"})
CSRF_FIELD = "csrf"
ALL_FIELD = "all"
FILTER_FIELDS = ("type", "status", "client", "operation", "error", "since", "until")
YES = frozenset({"1", "true", "on"})


def _has_body() -> bool:
    length = request.headers.get("Content-Length")
    chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
    return chunked or (length is not None and length.strip() not in ("", "0"))


async def action_form(fields: Iterable[str] = ()) -> Any:
    """The POST's form (a ``MultiDict``): 415 unless it is a form or there is no body,
    400 naming a field that is not ``csrf`` or one of ``fields``, or that is repeated."""
    if request.mimetype not in FORM_TYPES:
        if request.mimetype or _has_body():
            raise ApiError(
                415,
                f"send a form (application/x-www-form-urlencoded), not "
                f"{request.mimetype or 'a body without a Content-Type'}: an action reads "
                "its filter from the form's fields only",
            )
    form = await request.form
    files = await request.files
    if files:
        raise ApiError(400, f"unknown field {next(iter(files))!r}: an action takes no file")
    check_fields(form, {CSRF_FIELD, *fields}, "field")
    return form


def check_fields(given: Any, known: set[str], what: str) -> None:
    """400 naming the first of ``given`` (a ``MultiDict``) not in ``known``, or given
    more than once."""
    for name in given:
        if name not in known:
            expected = ", ".join(sorted(known))
            raise ApiError(400, f"unknown {what} {name!r}: this takes {expected}")
        if len(given.getlist(name)) > 1:
            raise ApiError(400, f"{what} {name!r} is given more than once")


def wants_all(given: Any) -> bool:
    """Whether ``given`` (a form or query string) says "all"; 400 for a malformed value."""
    raw = (given.get(ALL_FIELD) or "").strip().lower()
    if raw and raw not in YES:
        raise ApiError(400, f"all: 1, true or on (or absent), got {raw[:40]!r}")
    return bool(raw)
