"""Calling an operation's handler: in its own span (tracing on), under the deadline
its claim's scope enforces (:mod:`dataplane.worker.pipeline.deadlines`).

A cancellation by that deadline becomes :class:`HandlerTimeout` where it happens, so
the handler's span records it and the jobs coalesced onto this execution (single
flight) share the failure, as they share a result; any other cancellation (a lost
lease, shutdown) propagates as it is.
"""

from __future__ import annotations

from typing import Any

import trio

from dataplane.surfaces.manifest import Operation, OperationContext
from dataplane.worker.claims.held import Running
from telemetry.tracing import tracer


class HandlerTimeout(Exception):
    """The handler ran past its operation's ``timeout_seconds`` (the attempt fails)."""


def timeout_message(op: Operation, limit: float) -> str:
    return f"TIMEOUT: {op.name} ran past its {limit:g}s timeout; cancelled"


async def call_handler(
    op: Operation, ctx: OperationContext, running: Running, limit: float, traced: bool
) -> Any:
    if not traced:
        return await _timed_handler(op, ctx, running, limit)
    with tracer().start_as_current_span(
        f"{op.name} handler", attributes={"dataplane.operation": op.name}
    ):
        return await _timed_handler(op, ctx, running, limit)


async def _timed_handler(
    op: Operation, ctx: OperationContext, running: Running, limit: float
) -> Any:
    """The handler, its deadline's cancellation turned into :class:`HandlerTimeout`
    where it happens: the handler's span records it, and jobs coalesced onto this
    execution (single flight) share the failure, as they share a result."""
    try:
        return await op.handler(ctx)
    except trio.Cancelled as cancelled:
        if running.timed_out and not running.lost:
            # Its cause is where the handler was when its deadline cancelled it.
            raise HandlerTimeout(timeout_message(op, limit)) from cancelled
        raise
