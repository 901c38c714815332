// @ts-check
/**
 * dataClient.js: the browser side of the Surface Data Plane. No dependencies.
 *
 *   const users = createDataClient({ baseUrl: "/api/users", getToken: () => token });
 *   const page = await users.query("list", { limit: 10 }, { signal, onEvent });
 *
 * A query POSTs `{operation, params}` to `<baseUrl>/q` with `Prefer: wait=1`
 * (RFC 7240): a job that answers within that second comes back in the POST's own
 * `200`, one round trip, no stream (at most MAX_WAITING_POSTS such POSTs wait at once;
 * the others ask for no wait). Otherwise the POST answers 202 `{jobId,
 * streamUrl, pollUrl, coalesced}` and the client listens on `streamUrl`
 * (Server-Sent Events) for `done`. On a stream `TIMEOUT` (the job keeps running), or a stream that cannot
 * connect, it polls `pollUrl` instead (honouring `Retry-After`, bounded backoff)
 * until the answer is there. Reconnects are EventSource's own (it sends
 * `Last-Event-ID`, so a reconnect never replays an event).
 *
 * It resolves with the operation's `result`; a blob answer (a PDF, a large
 * result) resolves with `{blob, contentType, filename, size}`. Every failure
 * rejects with a {@link DataPlaneError} (`status`, `code`, `message`, `jobId`;
 * status 0 and code `NETWORK` when no answer came at all); an aborted query
 * rejects with an error named `AbortError`.
 */

/** Codes for an error answer that names only its status (the BFF's own table). */
const CODES = /** @type {Record<number, string>} */ ({
  400: "BAD_REQUEST",
  401: "UNAUTHORIZED",
  403: "FORBIDDEN",
  404: "NOT_FOUND",
  405: "METHOD_NOT_ALLOWED",
  413: "PAYLOAD_TOO_LARGE",
  415: "UNSUPPORTED_MEDIA_TYPE",
  500: "INTERNAL",
  503: "UNAVAILABLE",
});

const POLL_FIRST_MS = 250; // first poll delay when the server gives no Retry-After
const POLL_MAX_MS = 5000; // the backoff ceiling
const POLL_MAX_FAILURES = 5; // consecutive 503s / network failures before giving up
const STREAM_MAX_ERRORS = 3; // connection errors after the first event before polling
// How long a POST asks the BFF to hold it for the answer (Prefer: wait, whole seconds).
// Typical answers (probe.echo, cache hits, the demo's queries) take milliseconds to a few
// hundred; a job slower than this pays one extra round trip (the stream, a few ms: under
// 1 % of its time) and gets its `queued` event at most this late. Below the server's cap
// (DATAPLANE_MAX_PREFER_WAIT_SECONDS, 5 by default), so the client's choice holds.
const PREFER_WAIT_SECONDS = 1;
// POSTs of this page held open at once for their answer. A held POST occupies one of the
// six connections a browser keeps per origin over HTTP/1.1: past this many, a query POSTs
// without Prefer (202 at once, then the stream), so a burst of queries is not serialised
// behind held POSTs (and identical ones still coalesce onto one live job): two held
// leave four connections for the rest (a burst of 50 identical queries coalesced less
// reliably with four held on a busy machine).
const MAX_WAITING_POSTS = 2;
let waitingPosts = 0; // shared by every client of the page: the connections are too

/** An error answer of the data plane (HTTP, in the job's answer, or a parked job). */
export class DataPlaneError extends Error {
  /**
   * @param {{status?: number, code?: string, message?: string, jobId?: string | null,
   *   cause?: unknown}} error
   */
  constructor({ status = 500, code, message, jobId = null, cause }) {
    super(message || `request failed with status ${status}`, { cause });
    this.name = "DataPlaneError";
    /** @type {number} */
    this.status = status;
    /** @type {string} */
    this.code = code || CODES[status] || "ERROR";
    /** @type {string | null} */
    this.jobId = jobId;
  }
}

/**
 * @typedef {object} DataClientOptions
 * @property {string} baseUrl the surface's API root, e.g. "/api/users"
 * @property {() => string | Promise<string>} getToken the caller's JWT (sent as a Bearer token)
 * @property {typeof globalThis.fetch} [fetch] defaults to the global fetch
 * @property {typeof globalThis.EventSource} [EventSource] defaults to the global EventSource
 * @property {number} [preferWaitSeconds] how long the POST may wait for the answer
 *   (`Prefer: wait`, whole seconds); 0 never waits: always 202 and the stream. Default 1
 *
 * @typedef {"queued" | "progress" | "done" | "error" | "poll"} QueryEventName
 *
 * @typedef {object} QueryOptions
 * @property {AbortSignal} [signal] aborts the query: closes the stream, stops polling
 * @property {(name: QueryEventName, data: any) => void} [onEvent] progress: `queued`
 *   `{jobId, status}`; `progress` `{jobId, attempt, seq, fraction?, done?, total?,
 *   message?, partial?}` as the handler reports it (the latest first on a reconnect;
 *   `attempt` then `seq` order them); `error` (a stream error event's data, e.g. `code: "TIMEOUT"`);
 *   `poll` `{jobId, httpStatus, status}` per poll; `done` the final answer `{jobId,
 *   status, result | error | blobRef, cache, coalesced}` (also when it came by polling)
 *
 * @typedef {object} BlobResult
 * @property {Blob} blob
 * @property {string} contentType
 * @property {string} filename
 * @property {number} size
 *
 * @typedef {object} DataClient
 * @property {(operation: string, params?: object, options?: QueryOptions) => Promise<any>} query
 */

