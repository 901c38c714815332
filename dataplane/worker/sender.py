"""The capcom sender: a worker's finished-job reports, posted fire-and-forget.

:class:`CapcomSender` is a :class:`~dataplane.worker.report.Reporter`. The worker calls
:meth:`CapcomSender.report` after each job: it puts the report on a bounded Trio
memory channel with ``send_nowait`` and returns. It never waits and never raises:
with the channel full the report is dropped and counted (``queue_full``).

:meth:`CapcomSender.run`, a task of the worker's service nursery, empties the
channel: it takes what is waiting (up to :data:`MAX_BATCH` reports and
:data:`MAX_BATCH_BYTES` of JSON) and POSTs it as one JSON array to
``{base_url}/worker/job-finished`` with the shared bearer token, each POST bounded
by ``trio.move_on_after(timeout)``. At idle a report goes alone and at once; under
load reports pile up while a POST is in flight and go together.

States: *healthy* (post as soon as there is something to post) and *failing* (the
last POST failed: wait a back-off, :data:`RETRY_START` doubling to
:data:`RETRY_MAX`, before the next POST; reports keep queueing meanwhile, and past
``queue_size`` they are dropped as ``queue_full``). The first 2xx answer makes it
healthy again.

Failure handling: nothing is retried — a failed POST drops its reports, counted by
reason: ``timeout`` (no answer within ``timeout``), ``refused`` (no connection:
refused, unreachable, name not resolved), ``rejected`` (a non-2xx answer: bad
token, bad report, capcom's database down), ``error`` (any other transport error),
``invalid`` (a report that cannot be encoded as JSON or is alone over the body
limit), ``shutdown`` (still queued when the worker stopped). Each drop also adds to
the ``dataplane.capcom.dropped`` counter with its reason. Drops are logged as one
warning at most every ``log_every`` seconds, with the counts since the previous
one. On cancellation (worker shutdown) what is queued gets one last POST, shielded
and bounded by :data:`FLUSH_TIMEOUT` — skipped when capcom is already failing.

A capcom that is down, refusing or hanging therefore costs a job nothing: the job
path only ever does ``send_nowait``.

Tracing: each POST is a client span in the trace of its batch's first report (the
attempt's ``process`` span, given to :meth:`CapcomSender.report` as ``parent``),
linked to the other reports' traces, and carries its ``traceparent`` header, so
capcom's server span joins that trace. Reports without a parent make no span.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

import httpx
import trio
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind

from dataplane.core.errors import InvalidArgument
from telemetry.metrics import REASON, instruments
from telemetry.report import JobReport, encode_report
from telemetry.tracing import failed, inject_headers, tracer

log = logging.getLogger(__name__)

PATH = "/worker/job-finished"
QUEUE_SIZE = 1000  # reports held while capcom is slow or down
TIMEOUT = 2.0  # seconds one POST may take, connect included
MAX_BATCH = 32  # reports per POST
MAX_BATCH_BYTES = 15 * 1024  # JSON bytes per POST: under capcom's 16 KiB body limit
LOG_EVERY = 30.0  # seconds between two drop warnings
RETRY_START = 0.5  # seconds of back-off after the first failed POST
RETRY_MAX = 10.0  # back-off ceiling, seconds
FLUSH_TIMEOUT = 1.0  # seconds the last POST on shutdown may take
CLOSE_TIMEOUT = 1.0  # seconds to close the HTTP client on shutdown

_Item = tuple[bytes, Context | None]  # an encoded report and its attempt's span


@dataclass(frozen=True, slots=True)
class SenderStatistics:
    sent: int  # reports capcom accepted
    dropped: Mapping[str, int]  # reports dropped, by reason
    queued: int  # reports waiting to be posted
    posts: int  # POSTs made
    failed_posts: int  # of which failed

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())


class CapcomSender:
    """Posts job reports to capcom; see the module docstring."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        queue_size: int = QUEUE_SIZE,
        timeout: float = TIMEOUT,
        log_every: float = LOG_EVERY,
        max_batch: int = MAX_BATCH,
        retry_start: float = RETRY_START,
        retry_max: float = RETRY_MAX,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidArgument(f"capcom URL must be http(s)://host[:port], got {base_url!r}")
        if queue_size < 1 or max_batch < 1:
            raise InvalidArgument("queue_size and max_batch must be >= 1")
        if timeout <= 0 or log_every < 0:
            raise InvalidArgument("timeout must be > 0 and log_every >= 0")
        if not 0 < retry_start <= retry_max:
            raise InvalidArgument("retry_start must be > 0 and <= retry_max")
        self.url = base_url.rstrip("/") + PATH
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise InvalidArgument(f"capcom URL has a bad port: {base_url!r}") from None
        self._server: dict[str, Any] = {"server.address": parts.hostname or "", "server.port": port}
        self.token = token
        self.timeout = timeout
        self.log_every = log_every
        self.max_batch = max_batch
        self.retry_start = retry_start
        self.retry_max = retry_max
        self._transport = transport
        self._send, self._recv = trio.open_memory_channel[Any](queue_size)
        self._carry: _Item | None = None  # encoded, taken but not fitting the last batch
        self._unsent: list[_Item] = []  # a batch taken when the shutdown came
        self._sent = 0
        self._posts = 0
        self._failed_posts = 0
        self._dropped: Counter[str] = Counter()
        self._unlogged: Counter[str] = Counter()
        self._last_error = ""
        self._last_log: float | None = None
        self._retry = 0.0  # current back-off; 0 while healthy

    # -- the job path ---------------------------------------------------------

    def report(self, job: JobReport, *, parent: Context | None = None) -> None:
        """Queue ``job`` for posting; never blocks, never raises."""
        try:
            self._send.send_nowait((job, parent))
        except trio.WouldBlock:
            self._drop("queue_full", 1)
        except Exception:  # closed channel, or anything else: still not the job's problem
            self._drop("shutdown", 1)

    def statistics(self) -> SenderStatistics:
        queued = self._send.statistics().current_buffer_used + (self._carry is not None)
        return SenderStatistics(
            sent=self._sent,
            dropped=MappingProxyType(dict(self._dropped)),
            queued=queued,
            posts=self._posts,
            failed_posts=self._failed_posts,
        )

    # -- the service ----------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Post until cancelled; then one bounded, shielded last POST of what is queued."""
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(self.timeout),
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            transport=self._transport,
            trust_env=False,  # capcom is an internal service: no proxy from the environment
        )
        if not self.token:
            log.warning(
                "capcom: no token (DATAPLANE_CAPCOM_TOKEN); capcom will refuse every report"
            )
        log.info("capcom: posting job reports to %s", self.url)
        try:
            task_status.started()
            while True:
                batch = await self._next_batch()
                if batch:
                    try:
                        await trio.lowlevel.checkpoint_if_cancelled()
                    except trio.Cancelled:
                        self._unsent = batch  # taken, not yet sent: the last POST has it
                        raise
                    await self._post(client, batch)
                self._log_drops()
                if self._retry:
                    await trio.sleep(self._retry)
        finally:
            with trio.CancelScope(shield=True):
                await self._flush(client)
                with trio.move_on_after(CLOSE_TIMEOUT):
                    await client.aclose()
                self._log_drops(force=True)

    async def _next_batch(self) -> list[_Item]:
        """What is queued, encoded; waits for a first report at most ``log_every``."""
        if self._carry is None:
            with trio.move_on_after(self.log_every or LOG_EVERY):
                self._carry = self._encode(await self._recv.receive())
        return self._take_batch()

    def _take_batch(self) -> list[_Item]:
        """What is queued now, encoded, within the batch limits (never waits)."""
        batch: list[_Item] = []
        size = 2  # the brackets
        while self._carry is not None or len(batch) < self.max_batch:
            if self._carry is None:
                try:
                    self._carry = self._encode(self._recv.receive_nowait())
                except trio.WouldBlock:
                    break
                continue
            item = self._carry
            n = len(item[0])
            if batch and (len(batch) >= self.max_batch or size + n > MAX_BATCH_BYTES):
                break  # it opens the next batch
            self._carry = None
            if size + n > MAX_BATCH_BYTES:
                self._drop("invalid", 1, f"a report of {n} bytes is over the body limit")
                continue
            batch.append(item)
            size += n + 1
        return batch

    def _encode(self, item: Any) -> _Item | None:
        job, parent = item
        try:
            return encode_report(job), parent
        except (AttributeError, TypeError, ValueError) as exc:
            self._drop("invalid", 1, f"a report cannot be encoded: {exc}")
            return None

    async def _post(self, client: httpx.AsyncClient, batch: list[_Item]) -> bool:
        """One POST of ``batch``; True if capcom took it. Drops are counted here."""
        self._posts += 1
        body = b"[" + b",".join(item for item, _ in batch) + b"]"
        span = self._span([parent for _, parent in batch if parent is not None])
        try:
            with trace.use_span(span, end_on_exit=True):
                reason, detail = await self._attempt(client, body, span)
        except trio.Cancelled:  # shutdown mid-POST: they may or may not have arrived
            self._failed_posts += 1
            self._drop("shutdown", len(batch), "the worker stopped during a POST")
            raise
        if reason is None:
            self._sent += len(batch)
            if self._retry:
                log.info("capcom: reachable again (%s)", self.url)
            self._retry = 0.0
            return True
        self._failed_posts += 1
        self._drop(reason, len(batch), detail)
        self._retry = min(self.retry_max, self._retry * 2) if self._retry else self.retry_start
        return False

    def _span(self, parents: list[Context]) -> Span:
        """The POST's client span, in the first report's trace (none without one)."""
        if not parents:
            return trace.INVALID_SPAN
        links = [Link(trace.get_current_span(p).get_span_context()) for p in parents[1:]]
        return tracer().start_span(
            f"POST {PATH}",
            context=parents[0],
            kind=SpanKind.CLIENT,
            links=links,
            attributes={
                "http.request.method": "POST",
                "url.full": self.url,
                **self._server,
                "dataplane.reports": len(parents),
            },
        )

    async def _attempt(
        self, client: httpx.AsyncClient, body: bytes, span: Span
    ) -> tuple[str | None, str]:
        """POST ``body`` within the timeout: (None, "") or (drop reason, detail)."""
        headers = inject_headers({}) if span.is_recording() else None
        with trio.move_on_after(self.timeout):
            try:
                resp = await client.post(self.url, content=body, headers=headers)
            except httpx.TimeoutException as exc:
                return _failed(span, "timeout", f"{type(exc).__name__}: {exc}")
            except httpx.ConnectError as exc:
                return _failed(span, "refused", f"cannot connect to {self.url}: {exc}")
            except httpx.HTTPError as exc:
                return _failed(span, "error", f"{type(exc).__name__}: {exc}")
            except Exception as exc:  # a bug here must not take the worker down
                log.exception("capcom: unexpected error posting to %s", self.url)
                return _failed(span, "error", f"{type(exc).__name__}: {exc}")
            if span.is_recording():
                span.set_attribute("http.response.status_code", resp.status_code)
            if resp.is_success:
                return None, ""
            detail = f"HTTP {resp.status_code}: {resp.text[:200]}"
            return _failed(span, "rejected", detail, str(resp.status_code))
        return _failed(span, "timeout", f"no answer within {self.timeout:g}s")

    async def _flush(self, client: httpx.AsyncClient) -> None:
        """Shutdown: one bounded POST of what is queued, unless capcom is failing."""
        with trio.move_on_after(FLUSH_TIMEOUT):
            while not self._retry:
                batch, self._unsent = self._unsent or self._take_batch(), []
                if not batch or not await self._post(client, batch):
                    break
        left = self.statistics().queued + len(self._unsent)
        self._carry, self._unsent = None, []
        while True:
            try:
                self._recv.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
        if left:
            self._drop("shutdown", left, "still queued when the worker stopped")

    # -- drops ------------------------------------------------------------------

    def _drop(self, reason: str, count: int, detail: str = "") -> None:
        self._dropped[reason] += count
        self._unlogged[reason] += count
        if detail:
            self._last_error = detail
        try:
            instruments().capcom_dropped.add(count, {REASON: reason})
        except Exception:  # a metrics SDK problem must not reach the job
            pass

    def _log_drops(self, *, force: bool = False) -> None:
        if not self._unlogged:
            return
        now = time.monotonic()
        if not force and self._last_log is not None and now - self._last_log < self.log_every:
            return
        self._last_log = now
        since = ", ".join(f"{reason} {n}" for reason, n in sorted(self._unlogged.items()))
        log.warning(
            "capcom: dropped %d job report(s) (%s); in all %d sent, %d dropped; last error: %s",
            sum(self._unlogged.values()),
            since,
            self._sent,
            sum(self._dropped.values()),
            self._last_error or "-",
        )
        self._unlogged.clear()


def _failed(span: Span, reason: str, detail: str, error_type: str | None = None) -> tuple[str, str]:
    """A failed POST: its span marked (``error.type`` the status or the reason)."""
    failed(span, error_type or reason, detail)
    return reason, detail
