/** Types of dataClient.js: the browser client of the Surface Data Plane. */

/** An error answer of the data plane: HTTP 4xx/5xx, an error in the job's answer, or POISON. */
export declare class DataPlaneError extends Error {
  constructor(error: {
    status?: number;
    code?: string;
    message?: string;
    jobId?: string | null;
    cause?: unknown;
  });
  readonly name: "DataPlaneError";
  /** HTTP-style status: 400, 401, 403, 404, 500 (POISON), 503...; 0 when no answer came. */
  status: number;
  /** BAD_REQUEST, UNAUTHORIZED, NOT_FOUND, POISON, NETWORK, ... */
  code: string;
  /** The job's id, when the error came after the job was enqueued. */
  jobId: string | null;
}

export interface DataClientOptions {
  /** The surface's API root, e.g. "/api/users". */
  baseUrl: string;
  /** The caller's JWT, sent as `Authorization: Bearer <token>`. */
  getToken: () => string | Promise<string>;
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
}

/** A finished job's answer: the `done` event's data, the poll's 200 body and the POST's
 * 200 body under `Prefer: wait`. */
export interface Answer<T = unknown> {
  jobId: string;
  status: string;
  result?: T;
  error?: { status: number; code?: string; message: string };
  blobRef?: { url: string; contentType: string; size: number; filename?: string };
  cache?: "hit" | "miss" | "bypass";
  coalesced?: boolean;
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

export interface QueryEvents {
  queued: { jobId: string; status: string };
  /** The job's progress: the latest first on a (re)connect, then each newer one. */
  progress: Progress;
  /** A server-sent error event, e.g. `code: "TIMEOUT"` (the client then polls) or "POISON". */
  error: { jobId: string; code: string; message: string; status?: number };
  /** One poll: `httpStatus` 202 while the job is live, 200 with the answer. */
  poll: { jobId: string; httpStatus: number; status: string };
  /** The final answer, whether it came over the stream or by polling. */
  done: Answer;
}

/** `[name, data]` of one query event. */
export type QueryEvent = { [K in keyof QueryEvents]: [name: K, data: QueryEvents[K]] }[keyof QueryEvents];

export interface QueryOptions {
  /** Aborting closes the stream, stops polling and rejects with an `AbortError`. */
  signal?: AbortSignal;
  /** Progress; `(name, data) => { if (name === "done") data.cache }` narrows `data`. */
  onEvent?: (...event: QueryEvent) => void;
}

/** What a query with a blob answer (a PDF, a large result) resolves with. */
export interface BlobResult {
  blob: Blob;
  contentType: string;
  filename: string;
  size: number;
}

export interface DataClient {
  /** Resolves with the operation's `result` (or a {@link BlobResult}); rejects with DataPlaneError. */
  query<T = any>(operation: string, params?: object, options?: QueryOptions): Promise<T>;
}

export declare function createDataClient(options: DataClientOptions): DataClient;

/** Save a blob answer as a file (an `<a download>` click). */
export declare function download(blobResult: BlobResult): void;
