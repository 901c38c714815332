/**
 * The test app of tests/browser/test_react.py: real React (development build, StrictMode)
 * and the built package, `useQuery` against the real BFF and probe worker.
 *
 * `window.harness.show(view, props)` renders one view (`null` unmounts it); every state a
 * view commits is appended to `harness.log` (once: StrictMode runs effects twice);
 * `harness.openStreams()` counts the EventSources not closed. The test type-checks this
 * file with tsc too: the `@ts-expect-error` lines below are what the types must refuse.
 */

import { type FunctionComponent, StrictMode, useEffect } from "react";
import { createRoot } from "react-dom/client";
import { createPlaneClient, DataPlaneError } from "@surface-dataplane/client";
import { createHooks, type QueryState } from "@surface-dataplane/client/react";

/** The probe surface's types, as `surface-dataplane generate` writes them. */
type Plane = {
  probe: {
    echo: { params: { value?: unknown }; result: { echo: unknown; client: string } };
    sleep: { params: { ms: number }; result: { slept_ms: number } };
    progress: { params: { steps: number; ms: number }; result: { steps: number } };
    reject: { params: { status: 400 | 403 | 404; message?: string }; result: never };
    fail: { params: { times: number; nonce?: string }; result: { succeeded_on_attempt: number } };
  };
};

const token = new URLSearchParams(location.search).get("token") ?? "";

const streams = new Set<EventSource>();
class TrackedEventSource extends EventSource {
  constructor(url: string | URL, init?: EventSourceInit) {
    super(url, init);
    streams.add(this);
  }
}
const openStreams = () => [...streams].filter((s) => s.readyState !== EventSource.CLOSED).length;

const client = createPlaneClient<Plane>({ getToken: () => token, EventSource: TrackedEventSource });
const { useQuery } = createHooks(client);

interface Entry {
  view: string;
  status: string;
  text: string;
  progress: number | null;
  error: string | null;
}
const log: Entry[] = [];

function Shown({ view, q, text }: { view: string; q: QueryState<unknown>; text: string }) {
  const progress = q.progress?.done ?? null;
  const error = q.error ? `${q.error.status} ${q.error.code}` : null;
  useEffect(() => {
    // StrictMode runs this effect twice on mount: a state is logged once.
    const entry = { view, status: q.status, text, progress, error };
    if (JSON.stringify(log.at(-1)) !== JSON.stringify(entry)) log.push(entry);
  }, [view, q.status, text, progress, error]);
  return (
    <section>
      <output
        data-testid="state"
        data-view={view}
        data-status={q.status}
        data-progress={progress ?? ""}
        data-message={q.progress?.message ?? ""}
        data-retry={
          q.jobRetry ? `${q.jobRetry.attempt} of ${q.jobRetry.maxAttempts}: ${q.jobRetry.error}` : ""
        }
        data-error-class={q.error instanceof DataPlaneError ? "DataPlaneError" : ""}
        data-error-status={q.error?.status ?? ""}
        data-error-code={q.error?.code ?? ""}
        data-error-job={q.error?.jobId ?? ""}
      >
        {q.error ? q.error.message : text}
      </output>
      <button data-testid="refetch" type="button" onClick={q.refetch}>
        again
      </button>
    </section>
  );
}

function Echo({ value, enabled }: { value: string; enabled?: boolean }) {
  const q = useQuery("probe", "echo", { value }, { enabled });
  // Typed: the answer is echo's result.
  const answer: { echo: unknown; client: string } | undefined = q.answer;
  return <Shown view="echo" q={q} text={answer ? `${answer.echo} for ${answer.client}` : ""} />;
}

function Sleep({ ms }: { ms: number }) {
  const q = useQuery("probe", "sleep", { ms });
  const text = q.status === "success" ? `slept ${q.answer.slept_ms}` : "";
  return <Shown view="sleep" q={q} text={text} />;
}

function Steps({ steps, ms }: { steps: number; ms: number }) {
  const q = useQuery("probe", "progress", { steps, ms });
  return <Shown view="progress" q={q} text={q.answer ? `${q.answer.steps} steps` : ""} />;
}

function Fail({ times, nonce }: { times: number; nonce: string }) {
  const q = useQuery("probe", "fail", { times, nonce });
  const text = q.answer ? `succeeded on attempt ${q.answer.succeeded_on_attempt}` : "";
  return <Shown view="fail" q={q} text={text} />;
}

function Reject({ status, message }: { status: 400 | 403 | 404; message: string }) {
  const q = useQuery("probe", "reject", { status, message });
  return <Shown view="reject" q={q} text="" />;
}

/** Never rendered: what tsc must accept and refuse. */
export function TypesOnly() {
  const sleep = useQuery("probe", "sleep", { ms: 5 });
  if (sleep.status === "success") {
    const slept: number = sleep.answer.slept_ms;
    void slept;
  }
  if (sleep.status === "error") void sleep.error.code;
  // @ts-expect-error the answer may be missing until it came
  void sleep.answer.slept_ms;
  // @ts-expect-error slept_ms is a number
  const wrong: string | undefined = sleep.answer?.slept_ms;
  void wrong;
  // @ts-expect-error no such operation on probe
  useQuery("probe", "sleeep", { ms: 5 });
  // @ts-expect-error no such surface
  useQuery("users", "list", {});
  // @ts-expect-error ms is a number
  useQuery("probe", "sleep", { ms: "5" });
  // @ts-expect-error sleep requires its params
  useQuery("probe", "sleep");
  useQuery("probe", "echo"); // echo requires none
  useQuery("probe", "echo", undefined, { enabled: false, onProgress: (p) => void p.fraction });
  // Without generated types: anything goes, the answer is `any`.
  const untyped = createHooks(createPlaneClient({ getToken: () => token }));
  const anything: { whatever: 1 } = untyped.useQuery("users", "list", { limit: 5 }).answer;
  void anything;
  return null;
}

const VIEWS = { echo: Echo, sleep: Sleep, progress: Steps, reject: Reject, fail: Fail } as const;
const root = createRoot(document.getElementById("root")!);

function show(view: keyof typeof VIEWS | null, props: Record<string, unknown> = {}): void {
  const View = (view ? VIEWS[view] : null) as FunctionComponent<any> | null;
  root.render(<StrictMode>{View ? <View {...props} /> : null}</StrictMode>);
}

(window as any).harness = { show, log, openStreams };
