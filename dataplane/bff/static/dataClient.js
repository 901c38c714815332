/**
 * @surface-dataplane/client: the browser side of the Surface Data Plane. No dependencies.
 *
 *   import { createDataClient } from "@surface-dataplane/client";
 *   import type { Operations } from "./dataplane-types.js"; // `npx surface-dataplane generate`
 *   const users = createDataClient<Operations["users"]>({ baseUrl: "/api/users", getToken });
 *   const page = await users.query("list", { limit: 10 }, { signal, onProgress });
 *
 * A query POSTs `{operation, params}` to `<baseUrl>/q` with `Prefer: wait=1` (RFC 7240): a
 * job that answers within that second comes back in the POST's own `200`, one round trip,
 * no stream (at most MAX_WAITING_POSTS such POSTs of a page wait at once; the others ask
 * for no wait). Otherwise the POST answers 202 `{jobId, streamUrl, pollUrl, coalesced}` and
 * the client listens on `streamUrl` (Server-Sent Events) for `done`. On a stream `TIMEOUT`
 * (the job keeps running), or a stream that cannot connect, it polls `pollUrl` instead
 * (honouring `Retry-After`, bounded backoff) until the answer is there. Reconnects are
 * EventSource's own: it sends `Last-Event-ID`, so a reconnect never replays an event.
 *
 * What a browser needs besides: aborting a query withdraws it (`DELETE` of the job: this
 * requester leaves it; a job no other requester waits for is cancelled, pending or
 * running: its handler is stopped) before the promise rejects with an `AbortError`; a 429
 * or 503 with `Retry-After` is retried, with jitter, within the caller's signal and a
 * total budget (never another 4xx); a 401 asks `getToken({refresh: true})` once and tries
 * again; progress events reach `onProgress`; an attempt of the job that failed, which the
 * plane tries again after its backoff, reaches `onJobRetry`.
 *
 * It resolves with the operation's `result`; a blob answer (a PDF, a large result) resolves
 * with `{blob, contentType, filename, size}`. Every failure rejects with a
 * {@link DataPlaneError} (`status`, `code`, `message`, `jobId`; status 0 and code `NETWORK`
 * when no answer came at all; a `CANCELLED` job's `cancellation` says who cancelled it and
 * whether it ran); an aborted query rejects with an error named `AbortError`.
 */
