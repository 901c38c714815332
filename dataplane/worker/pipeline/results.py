"""The completion a handler's value becomes: inline JSON, or a blob.

A value of at most ``inline_max_bytes`` of JSON is written into the row as
``{"data": <its JSON>, "cache", "coalesced"}`` (its JSON not parsed again); bytes, a
:class:`~dataplane.surfaces.manifest.BlobResult` or larger JSON are offloaded to a blob
(:mod:`dataplane.queue.blobs`) and the row holds its reference (``blobRef``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from dataplane.queue import Blob, ClaimedJob, Completion, JsonText, to_json
from dataplane.queue.blobs import blob_ref
from dataplane.surfaces.manifest import BlobResult
from telemetry.report import CacheStatus


def shape(
    job: ClaimedJob, value: Any, cache: CacheStatus, coalesced: bool, *, inline_max_bytes: int
) -> Completion:
    """The row's result, and a blob when the value is binary or too large to inline.

    A blob's reference carries its type, size and file name; the BFF adds its URL.
    """
    meta = {"cache": cache.value, "coalesced": coalesced}
    blob: Blob | None = None
    filename: str | None = None
    if isinstance(value, BlobResult):
        blob, filename = Blob(value.content_type, value.data), value.filename
    elif isinstance(value, bytes | bytearray):
        blob = Blob("application/octet-stream", bytes(value))
    else:
        text = to_json(value, what="handler result")
        if len(text.encode()) <= inline_max_bytes:
            tail = _meta_json(cache.value, bool(coalesced))
            return Completion(job, JsonText('{"data":' + text + "," + tail + "}"))
        blob = Blob("application/json", text.encode())
    return Completion(job, {"blobRef": blob_ref(blob, filename), **meta}, blob)


@lru_cache(maxsize=16)
def _meta_json(cache: str, coalesced: bool) -> str:
    """An inline result's members after ``data``, as JSON without the braces (six
    combinations): the result is ``{"data": <its JSON>, <these>}``, its JSON not parsed
    again."""
    return to_json({"cache": cache, "coalesced": coalesced})[1:-1]
