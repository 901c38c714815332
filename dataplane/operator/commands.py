"""The operator commands of the ``dataplane`` CLI: ``jobs``, ``queue`` and ``audit``.

They call :mod:`dataplane.operator.jobs`, :mod:`~dataplane.operator.pause` and
:mod:`~dataplane.operator.audit`, the functions the console calls, as
:meth:`Operator.cli` (the OS user). Bad input (an unknown status, a string that is not a
queue type, a malformed or out-of-range time or number, too many rows without
``--limit``) exits 2 with one line on stderr. A bulk action whose filter names nothing
beyond a status needs ``--all`` (every job of every type and client: never by
omission); ``--all`` with a filter is refused. A bulk action without ``--dry-run``
prints the count it selects and asks for a confirmation naming it, unless ``--yes``; a
filter that matches nothing prints 0 and changes (and records) nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict
from datetime import datetime
from typing import Any

import trio

from dataplane.core.errors import InvalidArgument
from dataplane.core.settings import from_env
from dataplane.db import Database, open_bridge
from dataplane.operator import jobs, pause
from dataplane.operator.attempts import attempts_of
from dataplane.operator.audit import Operator, list_audit
from dataplane.operator.cancel import cancel_command
from dataplane.operator.show import show_lines
from dataplane.queue import QueueClient, QueueConfig, open_queue_database

LIST_LIMIT = 50  # rows `dataplane jobs` lists unless --limit


def add_parsers(sub: Any) -> None:
    """Add ``jobs``, ``queue`` and ``audit`` to the CLI's subparsers."""
    p = sub.add_parser(
        "jobs",
        help="list, show, retry or discard jobs: one by id, or every one a filter selects; "
        "cancel one pending or running job",
    )
    p.add_argument(
        "action", nargs="?", choices=["list", "show", "retry", "discard", "cancel"], default="list"
    )
    p.add_argument("job_id", nargs="?")
    p.add_argument(
        "--status",
        help="pending, in_progress, done, poison, cancelled "
        "(retry and discard: poison unless given)",
    )
    p.add_argument("--type", help="the queue type, e.g. surface-probe (a tier is its own type)")
    p.add_argument("--client")
    p.add_argument("--operation")
    p.add_argument("--error", metavar="TEXT", help="a substring of the last error")
    p.add_argument("--since", metavar="ISO", help="created at or after (naive: UTC)")
    p.add_argument("--until", metavar="ISO", help="created before (naive: UTC)")
    p.add_argument(
        "--limit",
        type=int,
        help=f"list: rows (default {LIST_LIMIT}); "
        f"retry/discard: the oldest N (needed above {jobs.BULK_MAX:,})",
    )
    p.add_argument(
        "--all",
        action="store_true",
        dest="every",
        help="retry/discard: every job of every type and client (needed without a filter)",
    )
    p.add_argument("--dry-run", action="store_true", help="count, change nothing")
    p.add_argument("--yes", action="store_true", help="act without asking")
    p.add_argument(
        "--json",
        action="store_true",
        help="show: the row and its attempts (errors, tracebacks) as one JSON document",
    )

    queue = sub.add_parser("queue", help="pause, resume or list paused queue types")
    queue.add_argument("action", choices=["pause", "resume", "list"])
    queue.add_argument("queue_type", nargs="?")

    audit = sub.add_parser("audit", help="the operators' actions, newest first")
    audit.add_argument("--limit", type=int, default=50)


async def run_jobs(args: argparse.Namespace) -> int:
    return await _guarded(args, _jobs)


async def run_queue(args: argparse.Namespace) -> int:
    return await _guarded(args, _queue)


async def run_audit(args: argparse.Namespace) -> int:
    return await _guarded(args, _audit)


COMMANDS: dict[str, Callable[[argparse.Namespace], Awaitable[int]]] = {
    "jobs": run_jobs,
    "queue": run_queue,
    "audit": run_audit,
}


async def _guarded(
    args: argparse.Namespace, fn: Callable[[argparse.Namespace], Awaitable[int]]
) -> int:
    """``fn``, with bad input as one line and exit status 2 (nurseries wrap it)."""
    try:
        return await fn(args)
    except InvalidArgument as exc:
        return _usage(args, exc)
    except BaseExceptionGroup as group:
        matched, rest = group.split(InvalidArgument)
        if matched is None or rest is not None:
            raise
        leaf: BaseException = matched
        while isinstance(leaf, BaseExceptionGroup):
            leaf = leaf.exceptions[0]
        return _usage(args, leaf)


def _usage(args: argparse.Namespace, exc: BaseException) -> int:
    print(f"dataplane {args.command}: {exc}", file=sys.stderr)
    return 2


@asynccontextmanager
async def _database(name: str) -> AsyncIterator[Database]:
    async with open_bridge(), open_queue_database(from_env(QueueConfig).url, name) as db:
        yield db


async def _jobs(args: argparse.Namespace) -> int:
    if args.every and (args.action not in ("retry", "discard") or args.job_id):
        raise InvalidArgument("--all is for a bulk retry or discard, without a job id")
    if args.action == "show":
        return await _show(_job_id(args.job_id), as_json=args.json)
    if args.action == "cancel":
        if not args.job_id:
            raise InvalidArgument("jobs cancel needs a job id")
        async with _database("jobs") as db:
            return await cancel_command(db, args.job_id)
    # A listing, or one job by id, takes any status its action may (a cancelled job can
    # be retried by id, as in the console); a bulk action poison rows unless told.
    default_status = None if args.action == "list" or args.job_id else "poison"
    flt = jobs.JobFilter(
        status=args.status or default_status,
        queue_type=args.type,
        client=args.client,
        operation=args.operation,
        error=args.error,
        since=_time(args.since, "since"),
        until=_time(args.until, "until"),
        job_id=_job_id(args.job_id) if args.job_id else None,
    )
    if args.action == "list":
        return await _list(flt, LIST_LIMIT if args.limit is None else args.limit)
    if flt.job_id is not None:
        return await _one(args.action, flt)
    return await _bulk(args, flt)