/**
 * @param {DataClientOptions} options
 * @returns {DataClient}
 */
export function createDataClient({
  baseUrl,
  getToken,
  fetch: fetchImpl,
  EventSource: ES,
  preferWaitSeconds = PREFER_WAIT_SECONDS,
}) {
  const doFetch = fetchImpl || globalThis.fetch.bind(globalThis);
  const EventSourceImpl = ES || globalThis.EventSource;
  const root = baseUrl.replace(/\/+$/, "");
  const wait = Math.max(0, Math.floor(Number(preferWaitSeconds) || 0));
  /** @type {Record<string, string>} */
  const prefer = wait > 0 ? { Prefer: `wait=${wait}` } : {};

  /** @param {string} operation @param {object} [params] @param {QueryOptions} [options] */
  async function query(operation, params = {}, { signal, onEvent } = {}) {
    /** @type {(name: QueryEventName, data: any) => void} */
    const emit = (name, data) => {
      try {
        onEvent?.(name, data);
      } catch (err) {
        console.error("dataClient onEvent handler failed", err);
      }
    };
    /** @type {string | null} */
    let jobId = null;
    try {
      throwIfAborted(signal);
      const token = await getToken();
      throwIfAborted(signal);
      const held = wait > 0 && waitingPosts < MAX_WAITING_POSTS;
      if (held) waitingPosts += 1;
      /** @type {Response} */
      let resp;
      try {
        resp = await doFetch(absolute(`${root}/q`), {
          method: "POST",
          headers: {
            Authorization: `Bearer ${token}`,
            "Content-Type": "application/json",
            ...(held ? prefer : {}),
          },
          body: JSON.stringify({ operation, params }),
          signal,
        });
      } finally {
        if (held) waitingPosts -= 1;
      }
      /** @type {any} */
      let answer;
      if (resp.status === 200) {
        // Prefer: wait: the answer came with the POST (the body the stream's end carries).
        answer = await resp.json();
        jobId = answer.jobId;
        if (answer.status === "poison" || answer.status === "cancelled") {
          // As the stream reports a parked or cancelled job: an error event, then reject.
          emit("error", { jobId: answer.jobId, ...answer.error });
          throw new DataPlaneError({ ...answer.error, jobId: answer.jobId });
        }
      } else if (resp.status === 202) {
        const job = await resp.json();
        jobId = job.jobId;
        answer =
          (await viaStream(EventSourceImpl, job, signal, emit)) ||
          (await viaPolling(doFetch, job, signal, emit));
      } else {
        throw await errorOf(resp, null);
      }
      emit("done", answer);
      if (answer.error) throw new DataPlaneError({ ...answer.error, jobId: answer.jobId });
      if (answer.blobRef) return await fetchBlob(doFetch, answer.blobRef, answer.jobId, signal);
      return answer.result;
    } catch (err) {
      if (signal?.aborted) throw abortError(signal);
      if (err instanceof DataPlaneError) throw err;
      // No answer at all (the network, a body that is not JSON): still a typed error.
      const message = err instanceof Error ? err.message : String(err);
      throw new DataPlaneError({ status: 0, code: "NETWORK", message, jobId, cause: err });
    }
  }

  return { query };
}

/**
 * Save a blob answer as a file (an `<a download>` click).
 * @param {BlobResult} blobResult
 */
