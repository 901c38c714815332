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
/** An error answer of the data plane: HTTP 4xx/5xx, an error in the job's answer, or POISON. */
export declare class DataPlaneError extends Error {
    readonly name = "DataPlaneError";
    /** HTTP-style status: 400, 401, 403, 404, 429, 500 (POISON), 503...; 0 when no answer came. */
    status: number;
    /** BAD_REQUEST, UNAUTHORIZED, NOT_FOUND, POISON, CANCELLED, NETWORK, ... */
    code: string;
    /** The job's id, when the error came after the job was enqueued. */
    jobId: string | null;
    /** CANCELLED: who cancelled the job (its requesters, or an operator), whether it was
     * running, and when; null for any other error (and a job an older plane cancelled). */
    cancellation: Cancellation | null;
    constructor({ status, code, message, jobId, cancellation, cause }: ErrorInit);
}
export interface ErrorInit {
    status?: number;
    code?: string;
    message?: string;
    jobId?: string | null;
    cancellation?: Cancellation;
    cause?: unknown;
}
/** Who cancelled a job: every requester withdrew (`requesters`: the last one's abort), or
 * an `operator` (named); whether it was running then, and when (ISO 8601). */
export interface Cancellation {
    by: "requesters" | "operator";
    operator?: string;
    whileRunning: boolean;
    at?: string;
}
/** One operation's types: what it takes and what it answers. */
export interface OperationTypes {
    params: unknown;
    result: unknown;
}
/** A surface's operations by name (a generated `Operations["<surface>"]`). */
export type SurfaceTypes = {
    [operation: string]: OperationTypes;
};
/** Every surface of a plane (the generated `Operations`). */
export type PlaneTypes = {
    [surface: string]: SurfaceTypes;
};
/** Without generated types: any operation, any params, any answer. */
export type UntypedSurface = {
    [operation: string]: {
        params: object | undefined;
        result: any;
    };
};
export type UntypedPlane = {
    [surface: string]: UntypedSurface;
};
/** `[params, options]`, params optional when the operation requires none. */
export type QueryArgs<T extends OperationTypes> = {} extends T["params"] ? [params?: T["params"], options?: QueryOptions] : [params: T["params"], options?: QueryOptions];
export interface TokenRequest {
    /** True after a 401: the token given was refused; return a fresh one. */
    refresh: boolean;
}
export interface DataClientOptions {
    /** The surface's API root, e.g. "/api/users". */
    baseUrl: string;
    /** The caller's JWT, sent as `Authorization: Bearer <token>`; asked again with
     * `{refresh: true}` once after a 401. */
    getToken: (request: TokenRequest) => string | Promise<string>;
    /** Defaults to the global fetch. */
    fetch?: typeof globalThis.fetch;
    /** Defaults to the global EventSource. */
    EventSource?: typeof globalThis.EventSource;
    /**
     * How long the POST may wait for the answer (`Prefer: wait=N`, RFC 7240; whole
     * seconds, capped by the server). An answer within it comes in the POST's `200`: one
     * round trip, no stream. 0 never waits (always 202, then the stream). Default 1.
     * At most 2 POSTs of a page wait at once (each holds one of the browser's HTTP/1.1
     * connections to the origin); the others ask for no wait.
     */
    preferWaitSeconds?: number;
    /** Retries of a POST refused with 429 or 503 and `Retry-After`. */
    retry?: RetryPolicy;
    /** Called before each retry (every query of this client; a query's own adds to it). */
    onRetry?: (retry: RetryInfo) => void;
}
export interface RetryPolicy {
    /** How many times a refused POST is sent again (default 3; 0 never retries). */
    retries?: number;
    /** The most time all the retries of one query may wait, in ms (default 30000). */
    budgetMs?: number;
    /** The longest single wait, in ms (default 10000). */
    maxDelayMs?: number;
}
/** One retry of a refused POST, before its wait. */
export interface RetryInfo {
    operation: string;
    /** 1 for the first retry. */
    attempt: number;
    /** What refused the POST: 429, 503 (with Retry-After), or 401 (the token refreshed). */
    status: number;
    delayMs: number;
    error: DataPlaneError;
}
/** A finished job's answer: the `done` event's data, the poll's 200 body and the POST's
 * 200 body under `Prefer: wait`. */