/** Codes for an error answer that names only its status (the BFF's own table). */
const CODES = {
    400: "BAD_REQUEST",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    429: "TOO_MANY_REQUESTS",
    500: "INTERNAL",
    503: "UNAVAILABLE",
};
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
// Retries of a refused POST (429, 503 with Retry-After): at most this many, all within
// the budget; each waits Retry-After plus up to half of it again (jitter: a burst of
// refused clients does not come back in one instant), capped.
const RETRIES = 3;
const RETRY_BUDGET_MS = 30_000;
const RETRY_MAX_DELAY_MS = 10_000;
// An aborted query still learns its job's id from a POST in flight, to withdraw it: the
// POST is given this long past the abort (plus its Prefer: wait), and the DELETE this long.
const ABORT_GRACE_MS = 2000;
/** An error answer of the data plane: HTTP 4xx/5xx, an error in the job's answer, or POISON. */
export class DataPlaneError extends Error {
    name = "DataPlaneError";
    /** HTTP-style status: 400, 401, 403, 404, 429, 500 (POISON), 503...; 0 when no answer came. */
    status;
    /** BAD_REQUEST, UNAUTHORIZED, NOT_FOUND, POISON, CANCELLED, NETWORK, ... */
    code;
    /** The job's id, when the error came after the job was enqueued. */
    jobId;
    /** CANCELLED: who cancelled the job (its requesters, or an operator), whether it was
     * running, and when; null for any other error (and a job an older plane cancelled). */
    cancellation;
    constructor({ status = 500, code, message, jobId = null, cancellation, cause }) {
        super(message || `request failed with status ${status}`, { cause });
        this.status = status;
        this.code = code || CODES[status] || "ERROR";
        this.jobId = jobId;
        this.cancellation = cancellation || null;
    }
}
/** One client for every surface of a plane: `query(surface, operation, params)`. */
export function createPlaneClient(options) {
    const root = (options.apiRoot ?? "/api").replace(/\/+$/, "");
    const clients = new Map();
    const surface = (sid) => {
        let client = clients.get(sid);
        if (!client) {
            client = createDataClient({ ...options, baseUrl: `${root}/${encodeURIComponent(sid)}` });
            clients.set(sid, client);
        }
        return client;
    };
    return {
        query: (sid, operation, ...args) => surface(sid).query(operation, ...args),
        surface,
    };
}
/** The client of one surface. */
export function createDataClient(options) {
    const { baseUrl, getToken, preferWaitSeconds = PREFER_WAIT_SECONDS } = options;
    const doFetch = options.fetch || globalThis.fetch.bind(globalThis);
    const EventSourceImpl = options.EventSource || globalThis.EventSource;
    const root = baseUrl.replace(/\/+$/, "");
    // Where the BFF's relative URLs (streamUrl, pollUrl, a blob's url) are resolved: the
    // page, or (off a page: node, a worker) the absolute baseUrl.
    const here = globalThis.location?.href ?? root;
    const absolute = (url) => new URL(url, here).href;
    const wait = Math.max(0, Math.floor(Number(preferWaitSeconds) || 0));
    const policy = {
        retries: Math.max(0, options.retry?.retries ?? RETRIES),
        budgetMs: options.retry?.budgetMs ?? RETRY_BUDGET_MS,
        maxDelayMs: options.retry?.maxDelayMs ?? RETRY_MAX_DELAY_MS,
    };
    async function query(operation, params = {}, { signal, onEvent, onProgress, onRetry, onJobRetry } = {}) {
        let lastProgress = null;
        let lastRetry = 0; // the last failed attempt told
        const emit = (name, data) => {
            if (name === "progress") {
                const p = data;
                if (lastProgress && !newer(p, lastProgress))
                    return; // seen (a reconnect's replay)
                lastProgress = p;
                call(onProgress, p);
            }
            else if (name === "retry") {
                const r = data;
                if (r.attempt <= lastRetry)
                    return; // seen (a reconnect's or a poll's replay)
                lastRetry = r.attempt;
                call(onJobRetry, r);
            }
            call(onEvent, name, data);
        };
        const retried = (info) => {
            call(options.onRetry, info);
            call(onRetry, info);
        };
        let job = null;
        let jobId = null;
        try {
            throwIfAborted(signal);
            const body = JSON.stringify({ operation, params });
            const posted = await send({ operation, body, signal, retried });
            if ("job" in posted) {
                const { streamUrl, pollUrl } = posted.job;
                job = { ...posted.job, streamUrl: absolute(streamUrl), pollUrl: absolute(pollUrl) };
            }
            throwIfAborted(signal);
            let answer;
            if ("answer" in posted) {
                // Prefer: wait: the answer came with the POST (the body the stream's end carries).
                answer = posted.answer;
                jobId = answer.jobId;
                if (answer.status === "poison" || answer.status === "cancelled") {
                    // As the stream reports a parked or cancelled job: an error event, then reject.
                    emit("error", { jobId: answer.jobId, ...answer.error });
                    throw new DataPlaneError({ ...answer.error, jobId: answer.jobId });
                }
            }
            else {
                job = job;
                jobId = job.jobId;
                answer =
                    (await viaStream(EventSourceImpl, job, signal, emit)) ||
                        (await viaPolling(doFetch, job, signal, emit));
            }
            emit("done", answer);
            if (answer.error)
                throw new DataPlaneError({ ...answer.error, jobId: answer.jobId });
            if (answer.blobRef) {
                const ref = { ...answer.blobRef, url: absolute(answer.blobRef.url) };
                return await fetchBlob(doFetch, ref, answer.jobId, signal);
            }
            return answer.result;
        }
        catch (err) {
            if (signal?.aborted) {
                const late = err instanceof Aborted && err.job ? err.job : null;
                if (late)
                    late.pollUrl = absolute(late.pollUrl);
                await withdraw(doFetch, job || late);
                throw abortError(signal);
            }
            if (err instanceof DataPlaneError)
                throw err;
            // No answer at all (the network, a body that is not JSON): still a typed error.
            const message = err instanceof Error ? err.message : String(err);
            throw new DataPlaneError({ status: 0, code: "NETWORK", message, jobId, cause: err });
        }
    }
    /** POST the query: its answer (Prefer: wait) or its job; 401/429/503 handled. */
    async function send({ operation, body, signal, retried, }) {
        const started = Date.now();
        let refreshed = false;
        let token = await getToken({ refresh: false });
        for (let attempt = 1;; attempt++) {
            throwIfAborted(signal);
            const resp = await postOnce(body, token, signal);
            if (resp.status === 200)
                return { answer: await resp.json() };
            if (resp.status === 202)
                return { job: await resp.json() };
            const error = await errorOf(resp, null);
            if (resp.status === 401 && !refreshed) {
                refreshed = true;
                retried({ operation, attempt, status: 401, delayMs: 0, error });
                token = await getToken({ refresh: true });
                continue;
            }
            const after = retryAfterSeconds(resp);
            if ((resp.status !== 429 && resp.status !== 503) || after === null)
                throw error;
            const delayMs = Math.min(after * 1000 * (1 + Math.random() / 2), policy.maxDelayMs);
            const retries = attempt - (refreshed ? 1 : 0);
            if (retries > policy.retries || Date.now() - started + delayMs > policy.budgetMs) {
                throw error;
            }
            retried({ operation, attempt: retries, status: resp.status, delayMs, error });
            await sleep(delayMs, signal);
        }
    }
    /** One POST. The caller's abort does not cut it at once: its answer names the job
     * to withdraw (an {@link Aborted} carries it), given ABORT_GRACE_MS past its wait. */
    async function postOnce(body, token, signal) {
        const held = wait > 0 && waitingPosts < MAX_WAITING_POSTS;
        if (held)
            waitingPosts += 1;
        const cut = new AbortController();
        let timer;
        const onAbort = () => {
            timer = setTimeout(() => cut.abort(), ABORT_GRACE_MS + (held ? wait * 1000 : 0));
        };
        if (signal)
            signal.addEventListener("abort", onAbort, { once: true });
        try {
            const resp = await doFetch(absolute(`${root}/q`), {
                method: "POST",
                headers: {
                    Authorization: `Bearer ${token}`,
                    "Content-Type": "application/json",
                    ...(held ? { Prefer: `wait=${wait}` } : {}),
                },
                body,
                signal: cut.signal,
            });
            if (signal?.aborted) {
                const queued = resp.status === 202 ? (await resp.json()) : null;
                throw new Aborted(queued);
            }
            return resp;
        }
        finally {
            if (held)
                waitingPosts -= 1;
            signal?.removeEventListener("abort", onAbort);
            clearTimeout(timer);
        }
    }
    return { query };
}
/** A query aborted while its POST was in flight: the job the POST queued, if any. */
class Aborted extends Error {
    job;
    constructor(job) {
        super("aborted");
        this.job = job;
    }
}
/** Withdraw this requester from the job (its signed pollUrl names the requester): 200, the
 * job was cancelled (no other requester waits for it: pending, or running and its handler
 * stopped); 202, others still wait and it runs on for them; 409, it had finished. The
 * abort stands whatever the answer. */
