"""The console's routes (see ``docs/design.md``, "The operator console")::

    GET  /                       the wallboard: a card per queue type, poison first
    GET  /events                 the wallboard's cards, live (SSE, event ``cards``)
    GET  /jobs                   jobs by type, status, client, operation, error, time; keyset
    GET  /jobs/<id>              one job: envelope (no credential), params, attempts, trace
    GET  /jobs/slowest           303 to the slowest recent done job's page (since, type)
    GET  /jobs/confirm           a bulk action's dry run: the count, and the form to confirm
                                 (operator; no filter beyond status: the form asks "all")
    POST /jobs/retry|discard     a bulk action on a filter, or on all (operator, CSRF)
    POST /jobs/<id>/retry|discard|cancel           one job (operator, CSRF)
    POST /queues/<type>/pause|resume               a queue type (operator, CSRF)
    GET  /audit                  the operators' actions, newest first
    GET  /login, POST /login     a form that takes a token and sets the session cookie
    POST /logout                 drops the cookie (CSRF)
    GET  /healthz, /readyz       liveness; configured and the database checked
    GET  /overview.json          the wallboard's cards as JSON

Every route but ``/healthz``, ``/readyz`` and ``/login`` needs a console role (401/403:
:mod:`dataplane.console.session`); every POST its CSRF token and a form body with only
its route's fields (415, 400: :mod:`dataplane.console.forms`); a number or time out of
its range is a 400 naming it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import trio
from quart import Blueprint, Response, current_app, g, render_template, request

from dataplane.console import actions
from dataplane.console.board import BoardFull
from dataplane.console.forms import ALL_FIELD, FILTER_FIELDS, action_form, check_fields, wants_all
from dataplane.console.reads import (
    MAX_PAGE_SIZE,
    PAGE_SIZE,
    SLOWEST_SAMPLE,
    JobFilter,
    job_detail,
    list_jobs,
    overview,
    parse_job_id,
    parse_since,
    slowest_job,
)
from dataplane.console.reads import type_known as _type_known
from dataplane.console.session import (
    Caller,
    clear_session,
    local_path,
    require_csrf,
    require_operator,
    same_origin,
    set_session,
)
from dataplane.core.errors import DatabaseError, DatabaseUnavailable, InvalidArgument
from dataplane.db import Database
from dataplane.http import ApiError, json_response
from dataplane.http.serve import cancelled_on_stop
from dataplane.operator import list_audit
from dataplane.operator.audit import MAX_AUDIT_ID
from dataplane.operator.jobs import BULK_MAX
from dataplane.queue.types import QueueType

views = Blueprint("console", __name__)
MAX_STREAM_SECONDS = 300.0  # a wallboard stream ends after this; htmx reconnects
KEEPALIVE = 15.0  # seconds between comments on a quiet stream


def _state() -> Any:
    return current_app.extensions["console"]


def caller() -> Caller:
    state = _state()
    if state.sessions is None:
        raise ApiError(503, state.why, "NOT_CONFIGURED")
    g.caller = state.sessions.caller()
    return g.caller  # type: ignore[no-any-return]


def database() -> Database:
    state = _state()
    if state.db is None:
        raise ApiError(503, state.why, "NOT_READY")
    return state.db  # type: ignore[no-any-return]


async def page(template: str, status: int = 200, **context: Any) -> Response:
    body = await render_template(template, me=g.get("caller"), **context)
    return Response(body, status=status, mimetype="text/html")


def _checked(fn: Any, *args: Any) -> Any:
    """``fn(*args)``, a bad argument as a 400 saying what is wrong."""
    try:
        return fn(*args)
    except InvalidArgument as exc:
        raise ApiError(400, str(exc)) from None


async def _guarded(coro: Any) -> Any:
    try:
        return await coro
    except InvalidArgument as exc:
        raise ApiError(400, str(exc)) from None
    except DatabaseUnavailable as exc:
        raise ApiError(503, f"the queue database is unavailable: {exc}") from None
    except DatabaseError as exc:
        raise ApiError(503, f"the queue database refused the read: {exc}") from None


def _see_other(location: str) -> Response:
    return Response("", status=303, headers={"Location": location})


@views.get("/healthz")
async def healthz() -> Response:
    return json_response({"status": "ok"})


@views.get("/readyz")
async def readyz() -> Response:
    state = _state()
    ok = state.sessions is not None and state.db is not None
    body = {"status": "ready" if ok else "not ready", "why": None if ok else state.why}
    return json_response(body, 200 if ok else 503)


@views.get("/")
async def wallboard() -> Response:
    caller()
    cards = await _guarded(overview(database()))
    return await page("board.html", cards=cards, board=_state().board)


@views.get("/overview.json")
async def overview_json() -> Response:
    caller()
    cards = await _guarded(overview(database()))
    return json_response([_card_json(c) for c in cards])


def _card_json(card: Any) -> dict[str, Any]:
    out = {k: getattr(card, k) for k in card.__dataclass_fields__}
    for k, v in out.items():
        if hasattr(v, "isoformat"):
            out[k] = v.isoformat()
    out["paused"] = card.paused
    return out


@views.get("/events")
async def events() -> Response:
    me = caller()
    board = _state().board
    database()
    deadline = min(time.time() + MAX_STREAM_SECONDS, me.expires)

    async def stream() -> AsyncIterator[bytes]:
        try:
            with board.subscribed(), cancelled_on_stop():
                with trio.move_on_after(max(0.0, deadline - time.time())):
                    seen = 0
                    while True:
                        with trio.move_on_after(KEEPALIVE) as quiet:
                            seen, html = await board.wait_newer(seen)
                        if quiet.cancelled_caught:
                            yield b": keepalive\n\n"
                            continue
                        data = "".join(f"data: {line}\n" for line in html.splitlines())
                        yield f"event: cards\n{data}\n".encode()
        except BoardFull:
            yield b"event: full\ndata: too many wallboard streams\n\n"

    if board.subscribers >= board.max_subscribers:
        raise ApiError(503, "too many wallboard streams at once", retry_after=30)
    resp = Response(stream(), mimetype="text/event-stream")
    resp.headers["X-Accel-Buffering"] = "no"
    resp.timeout = None
    return resp


@views.get("/jobs")
async def jobs() -> Response:
    caller()
    selected = _checked(JobFilter.from_args, request.args)
    limit = _int_arg("limit", 1, MAX_PAGE_SIZE) or PAGE_SIZE
    found = await _guarded(
        list_jobs(database(), selected, after=request.args.get("after"), limit=limit)
    )
    return await page("jobs.html", jobs=found, filter=selected, query=selected.query())


def _int_arg(name: str, low: int, high: int) -> int | None:
    """The query's integer ``name`` in ``low..high`` (``low`` >= 1), None when absent;
    else 400 naming it."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, f"{name} must be an integer, got {raw[:40]!r}") from None
    if not low <= value <= high:
        raise ApiError(400, f"{name} must be in {low}..{high}, got {raw[:40]}")
    return value