async def _list(flt: jobs.JobFilter, limit: int) -> int:
    async with _database("jobs") as db:
        rows = await jobs.list_jobs(db, flt, limit=limit)
    print(f"{'id':36}  {'type':24}  {'status':11}  {'tries':>5}  created / last error")
    for job in rows:
        err = (job.last_error or "").splitlines()[-1:] or [""]
        print(
            f"{job.id!s:36}  {job.type:24}  {job.status:11}  "
            f"{job.dequeue_count:>2}/{job.max_dequeues:<2}  "
            f"{job.created_at:%Y-%m-%d %H:%M:%S}  {err[0][:60]}"
        )
    return 0


async def _show(job_id: uuid.UUID, *, as_json: bool = False) -> int:
    """One job: its row, then each attempt with its error and traceback (``--json``: the
    row's fields and ``attempts`` in one document)."""
    async with _database("jobs") as db:
        job = await QueueClient(db).get(job_id)
        tried = await attempts_of(db, job_id) if job is not None else None
    if job is None or tried is None:
        print(f"no job {job_id}", file=sys.stderr)
        return 1
    if as_json:
        document = {**asdict(job), "attempts": [a.to_json() for a in tried]}
        print(json.dumps(document, indent=2, default=str))
        return 0
    print("\n".join(show_lines(job, tried)))
    return 0


async def _one(action: str, flt: jobs.JobFilter) -> int:
    """``jobs retry ID`` / ``jobs discard ID``: no confirmation (one named job)."""
    act = jobs.retry if action == "retry" else jobs.discard
    async with _database("jobs") as db:
        changed = await act(db, Operator.cli(), flt)
    if changed:
        print(f"job {flt.job_id} is {'pending again' if action == 'retry' else 'discarded'}")
        return 0
    print(f"job {flt.job_id} is not {flt.status} (or does not exist)", file=sys.stderr)
    return 1


async def _bulk(args: argparse.Namespace, flt: jobs.JobFilter) -> int:
    act = jobs.retry if args.action == "retry" else jobs.discard
    if not args.dry_run:  # before the count and the question: refused either way
        try:
            jobs.check_scope(args.action, flt, every=args.every)
        except jobs.Unfiltered as exc:
            raise InvalidArgument(f"{exc} (--all)") from None
    async with _database("jobs") as db:
        selected = await act(db, Operator.cli(), flt, dry_run=True, limit=args.limit)
        if selected > jobs.BULK_MAX and args.limit is None:
            raise InvalidArgument(
                f"the filter selects more than {jobs.BULK_MAX:,} rows; give --limit"
            )
        if args.dry_run or not selected:
            print(
                f"{selected} job(s) would be {_done(args.action)} (dry run)"
                if args.dry_run
                else "0 job(s) match: nothing to do"
            )
            return 0
        if not args.yes and not await _confirm(f"{args.action} {selected} job(s)?"):
            print("nothing done", file=sys.stderr)
            return 1
        changed = await act(db, Operator.cli(), flt, limit=args.limit, every=args.every)
    print(f"{changed} job(s) {_done(args.action)}")
    return 0


async def _confirm(question: str) -> bool:
    def ask() -> str:
        try:
            return input(f"{question} [y/N] ")
        except EOFError:
            return ""

    return (await trio.to_thread.run_sync(ask)).strip().lower() in ("y", "yes")


def _done(action: str) -> str:
    return "retried" if action == "retry" else "discarded"


async def _queue(args: argparse.Namespace) -> int:
    if args.action == "list":
        async with _database("queue") as db:
            rows = await pause.paused(db)
        if not rows:
            print("no queue type is paused")
        for row in rows:
            print(f"{row.type:32}  paused {row.paused_at:%Y-%m-%d %H:%M:%S%z} by {row.paused_by}")
        return 0
    if not args.queue_type:
        raise InvalidArgument(f"queue {args.action} needs a queue type, e.g. surface-probe")
    act = pause.pause if args.action == "pause" else pause.resume
    async with _database("queue") as db:
        changed = await act(db, Operator.cli(), args.queue_type)
    state = "paused" if args.action == "pause" else "resumed"
    print(
        f"{args.queue_type} {state}"
        if changed
        else f"{args.queue_type} was {'already' if args.action == 'pause' else 'not'} paused"
    )
    return 0


async def _audit(args: argparse.Namespace) -> int:
    async with _database("audit") as db:
        rows = await list_audit(db, limit=args.limit)
    for row in rows:
        target = json.dumps(row.target, sort_keys=True)
        print(
            f"{row.at:%Y-%m-%d %H:%M:%S%z}  {row.actor:24}  {row.via:7}  "
            f"{row.action:8}  {row.rows:>7}  {target}"
        )
    return 0


def _job_id(text: str | None) -> uuid.UUID:
    try:
        return uuid.UUID(str(text))
    except ValueError:
        raise InvalidArgument(f"a job id is a UUID, got {text!r}") from None


def _time(text: str | None, name: str) -> datetime | None:
    return None if text is None else jobs.parse_time(text, f"--{name}")
