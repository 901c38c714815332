/**
 * @surface-dataplane/client/react: `useQuery` for React (>= 18, a peer dependency).
 *
 *   import { createPlaneClient } from "@surface-dataplane/client";
 *   import { createHooks } from "@surface-dataplane/client/react";
 *   import type { Operations } from "./dataplane-types.js"; // `npx surface-dataplane generate`
 *
 *   const { useQuery } = createHooks(createPlaneClient<Operations>({ getToken }));
 *
 *   function Users() {
 *     const users = useQuery("users", "list", { limit: 10 });
 *     if (users.status === "loading") {
 *       return <Spinner progress={users.progress} failed={users.jobRetry} />;
 *     }
 *     if (users.status === "error") return <Failed error={users.error} />;
 *     return <UserList users={users.answer.rows} />; // typed: the operation's result
 *   }
 *
 * The query runs when the component mounts and again whenever the surface, the operation
 * or the params change: params are compared by their JSON (the body the POST sends, keys
 * sorted), so a params object built afresh on every render does not re-run it. A run that
 * is replaced (a change, `refetch()`, `enabled` turning false) or whose component unmounts
 * is aborted: the core client withdraws its job (`DELETE`: the job runs on for any other
 * requester, and is cancelled, even running, when none is left) and closes its stream, and
 * its rejection is ignored. Nothing is cached
 * between components: two components asking the same thing send two POSTs, which the
 * plane coalesces onto one job.
 *
 * React's StrictMode mounts, unmounts and mounts again in development: the first run is
 * aborted before its POST leaves (the core awaits the token first), so only one is sent.
 */

import { useCallback, useEffect, useRef, useState } from "react";
import {
  DataPlaneError,
  type OperationTypes,
  type PlaneClient,
  type PlaneTypes,
  type JobRetry,
  type Progress,
  type QueryOptions,
  type UntypedPlane,
} from "./index.js";

export interface UseQueryOptions extends Omit<QueryOptions, "signal"> {
  /** False: the query does not run by itself (a run in flight is aborted); `refetch()`
   * still runs it. Default true. */
  enabled?: boolean;
}

/** `[params, options]`, params optional when the operation requires none. */
export type UseQueryArgs<T extends OperationTypes> = {} extends T["params"]
  ? [params?: T["params"], options?: UseQueryOptions]
  : [params: T["params"], options?: UseQueryOptions];

interface Common {
  /** The latest progress of the current run (kept once it answered), or null. */
  progress: Progress | null;
  /** The last failed attempt of the current run that the plane tries again (kept once it
   * answered), or null. */
  jobRetry: JobRetry | null;
  /** Run the query again now (aborting a run in flight), even when `enabled` is false. */
  refetch: () => void;
}

/**
 * What `useQuery` returns; narrow on `status`. `answer` is the latest answer for these
 * surface, operation and params: kept while a `refetch()` runs (status "loading"), gone
 * when they change. "idle": `enabled: false` and not run.
 */
export type QueryState<T> = Common &
  (
    | { status: "idle"; answer: T | undefined; error: null }
    | { status: "loading"; answer: T | undefined; error: null }
    | { status: "success"; answer: T; error: null }
    | { status: "error"; answer: T | undefined; error: DataPlaneError }
  );

export interface Hooks<P extends PlaneTypes = UntypedPlane> {
  /** The answer of `operation` on `surface` with `params`, typed by the plane's types. */
  useQuery<Sid extends keyof P & string, O extends keyof P[Sid] & string>(
    surface: Sid,
    operation: O,
    ...args: UseQueryArgs<P[Sid][O]>
  ): QueryState<P[Sid][O]["result"]>;
}

type Settled = Omit<QueryState<unknown>, "refetch"> & { key: string };