@views.get("/jobs/slowest")
async def slowest() -> Response:
    """The latency alerts' link (``trace_url``): 303 to the page of the done job that
    took longest from enqueue to completion since ``since`` (default ``1h``), of the
    queue type ``type`` when given; that page links the job's trace."""
    caller()
    now = datetime.now(UTC)
    since = _checked(parse_since, request.args.get("since"), now)
    queue_type = (request.args.get("type") or "").strip() or None
    found = await _guarded(slowest_job(database(), since, queue_type))
    if found is None:
        of = f" of type {queue_type}" if queue_type else ""
        at = since.isoformat(timespec="seconds")
        raise ApiError(
            404,
            f"no job{of} completed since {at} (searched: the newest {SLOWEST_SAMPLE:,} done jobs)",
        )
    return _see_other(f"/jobs/{found.id}")


@views.get("/jobs/<job_id>")
async def job(job_id: str) -> Response:
    caller()
    ident = _checked(parse_job_id, job_id)
    detail = await _guarded(job_detail(database(), ident))
    if detail is None:
        raise ApiError(404, f"no job {ident}")
    template = _state().settings.trace_url
    trace_url = (
        template.replace("{trace_id}", detail.trace_id) if template and detail.trace_id else None
    )
    return await page("job.html", d=detail, trace_url=trace_url)


@views.get("/audit")
async def audit() -> Response:
    caller()
    before = _int_arg("before", 1, MAX_AUDIT_ID)
    rows = await _guarded(list_audit(database(), limit=100, before=before))
    return await page("audit.html", rows=rows)