export interface Answer<T = unknown> {
    jobId: string;
    status: string;
    result?: T;
    error?: {
        status: number;
        code?: string;
        message: string;
        cancellation?: Cancellation;
    };
    blobRef?: {
        url: string;
        contentType: string;
        size: number;
        filename?: string;
    };
    cache?: "hit" | "miss" | "bypass";
    coalesced?: boolean;
    timings?: {
        queueMs?: number;
        runMs?: number;
    };
}
/** A running job's progress, as its handler reported it (`ctx.progress`). */
export interface Progress {
    jobId: string;
    /** The attempt (a retried job starts again) and the report's number within it. */
    attempt: number;
    seq: number;
    /** In [0, 1]; `done / total` when the handler gave those. */
    fraction?: number;
    done?: number;
    total?: number;
    message?: string;
    /** A small partial result (at most 4 KiB of JSON). */
    partial?: unknown;
}
/** An attempt of the job failed; the plane tries it again at `retryAt`. */
export interface JobRetry {
    jobId: string;
    /** The attempt that failed (1 for the first) and how many the job may have. */
    attempt: number;
    maxAttempts: number;
    /** The error's class and message, e.g. "KeyError: 'oops'" (at most 500 characters). */
    error: string;
    /** When the next attempt is due (ISO 8601), and in how many ms as the server sent it. */
    retryAt: string;
    retryInMs: number;
}
export interface QueryEvents {
    queued: {
        jobId: string;
        status: string;
    };
    /** The job's progress: the latest first on a (re)connect, then each newer one. */
    progress: Progress;
    /** A failed attempt the job waits out before the next (first on a (re)connect). */
    retry: JobRetry;
    /** A server-sent error event, e.g. `code: "TIMEOUT"` (the client then polls) or "POISON". */
    error: {
        jobId: string;
        code: string;
        message: string;
        status?: number;
        cancellation?: Cancellation;
    };
    /** One poll: `httpStatus` 202 while the job is live, 200 with the answer. */
    poll: {
        jobId: string;
        httpStatus: number;
        status: string;
    };
    /** The final answer, whether it came over the stream or by polling. */
    done: Answer;
}
/** `[name, data]` of one query event. */
export type QueryEvent = {
    [K in keyof QueryEvents]: [name: K, data: QueryEvents[K]];
}[keyof QueryEvents];
export interface QueryOptions {
    /** Aborting withdraws the job (DELETE: cancelled, even running, when no other requester
     * waits for it), closes the stream, stops polling and rejects with an `AbortError`. A
     * closed page or a stream's TIMEOUT withdraws nothing: only an abort does. */
    signal?: AbortSignal;
    /** Every event; `(name, data) => { if (name === "done") data.cache }` narrows `data`. */
    onEvent?: (...event: QueryEvent) => void;
    /** The job's progress, newest last (a progress seen twice, after a reconnect, once). */
    onProgress?: (progress: Progress) => void;
    /** Called before each retry of this query's request (429, 503, 401). */
    onRetry?: (retry: RetryInfo) => void;
    /** An attempt of the job failed and the plane tries it again (each attempt once). */
    onJobRetry?: (retry: JobRetry) => void;
}
/** What a query with a blob answer (a PDF, a large result) resolves with. */
export interface BlobResult {
    blob: Blob;
    contentType: string;
    filename: string;
    size: number;
}
export interface DataClient<S extends SurfaceTypes = UntypedSurface> {
    /** Resolves with the operation's `result` (or a {@link BlobResult}); rejects with
     * DataPlaneError, or an `AbortError` once the job is withdrawn. */
    query<O extends keyof S & string>(operation: O, ...args: QueryArgs<S[O]>): Promise<S[O]["result"]>;
}
export interface PlaneClientOptions extends Omit<DataClientOptions, "baseUrl"> {
    /** Where the surfaces' routes are: `<apiRoot>/<surface>/q`. Default "/api". */
    apiRoot?: string;
}
export interface PlaneClient<P extends PlaneTypes = UntypedPlane> {
    query<Sid extends keyof P & string, O extends keyof P[Sid] & string>(surface: Sid, operation: O, ...args: QueryArgs<P[Sid][O]>): Promise<P[Sid][O]["result"]>;
    /** The client of one surface (made once, then the same one). */
    surface<Sid extends keyof P & string>(surface: Sid): DataClient<P[Sid]>;
}
/** One client for every surface of a plane: `query(surface, operation, params)`. */
export declare function createPlaneClient<P extends PlaneTypes = UntypedPlane>(options: PlaneClientOptions): PlaneClient<P>;
/** The client of one surface. */
export declare function createDataClient<S extends SurfaceTypes = UntypedSurface>(options: DataClientOptions): DataClient<S>;
/** Save a blob answer as a file (an `<a download>` click). */
export declare function download({ blob, filename }: BlobResult): void;