async function withdraw(doFetch, job) {
    if (!job)
        return;
    try {
        await doFetch(job.pollUrl, {
            method: "DELETE",
            headers: { Accept: "application/json" },
            signal: AbortSignal.timeout(ABORT_GRACE_MS),
        });
    }
    catch {
        // the abort stands whatever the DELETE met: its job's lease and TTL still bound it
    }
}
/** Save a blob answer as a file (an `<a download>` click). */
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
/** The answer from the event stream, or null when the caller should poll instead. */
function viaStream(ES, job, signal, emit) {
    return new Promise((resolve, reject) => {
        if (signal?.aborted)
            return reject(abortError(signal));
        const source = new ES(job.streamUrl);
        let events = 0;
        let errors = 0;
        const finish = (settle) => {
            source.close();
            signal?.removeEventListener("abort", onAbort);
            settle();
        };
        const onAbort = () => finish(() => reject(abortError(signal)));
        signal?.addEventListener("abort", onAbort);
        const data = (e) => parse(e.data);
        source.addEventListener("queued", (e) => {
            events += 1;
            emit("queued", data(e));
        });
        for (const name of ["progress", "retry"]) {
            source.addEventListener(name, (e) => {
                events += 1;
                emit(name, data(e));
            });
        }
        source.addEventListener("done", (e) => {
            const answer = data(e);
            finish(() => resolve(answer));
        });
        source.addEventListener("error", (e) => {
            if (typeof e.data === "string") {
                // A server-sent `event: error`: TIMEOUT (the job runs on: poll) or POISON (final).
                const error = data(e);
                emit("error", error);
                if (error.code === "TIMEOUT")
                    return finish(() => resolve(null));
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
/** Poll until the job has its answer (200). */
async function viaPolling(doFetch, job, signal, emit) {
    let backoff = POLL_FIRST_MS;
    let failures = 0;
    for (;;) {
        throwIfAborted(signal);
        let resp = null;
        try {
            resp = await doFetch(job.pollUrl, {
                headers: { Accept: "application/json" },
                signal,
            });
        }
        catch (err) {
            if (signal?.aborted || ++failures > POLL_MAX_FAILURES)
                throw err;
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
            if (body.progress)
                emit("progress", body.progress);
            if (body.retry)
                emit("retry", body.retry);
        }
        else if (resp && (resp.status !== 503 || ++failures > POLL_MAX_FAILURES)) {
            throw await errorOf(resp, job.jobId);
        }
        const after = retryAfterSeconds(resp);
        await sleep(Math.max(Math.min((after ?? 0) * 1000, POLL_MAX_MS), backoff), signal);
        backoff = Math.min(backoff * 2, POLL_MAX_MS);
    }
}
async function fetchBlob(doFetch, ref, jobId, signal) {
    const resp = await doFetch(ref.url, { signal });
    if (!resp.ok)
        throw await errorOf(resp, jobId);
    const blob = await resp.blob();
    return {
        blob,
        contentType: ref.contentType || blob.type,
        filename: ref.filename || "download",
        size: blob.size,
    };
}
/** A DataPlaneError from an HTTP error answer (`{"error": {status, code, message}}`). */
async function errorOf(resp, jobId) {
    let error = {};
    try {
        error = (await resp.json()).error || {};
    }
    catch {
        // not JSON: status text it is
    }
    return new DataPlaneError({ status: resp.status, message: resp.statusText, ...error, jobId });
}
/** Retry-After in seconds (delta-seconds; an HTTP date is read as one too), or null. */
function retryAfterSeconds(resp) {
    const value = resp?.headers.get("Retry-After");
    if (value == null || value.trim() === "")
        return null;
    const seconds = Number(value);
    if (Number.isFinite(seconds))
        return Math.max(0, seconds);
    const date = Date.parse(value);
    return Number.isNaN(date) ? null : Math.max(0, (date - Date.now()) / 1000);
}
/** Whether progress `a` comes after `b` (a retried job's attempt starts its seq again). */
function newer(a, b) {
    return a.attempt > b.attempt || (a.attempt === b.attempt && a.seq > b.seq);
}
function call(hook, ...args) {
    try {
        hook?.(...args);
    }
    catch (err) {
        console.error("dataClient hook failed", err);
    }
}
function parse(text) {
    try {
        return JSON.parse(text);
    }
    catch {
        return { message: text };
    }
}
function abortError(signal) {
    const reason = signal?.reason;
    if (reason instanceof Error && reason.name === "AbortError")
        return reason;
    return new DOMException("the query was aborted", "AbortError");
}
function throwIfAborted(signal) {
    if (signal?.aborted)
        throw abortError(signal);
}
function sleep(ms, signal) {
    return new Promise((resolve, reject) => {
        if (signal?.aborted)
            return reject(abortError(signal));
        const done = () => {
            clearTimeout(timer);
            signal?.removeEventListener("abort", done);
            if (signal?.aborted)
                reject(abortError(signal));
            else
                resolve();
        };
        const timer = setTimeout(done, ms);
        signal?.addEventListener("abort", done, { once: true });
    });
}