@views.get("/login")
async def login_form() -> Response:
    """The sign-in form; a browser already signed in goes straight on to ``next``."""
    next_page = local_path(request.args.get("next", "/"))
    state = _state()
    if state.sessions is not None and request.args.get("next"):
        try:
            caller()
        except ApiError:
            pass  # no session, or a lapsed one: the form
        else:
            return _see_other(next_page)
    return await page("login.html", next_page=next_page)


@views.post("/login")
async def login() -> Response:
    same_origin()
    form = await action_form(("token", "next"))
    token = (form.get("token") or "").strip()
    state = _state()
    if state.sessions is None:
        raise ApiError(503, state.why, "NOT_CONFIGURED")
    if not token:
        raise ApiError(400, "paste a token into the form")
    me = state.sessions.check_token(token, via_cookie=True)
    resp = _see_other(local_path(form.get("next", "/")))
    set_session(resp, token, me.expires)
    return resp


@views.post("/logout")
async def logout() -> Response:
    me = caller()
    require_csrf(me, await action_form())
    resp = _see_other("/login")
    clear_session(resp)
    return resp


# -- actions -------------------------------------------------------------------------


async def _acting(fields: tuple[str, ...] = ()) -> tuple[Caller, Any]:
    """The caller, checked for an action: an operator with the CSRF token, in a form
    of ``fields`` (and ``csrf``) only."""
    me = caller()
    form = await action_form(fields)
    require_csrf(me, form)
    require_operator(me)
    return me, form


@views.get("/jobs/confirm")
async def confirm() -> Response:
    """A bulk action's dry run, for operators only: the count, and the form that
    confirms it; without a filter beyond status the form asks the operator to choose
    every job ("all"), which the action needs then."""
    me = caller()
    require_operator(me)
    check_fields(request.args, {"action", ALL_FIELD, *FILTER_FIELDS}, "query field")
    action = request.args.get("action", "")
    if action not in actions.BULK:
        raise ApiError(400, "action must be retry or discard")
    args = request.args.to_dict()
    args.setdefault("status", "poison")
    selected = _checked(JobFilter.from_args, args)
    every = wants_all(request.args)
    await _check_type(selected.type)
    unfiltered = not actions.narrowed(selected)
    if every and not unfiltered:
        raise ApiError(400, "all means every job of every type and client: drop the filter")
    n = await actions.count(database(), me.operator, action, selected)  # a dry run
    return await page(
        "confirm.html",
        action=action,
        count=n,
        query=selected.query(),
        bulk_max=BULK_MAX,
        unfiltered=unfiltered,
        job_status=selected.status,
    )


async def _check_type(queue_type: str | None) -> None:
    if queue_type is None:
        return
    _checked(QueueType.parse, queue_type)
    if not await _guarded(_type_known(database(), queue_type)):
        raise ApiError(400, f"unknown queue type {queue_type!r}: no jobs, reports or pause of it")


@views.post("/jobs/<action>")
async def bulk(action: str) -> Response:
    me, form = await _acting((*FILTER_FIELDS, ALL_FIELD))
    if action not in actions.BULK:
        raise ApiError(404, f"no action {action!r}")
    selected = _checked(JobFilter.from_args, form)
    every = wants_all(form)
    await _check_type(selected.type)
    done = await actions.bulk(database(), me.operator, action, selected, every=every)
    return await page("done.html", done=done)


@views.post("/jobs/<job_id>/<action>")
async def one_job(job_id: str, action: str) -> Response:
    me, _form = await _acting()
    ident = _checked(parse_job_id, job_id)
    if action == "cancel":
        done = await actions.cancel(database(), me.operator, ident)
    elif action in actions.BULK:
        done = await actions.bulk(database(), me.operator, action, JobFilter(), ident)
    else:
        raise ApiError(404, f"no action {action!r}")
    return await page("done.html", done=done)


@views.post("/queues/<queue_type>/<action>")
async def queue_action(queue_type: str, action: str) -> Response:
    me, _form = await _acting()
    if action not in ("pause", "resume"):
        raise ApiError(404, f"no action {action!r}")
    await _check_type(queue_type)
    done = await actions.pause(database(), me.operator, queue_type, resume=action == "resume")
    return await page("done.html", done=done)