export function download({ blob, filename }) {
  const url = URL.createObjectURL(blob);
  const a = document.createElement("a");
  a.href = url;
  a.download = filename || "download";
  a.style.display = "none";
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/**
 * The answer from the event stream, or null when the caller should poll instead.
 * @param {typeof globalThis.EventSource} ES
 * @param {{jobId: string, streamUrl: string}} job
 * @param {AbortSignal | undefined} signal
 * @param {(name: QueryEventName, data: any) => void} emit
 * @returns {Promise<any | null>}
 */
function viaStream(ES, job, signal, emit) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortError(signal));
    const source = new ES(absolute(job.streamUrl));
    let events = 0;
    let errors = 0;
    /** @param {() => void} settle */
    const finish = (settle) => {
      source.close();
      signal?.removeEventListener("abort", onAbort);
      settle();
    };
    const onAbort = () => finish(() => reject(abortError(signal)));
    signal?.addEventListener("abort", onAbort);

    source.addEventListener("queued", (e) => {
      events += 1;
      emit("queued", parse(/** @type {MessageEvent} */ (e).data));
    });
    source.addEventListener("progress", (e) => {
      events += 1;
      emit("progress", parse(/** @type {MessageEvent} */ (e).data));
    });
    source.addEventListener("done", (e) => {
      const answer = parse(/** @type {MessageEvent} */ (e).data);
      finish(() => resolve(answer));
    });
    source.addEventListener("error", (e) => {
      const data = /** @type {MessageEvent} */ (e).data;
      if (typeof data === "string") {
        // A server-sent `event: error`: TIMEOUT (the job runs on: poll) or POISON (final).
        const error = parse(data);
        emit("error", error);
        if (error.code === "TIMEOUT") return finish(() => resolve(null));
        return finish(() => reject(new DataPlaneError({ ...error, jobId: job.jobId })));
      }
      // The connection failed. EventSource retries on its own, unless it gave up (CLOSED).
      errors += 1;
      if (events === 0 || errors > STREAM_MAX_ERRORS || source.readyState === ES.CLOSED) {
        finish(() => resolve(null));
      }
    });
  });
}

/**
 * Poll until the job has its answer (200).
 * @param {typeof globalThis.fetch} doFetch
 * @param {{jobId: string, pollUrl: string}} job
 * @param {AbortSignal | undefined} signal
 * @param {(name: QueryEventName, data: any) => void} emit
 */
async function viaPolling(doFetch, job, signal, emit) {
  let backoff = POLL_FIRST_MS;
  let failures = 0;
  for (;;) {
    throwIfAborted(signal);
    /** @type {Response | null} */
    let resp = null;
    try {
      resp = await doFetch(absolute(job.pollUrl), {
        headers: { Accept: "application/json" },
        signal,
      });
    } catch (err) {
      if (signal?.aborted || ++failures > POLL_MAX_FAILURES) throw err;
    }
    if (resp && resp.status === 200) {
      const answer = await resp.json();
      emit("poll", { jobId: job.jobId, httpStatus: 200, status: answer.status });
      return answer;
    }
    if (resp && resp.status === 202) {
      failures = 0;
      const body = await resp.json();
      emit("poll", { jobId: job.jobId, httpStatus: 202, status: body.status });
    } else if (resp && (resp.status !== 503 || ++failures > POLL_MAX_FAILURES)) {
      throw await errorOf(resp, job.jobId);
    }
    await sleep(Math.max(retryAfterMs(resp), backoff), signal);
    backoff = Math.min(backoff * 2, POLL_MAX_MS);
  }
}

/**
 * @param {typeof globalThis.fetch} doFetch
 * @param {{url: string, contentType?: string, filename?: string}} ref
 * @param {string} jobId
 * @param {AbortSignal | undefined} signal
 * @returns {Promise<BlobResult>}
 */
async function fetchBlob(doFetch, ref, jobId, signal) {
  const resp = await doFetch(absolute(ref.url), { signal });
  if (!resp.ok) throw await errorOf(resp, jobId);
  const blob = await resp.blob();
  return {
    blob,
    contentType: ref.contentType || blob.type,
    filename: ref.filename || "download",
    size: blob.size,
  };
}

/**
 * A DataPlaneError from an HTTP error answer (`{"error": {status, code, message}}`).
 * @param {Response} resp
 * @param {string | null} jobId
 */
async function errorOf(resp, jobId) {
  let error = {};
  try {
    error = (await resp.json()).error || {};
  } catch {
    // not JSON: status text it is
  }
  return new DataPlaneError({
    status: resp.status,
    message: resp.statusText,
    ...error,
    jobId,
  });
}

/** @param {Response | null} resp */
function retryAfterMs(resp) {
  const seconds = Number(resp?.headers.get("Retry-After"));
  return Number.isFinite(seconds) && seconds > 0 ? Math.min(seconds * 1000, POLL_MAX_MS) : 0;
}

/** @param {string} url */
function absolute(url) {
  return new URL(url, globalThis.location?.href).href;
}

/** @param {string} text */
function parse(text) {
  try {
    return JSON.parse(text);
  } catch {
    return { message: text };
  }
}

/** @param {AbortSignal | undefined} signal */
function abortError(signal) {
  const reason = signal?.reason;
  if (reason instanceof Error && reason.name === "AbortError") return reason;
  return new DOMException("the query was aborted", "AbortError");
}

/** @param {AbortSignal | undefined} signal */
function throwIfAborted(signal) {
  if (signal?.aborted) throw abortError(signal);
}

/**
 * @param {number} ms
 * @param {AbortSignal | undefined} signal
 * @returns {Promise<void>}
 */
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortError(signal));
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      if (signal?.aborted) reject(abortError(signal));
      else resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}