/** The hooks of one plane client (make it once, at module level, like the client). */
export function createHooks<P extends PlaneTypes = UntypedPlane>(client: PlaneClient<P>): Hooks<P> {
  const query = client.query as (
    surface: string,
    operation: string,
    params: unknown,
    options: QueryOptions,
  ) => Promise<unknown>;

  function useQuery(
    surface: string,
    operation: string,
    params?: unknown,
    options: UseQueryOptions = {},
  ): QueryState<unknown> {
    const { enabled = true } = options;
    const key = keyOf([surface, operation, params ?? {}]);
    const [state, setState] = useState<Settled | null>(null);
    // A refetch() is a request for one run of the key it was made for.
    const [forced, setForced] = useState<{ key: string; n: number } | null>(null);
    // The latest render's key and callbacks, for refetch() and for a run in flight.
    const latest = useRef({ key, options });
    useEffect(() => {
      latest.current = { key, options };
    });

    const lastForced = useRef(forced);

    useEffect(() => {
      // A disabled query runs for a refetch() of this key, once: not again when the
      // effect re-runs for another reason (enabled turning false, a change and back).
      const refetched = forced !== lastForced.current && forced?.key === key;
      lastForced.current = forced;
      if (!enabled && !refetched) {
        setState((s) =>
          s && s.key === key && s.status === "loading" ? { ...s, status: "idle" } : s,
        );
        return;
      }
      const controller = new AbortController();
      const { signal } = controller;
      const live = () => !signal.aborted;
      setState((s) => ({
        key,
        status: "loading",
        answer: s && s.key === key ? s.answer : undefined,
        error: null,
        progress: null,
        jobRetry: null,
      }));
      const { onEvent, onRetry, onProgress, onJobRetry } = latest.current.options;
      query(surface, operation, params ?? {}, {
        signal,
        onEvent: onEvent && ((...event) => live() && latest.current.options.onEvent?.(...event)),
        onRetry: onRetry && ((info) => live() && latest.current.options.onRetry?.(info)),
        onProgress: (progress) => {
          if (!live()) return;
          setState((s) => (s && s.key === key ? { ...s, progress } : s));
          if (onProgress) latest.current.options.onProgress?.(progress);
        },
        onJobRetry: (jobRetry) => {
          if (!live()) return;
          setState((s) => (s && s.key === key ? { ...s, jobRetry } : s));
          if (onJobRetry) latest.current.options.onJobRetry?.(jobRetry);
        },
      }).then(
        (answer) => {
          if (!live()) return;
          setState((s) => ({
            key,
            status: "success",
            answer,
            error: null,
            progress: s?.progress ?? null,
            jobRetry: s?.jobRetry ?? null,
          }));
        },
        (err: unknown) => {
          if (!live()) return; // aborted: replaced or unmounted, its job withdrawn
          const error = asDataPlaneError(err);
          setState((s) => ({
            key,
            status: "error",
            answer: s && s.key === key ? s.answer : undefined,
            error,
            progress: s?.progress ?? null,
            jobRetry: s?.jobRetry ?? null,
          }));
        },
      );
      return () => controller.abort();
      // params are in `key` (by value); the callbacks are read from `latest` when called.
      // eslint-disable-next-line react-hooks/exhaustive-deps
    }, [key, enabled, forced]);

    const refetch = useCallback(() => {
      setForced((f) => ({ key: latest.current.key, n: (f?.n ?? 0) + 1 }));
    }, []);

    if (state && state.key === key) {
      const { key: _, ...shown } = state;
      return { ...shown, refetch } as QueryState<unknown>;
    }
    // Not run yet for this key (the first render, or right after a change): what the
    // effect is about to do.
    return {
      status: enabled ? "loading" : "idle",
      answer: undefined,
      error: null,
      progress: null,
      jobRetry: null,
      refetch,
    };
  }

  return { useQuery } as Hooks<P>;
}

/** JSON with object keys sorted: equal for params equal by value. */
function keyOf(value: unknown): string {
  return JSON.stringify(value, (_, v) =>
    v && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  );
}

/** The core rejects with DataPlaneError (or AbortError, ignored above); anything else
 * (a throwing hook of the caller's) is reported as one too. */
function asDataPlaneError(err: unknown): DataPlaneError {
  if (err instanceof DataPlaneError) return err;
  const message = err instanceof Error ? err.message : String(err);
  return new DataPlaneError({ status: 0, code: "NETWORK", message, cause: err });
}
