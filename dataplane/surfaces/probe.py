"""The ``probe`` surface: synthetic checks and test traffic (``DATAPLANE_PROBE=1``).

* ``echo {value}``: answers with what it got.
* ``sleep {ms}``: sleeps, then answers (long jobs, leases, shutdown).
* ``fail {times}``: an unexpected error on the first ``times`` claims of the job.
* ``reject {status}``: an expected ``HttpError`` (400/403/404).
* ``large {bytes}``: a result of that many bytes, so it goes out as a blob.
* ``progress {steps, ms}``: reports ``steps`` progress events ``ms`` apart (done/total,
  a message and a partial ``{"step": i}``), then answers.
* ``cached {value}``: answers like ``echo``, cached 60 s per caller (tags ``c:`` and
  ``u:<caller>``): the cache and its invalidation, end to end.
* ``bounded {ms}``: sleeps like ``sleep``, at most 2 attempts running fleet-wide
  (``max_concurrency=2``): flow control, end to end.

No other operation is cached: a probe measures the real path.
"""

from __future__ import annotations

from typing import Any

import trio

from dataplane.core.errors import HttpError
from dataplane.surfaces.manifest import Operation, OperationContext, surface_of

MAX_SLEEP_MS = 600_000
MAX_LARGE_BYTES = 16 * 1024 * 1024
MAX_PROGRESS_STEPS = 1000


class ProbeFailure(RuntimeError):
    """The unexpected error ``probe.fail`` raises on purpose."""


async def echo(ctx: OperationContext) -> Any:
    return {"echo": ctx.params.get("value"), "client": ctx.auth.client}


async def sleep(ctx: OperationContext) -> Any:
    await trio.sleep(ctx.params["ms"] / 1000)
    return {"slept_ms": ctx.params["ms"]}


async def fail(ctx: OperationContext) -> Any:
    if ctx.dequeue_count <= ctx.params["times"]:
        raise ProbeFailure(f"probe.fail: attempt {ctx.dequeue_count} of {ctx.params['times']}")
    return {"succeeded_on_attempt": ctx.dequeue_count}


async def reject(ctx: OperationContext) -> Any:
    raise HttpError(ctx.params["status"], ctx.params["message"])


async def cached(ctx: OperationContext) -> Any:
    return {"cached": ctx.params.get("value"), "user": ctx.auth.user_id}


async def progress(ctx: OperationContext) -> Any:
    steps, ms = ctx.params["steps"], ctx.params["ms"]
    for step in range(1, steps + 1):
        await ctx.progress(
            done=step, total=steps, message=f"step {step} of {steps}", partial={"step": step}
        )
        await trio.sleep(ms / 1000)
    return {"steps": steps}


async def bounded(ctx: OperationContext) -> Any:
    await trio.sleep(ctx.params["ms"] / 1000)
    return {"slept_ms": ctx.params["ms"]}


async def large(ctx: OperationContext) -> Any:
    n = ctx.params["bytes"]
    return {"filler": "x" * n}


SURFACE = surface_of(
    Operation(
        "echo",
        1,
        {
            "type": "object",
            "properties": {"value": {"description": "anything JSON; echoed back"}},
            "additionalProperties": False,
        },
        echo,
        description="Answer with the given value.",
        result={
            "type": "object",
            "properties": {
                "echo": {"description": "the value given"},
                "client": {"type": "string"},
            },
            "required": ["echo", "client"],
            "additionalProperties": False,
        },
    ),
    Operation(
        "sleep",
        1,
        {
            "type": "object",
            "properties": {"ms": {"type": "integer", "minimum": 0, "maximum": MAX_SLEEP_MS}},
            "required": ["ms"],
            "additionalProperties": False,
        },
        sleep,
        description="Sleep for ms milliseconds, then answer.",
        result={
            "type": "object",
            "properties": {"slept_ms": {"type": "integer", "minimum": 0}},
            "required": ["slept_ms"],
            "additionalProperties": False,
        },
    ),
    Operation(
        "fail",
        1,
        {
            "type": "object",
            "properties": {
                "times": {"type": "integer", "minimum": 0, "maximum": 100},
                "nonce": {"type": "string", "maxLength": 100},
            },
            "required": ["times"],
            "additionalProperties": False,
        },
        fail,
        description="Raise an unexpected error on the first `times` claims.",
        result={
            "type": "object",
            "properties": {"succeeded_on_attempt": {"type": "integer", "minimum": 1}},
            "required": ["succeeded_on_attempt"],
            "additionalProperties": False,
        },
    ),
    Operation(
        "reject",
        1,
        {
            "type": "object",
            "properties": {
                "status": {"type": "integer", "enum": [400, 403, 404]},
                "message": {"type": "string", "maxLength": 500, "default": "rejected by probe"},
            },
            "required": ["status"],
            "additionalProperties": False,
        },
        reject,
        description="Answer with an expected error of the given status.",
        result={"not": {}, "description": "none: it always answers an expected error"},
    ),
    Operation(
        "large",
        1,
        {
            "type": "object",
            "properties": {"bytes": {"type": "integer", "minimum": 0, "maximum": MAX_LARGE_BYTES}},
            "required": ["bytes"],
            "additionalProperties": False,
        },
        large,
        description="Answer with a result of about `bytes` bytes (goes out as a blob).",
        result={
            "type": "object",
            "properties": {"filler": {"type": "string"}},
            "required": ["filler"],
            "additionalProperties": False,
        },
    ),
    Operation(
        "progress",
        1,
        {
            "type": "object",
            "properties": {
                "steps": {"type": "integer", "minimum": 1, "maximum": MAX_PROGRESS_STEPS},
                "ms": {"type": "integer", "minimum": 0, "maximum": 60_000},
                "nonce": {"type": "string", "maxLength": 100},
            },
            "required": ["steps", "ms"],
            "additionalProperties": False,
        },
        progress,
        description="Report `steps` progress events `ms` apart, then answer.",
        result={
            "type": "object",
            "properties": {"steps": {"type": "integer", "minimum": 1}},
            "required": ["steps"],
            "additionalProperties": False,
        },
    ),
    Operation(
        "cached",
        1,
        {
            "type": "object",
            "properties": {"value": {"description": "anything JSON; answered back"}},
            "additionalProperties": False,
        },
        cached,
        ttl_seconds=60,
        per_user=True,
        description="Answer with the given value, cached 60 s per caller.",
        result={
            "type": "object",
            "properties": {
                "cached": {"description": "the value given"},
                "user": {"type": "string"},
            },
            "required": ["cached", "user"],
            "additionalProperties": False,
        },
    ),
    Operation(
        "bounded",
        1,
        {
            "type": "object",
            "properties": {
                "ms": {"type": "integer", "minimum": 0, "maximum": MAX_SLEEP_MS},
                "nonce": {"type": "string", "maxLength": 100},
            },
            "required": ["ms"],
            "additionalProperties": False,
        },
        bounded,
        max_concurrency=2,
        description="Sleep for ms milliseconds, at most 2 at once across the fleet.",
        result={
            "type": "object",
            "properties": {"slept_ms": {"type": "integer", "minimum": 0}},
            "required": ["slept_ms"],
            "additionalProperties": False,
        },
    ),
    id="probe",
    description="Synthetic checks: echo, sleep, fail, reject, large, progress, cached, bounded.",
    needs_client_db=False,
)
