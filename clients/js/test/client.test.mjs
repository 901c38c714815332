// The client against a real plane: `dataplane dev` (embedded Postgres, the BFF, a worker
// per surface), started by this file, asked over real HTTP. Each behaviour a browser
// needs has its case here; each fails on the hand-written dataClient.js before the package.
//
//   DATAPLANE_BIN  the `dataplane` command (default: `dataplane` on PATH)
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { request as httpRequest, createServer as createHttpServer } from "node:http";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { EventSource } from "eventsource";
import { createDataClient, createPlaneClient, DataPlaneError } from "../dist/index.js";

const MAX_LIVE_PER_CLIENT = 3; // the dev stack's share per client: the 4th live job is a 429
let dev;
let base;
let token;
let dir;
let queueDsn;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "dataplane-client-"));
  const port = await freePort();
  dev = spawn(process.env.DATAPLANE_BIN || "dataplane", ["dev", "--dir", dir, "--port", port], {
    env: { ...process.env, DATAPLANE_MAX_LIVE_PER_CLIENT: String(MAX_LIVE_PER_CLIENT) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  dev.stderr.on("data", (chunk) => (out += chunk));
  const started = new Promise((resolve, reject) => {
    dev.on("exit", (code) => reject(new Error(`dataplane dev exited ${code}:\n${out}`)));
    dev.stdout.on("data", (chunk) => {
      out += chunk;
      const found = /Dev token:\s+(\S+)/.exec(out);
      const dsn = /Queue DB:\s+(.+)/.exec(out);
      if (found && dsn && /Ctrl-C stops everything/.test(out)) {
        queueDsn = dsn[1];
        resolve(found[1]);
      }
    });
  });
  token = await withTimeout(started, 120_000, () => `dataplane dev did not start:\n${out}`);
  base = `http://127.0.0.1:${port}`;
  await waitReady();
});

after(async () => {
  if (dev && dev.exitCode === null) {
    const exited = new Promise((resolve) => dev.once("exit", resolve));
    dev.kill("SIGTERM");
    await withTimeout(exited, 30_000, () => "dataplane dev did not stop on SIGTERM");
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const probe = (extra = {}) =>
  createDataClient({ baseUrl: `${base}/api/probe`, getToken: () => token, EventSource, ...extra });

test("a query answers, typed or not, over Prefer: wait and over the stream", async () => {
  const held = await probe().query("echo", { value: 7 });
  assert.deepEqual(held, { echo: 7, client: "acme" });
  const streamed = await probe({ preferWaitSeconds: 0 }).query("echo", { value: "s" });
  assert.deepEqual(streamed, { echo: "s", client: "acme" });
  const plane = createPlaneClient({ apiRoot: `${base}/api`, getToken: () => token, EventSource });
  assert.deepEqual(await plane.query("probe", "echo", { value: 1 }), { echo: 1, client: "acme" });
});

test("abort withdraws the job: a pending job nobody else asked for is cancelled", async () => {
  // The probe queue is paused (as an operator would), so the job stays pending: no slot
  // timing decides whether the abort finds it pending.
  await paused("surface-probe", async () => {
    const ctrl = new AbortController();
    let queued;
    const aborted = probe({ preferWaitSeconds: 0 }).query(
      "echo",
      { value: `abort-${Date.now()}` },
      { signal: ctrl.signal, onEvent: (name, data) => name === "queued" && (queued = data) },
    );
    await until(() => queued, 10_000, "no queued event");
    ctrl.abort();
    await assert.rejects(aborted, { name: "AbortError" });
    const answer = await pollAnswer(queued.jobId);
    assert.equal(answer.status, "cancelled", JSON.stringify(answer));
  });
});

test("abort while the POST is in flight still withdraws the job it queued", async () => {
  const seen = [];
  const recording = (url, init) => {
    seen.push(`${init?.method || "GET"} ${new URL(url).pathname}`);
    return fetch(url, init).then((r) => (seen.push(`-> ${r.status}`), r));
  };
  await paused("surface-probe", async () => {
    const ctrl = new AbortController();
    const query = probe({ fetch: recording, preferWaitSeconds: 2 }).query(
      "echo",
      { value: `abort-post-${Date.now()}` },
      { signal: ctrl.signal },
    );
    await sleep(300); // the POST is held (Prefer: wait=2): the abort comes before its answer
    ctrl.abort();
    await assert.rejects(query, { name: "AbortError" });
    const deletes = seen.filter((line) => line.startsWith("DELETE "));
    assert.equal(deletes.length, 1, seen.join("\n"));
    const jobId = deletes[0].split("/").pop();
    assert.equal((await pollAnswer(jobId)).status, "cancelled");
  });
});

test("abort of a running job stops it: cancelled by its requesters while it ran", async () => {
  const ctrl = new AbortController();
  let queued;
  const aborted = probe({ preferWaitSeconds: 0 }).query(
    "sleep",
    { ms: 30_000 + (Date.now() % 1000) },
    { signal: ctrl.signal, onEvent: (name, data) => name === "queued" && (queued = data) },
  );
  await until(() => queued, 10_000, "no queued event");
  await untilAsync(async () => (await jobStatus(queued.jobId)) === "in_progress", 20_000);
  const started = Date.now();
  ctrl.abort();
  await assert.rejects(aborted, { name: "AbortError" });
  const answer = await pollAnswer(queued.jobId); // cancelled, not left running for 30 s
  assert.ok(Date.now() - started < 5_000, `took ${Date.now() - started} ms`);
  assert.equal(answer.status, "cancelled", JSON.stringify(answer));
  assert.equal(answer.error.code, "CANCELLED");
  assert.equal(answer.error.cancellation.by, "requesters");
  assert.equal(answer.error.cancellation.whileRunning, true);
  assert.match(answer.error.message, /cancelled by its requesters .* while it ran, at /);
});

test("an operator's cancel rejects with CANCELLED naming the operator", async () => {
  let queued;
  const query = probe({ preferWaitSeconds: 0 }).query(
    "sleep",
    { ms: 30_000 + (Date.now() % 1000) },
    { onEvent: (name, data) => name === "queued" && (queued = data) },
  );
  const failed = query.catch((err) => err);
  await until(() => queued, 10_000, "no queued event");
  await untilAsync(async () => (await jobStatus(queued.jobId)) === "in_progress", 20_000);
  await dataplane("jobs", "cancel", queued.jobId);
  const err = await withTimeout(failed, 10_000, () => "the query did not end");
  assert.ok(err instanceof DataPlaneError, String(err));
  assert.equal(err.code, "CANCELLED");
  assert.equal(err.status, 409);
  assert.equal(err.jobId, queued.jobId);
  assert.equal(err.cancellation.by, "operator");
  assert.match(err.cancellation.operator, /^cli:/);
  assert.equal(err.cancellation.whileRunning, true);
  assert.match(err.message, /cancelled by the operator cli:\S+ while it ran, at /);
});

test("a 429 with Retry-After is retried within the budget, each retry seen by onRetry", async () => {
  const nonce = `share-${Date.now()}`;
  const client = probe({ preferWaitSeconds: 0 });
  const live = await fillTheShare(client, 2500, nonce);
  const retries = [];
  const answer = await probe({ onRetry: (r) => retries.push(r) }).query("echo", { value: nonce });
  assert.deepEqual(answer, { echo: nonce, client: "acme" });
  assert.ok(retries.length >= 1, "no retry");
  assert.equal(retries[0].status, 429);
  assert.equal(retries[0].error.code, "TOO_MANY_REQUESTS");
  assert.ok(retries[0].delayMs >= 1000, `delay ${retries[0].delayMs} below Retry-After`);
  await Promise.all(live);
});

test("a 429 past the budget rejects with it; a 400 is never retried", async () => {
  const nonce = `budget-${Date.now()}`;
  const client = probe({ preferWaitSeconds: 0 });
  const live = await fillTheShare(client, 2000, nonce);
  const retries = [];
  const tight = probe({ retry: { budgetMs: 500 }, onRetry: (r) => retries.push(r) });
  await assert.rejects(tight.query("echo", { value: 1 }), (err) => {
    assert.ok(err instanceof DataPlaneError);
    assert.equal(err.status, 429);
    return true;
  });
  assert.equal(retries.length, 0, "a retry past the budget");
  await assert.rejects(
    probe({ onRetry: (r) => retries.push(r) }).query("sleep", { ms: "soon" }),
    (err) => err instanceof DataPlaneError && err.status === 400,
  );
  assert.equal(retries.length, 0, "a 400 was retried");
  await Promise.all(live);
});

test("a 401 refreshes the token once; a second 401 rejects", async () => {
  const asked = [];
  const stale = probe({
    getToken: ({ refresh }) => {
      asked.push(refresh);
      return refresh ? token : `${token}x`;
    },
  });
  assert.deepEqual(await stale.query("echo", { value: 2 }), { echo: 2, client: "acme" });
  assert.deepEqual(asked, [false, true]);
  const never = [];
  const refused = probe({ getToken: ({ refresh }) => (never.push(refresh), "not-a-jwt") });
  await assert.rejects(refused.query("echo", {}), (err) => err.status === 401);
  assert.deepEqual(never, [false, true]);
});

test("onProgress gets each progress event in order, then the answer", async () => {
  const progress = [];
  const answer = await probe({ preferWaitSeconds: 0 }).query(
    "progress",
    { steps: 4, ms: 400, nonce: `p-${Date.now()}` },
    { onProgress: (p) => progress.push(p) },
  );
  assert.deepEqual(answer, { steps: 4 });
  assert.ok(progress.length >= 2, JSON.stringify(progress));
  const seqs = progress.map((p) => p.seq);
  assert.deepEqual(
    seqs,
    [...seqs].sort((a, b) => a - b),
  );
  assert.equal(new Set(seqs).size, seqs.length, "a progress event twice");
  assert.equal(progress.at(-1).total, 4);
});

test("a stream cut mid-job reconnects with Last-Event-ID: no progress event twice", async () => {
  // A proxy of the test's own between the client and the BFF ends the first stream's
  // connection right after its first progress event; EventSource reconnects through it.
  const proxy = await cuttingProxy(new URL(base));
  try {
    const progress = [];
    const answer = await createDataClient({
      baseUrl: `${proxy.url}/api/probe`,
      getToken: () => token,
      EventSource,
      preferWaitSeconds: 0,
    }).query(
      "progress",
      { steps: 4, ms: 500, nonce: `cut-${Date.now()}` },
      { onProgress: (p) => progress.push(p) },
    );
    assert.deepEqual(answer, { steps: 4 });
    assert.ok(proxy.streams.length >= 2, `no reconnect: ${JSON.stringify(proxy.streams)}`);
    assert.equal(proxy.streams[0].lastEventId, undefined);
    assert.ok(proxy.cutAfterId, "the proxy never saw an event id to cut after");
    assert.equal(proxy.streams[1].lastEventId, proxy.cutAfterId, JSON.stringify(proxy.streams));
    const seqs = progress.map((p) => p.seq);
    assert.equal(new Set(seqs).size, seqs.length, `a progress event twice: ${seqs}`);
  } finally {
    await proxy.close();
  }
});

test("a failed attempt reaches onJobRetry before the answer: dataplane dev retries in 2 s", async () => {
  const retries = [];
  const events = [];
  const started = Date.now();
  const answer = await probe({ preferWaitSeconds: 0 }).query(
    "fail",
    { times: 2, nonce: `retry-${Date.now()}` },
    { onJobRetry: (r) => retries.push(r), onEvent: (name) => events.push(name) },
  );
  assert.deepEqual(answer, { succeeded_on_attempt: 3 });
  assert.deepEqual(
    retries.map((r) => r.attempt),
    [1, 2],
    JSON.stringify(retries),
  );
  for (const r of retries) {
    assert.equal(r.maxAttempts, 5);
    assert.equal(r.error, `ProbeFailure: probe.fail: attempt ${r.attempt} of 2`);
    // `dataplane dev` gives its workers a 2 s failure backoff (the fleet's is 30 s).
    assert.ok(r.retryInMs > 0 && r.retryInMs <= 2000, `next try in ${r.retryInMs} ms`);
    assert.ok(Math.abs(Date.parse(r.retryAt) - Date.now()) < 60_000, r.retryAt);
  }
  assert.deepEqual(events, ["queued", "retry", "retry", "done"]);
  assert.ok(Date.now() - started < 20_000, `took ${Date.now() - started} ms`);
});

test("polling carries the failed attempt too: onJobRetry hears it once", async () => {
  const proxy = await cuttingProxy(new URL(base), { refuseStreams: true });
  try {
    const retries = [];
    const polls = [];
    const answer = await createDataClient({
      baseUrl: `${proxy.url}/api/probe`,
      getToken: () => token,
      EventSource,
      preferWaitSeconds: 0,
    }).query(
      "fail",
      { times: 1, nonce: `retry-poll-${Date.now()}` },
      {
        onJobRetry: (r) => retries.push(r),
        onEvent: (name, data) => name === "poll" && polls.push(data.httpStatus),
      },
    );
    assert.deepEqual(answer, { succeeded_on_attempt: 2 });
    assert.ok(proxy.streams.length >= 1, "the client never tried the stream");
    assert.ok(polls.includes(202) && polls.at(-1) === 200, JSON.stringify(polls));
    assert.deepEqual(
      retries.map((r) => [r.attempt, r.error]),
      [[1, "ProbeFailure: probe.fail: attempt 1 of 1"]],
    );
  } finally {
    await proxy.close();
  }
});

function cuttingProxy(upstream, { refuseStreams = false } = {}) {
  // HTTP/1.1 forwarding to the BFF; the first event-stream response is destroyed after
  // its first progress event (progress carries no id: the last id before it is the one a
  // reconnect must send), as a dropped connection would end it. `refuseStreams`: every
  // event stream is answered 502, as a proxy that cannot carry them would.
  const streams = [];
  const state = { streams, cutAfterId: undefined };
  const server = createHttpServer((req, res) => {
    const isStream = (req.headers.accept || "").includes("text/event-stream");
    if (isStream) streams.push({ url: req.url, lastEventId: req.headers["last-event-id"] });
    if (isStream && refuseStreams) {
      res.writeHead(502, { "Content-Type": "text/plain" });
      return res.end("no event streams here");
    }
    const cut = isStream && streams.length === 1;
    const up = httpRequest(
      { host: upstream.hostname, port: upstream.port, path: req.url, method: req.method, headers: req.headers },
      (ur) => {
        res.writeHead(ur.statusCode, ur.headers);
        if (!cut) return ur.pipe(res);
        let text = "";
        let cutting = false;
        ur.on("data", (chunk) => {
          if (cutting) return;
          text += chunk;
          if (!/^event: progress$/m.test(text)) return void res.write(chunk);
          cutting = true;
          const ids = [...text.matchAll(/^id: (\S+)$/gm)];
          state.cutAfterId = ids.at(-1)?.[1];
          // Cut once this chunk reached the socket: a response's first writes are corked
          // until the next tick, and a destroy in this one would drop them (the client
          // would then have seen no event at all, and poll rather than reconnect).
          res.write(chunk, () => {
            ur.destroy();
            res.destroy();
          });
        });
      },
    );
    up.on("error", () => res.destroy());
    req.pipe(up);
  });
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => {
      state.url = `http://127.0.0.1:${server.address().port}`;
      state.close = () =>
        new Promise((done) => {
          server.closeAllConnections();
          server.close(done);
        });
      resolve(state);
    });
  });
}

async function paused(queueType, body) {
  // `dataplane queue pause|resume` against the dev stack's queue DB: claims skip the type.
  await operator("pause", queueType);
  try {
    await body();
  } finally {
    await operator("resume", queueType);
  }
}

function operator(action, queueType) {
  return dataplane("queue", action, queueType);
}

function dataplane(...args) {
  // The `dataplane` CLI against the dev stack's queue DB (an operator's command).
  const cli = spawn(process.env.DATAPLANE_BIN || "dataplane", args, {
    env: { ...process.env, MAESTRO_QUEUES_URL: queueDsn },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  cli.stdout.on("data", (chunk) => (out += chunk));
  cli.stderr.on("data", (chunk) => (out += chunk));
  const exited = new Promise((resolve, reject) => {
    cli.on("exit", (code) =>
      code === 0 ? resolve() : reject(new Error(`dataplane ${args.join(" ")} exited ${code}: ${out}`)),
    );
  });
  return withTimeout(exited, 30_000, () => `dataplane ${args.join(" ")} hung: ${out}`);
}

async function jobStatus(jobId) {
  // The job's status as its poll says it, by the bearer (live: 202 with its status).
  const resp = await fetch(`${base}/api/probe/q/${jobId}`, {
    headers: { Authorization: `Bearer ${token}` },
  });
  return (await resp.json()).status;
}

async function pollAnswer(jobId) {
  // The job's row, by the bearer: 200 once it is finished (cancelled included).
  for (let i = 0; i < 100; i++) {
    const resp = await fetch(`${base}/api/probe/q/${jobId}`, {
      headers: { Authorization: `Bearer ${token}` },
    });
    if (resp.status === 200) return resp.json();
    await sleep(100);
  }
  throw new Error(`job ${jobId} did not finish`);
}

async function waitReady() {
  for (let i = 0; i < 600; i++) {
    try {
      if ((await fetch(`${base}/readyz`)).status === 200) return;
    } catch {
      // not listening yet
    }
    await sleep(100);
  }
  throw new Error("the BFF never became ready");
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(String(port)));
    });
  });
}

async function until(check, ms, what) {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(what);
    await sleep(20);
  }
}

async function untilAsync(check, ms) {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`not within ${ms} ms: ${check}`);
    await sleep(50);
  }
}

// The client's share of live jobs taken: MAX_LIVE_PER_CLIENT `bounded` jobs of `ms` (at
// most 2 run at once), each queued (its 202 answered: in the BFF's count) before this
// returns. The BFF's count is up to a second old (one read a second, plus what it added
// since): the wait first lets it see an earlier test's jobs gone, or a POST here would be
// refused a 429 for them and retried after its Retry-After (5 s), when the first of
// these jobs may have ended.
const LIVE_COUNT_REFRESH_MS = 1000;

async function fillTheShare(client, ms, nonce) {
  await sleep(LIVE_COUNT_REFRESH_MS + 200);
  let queued = 0;
  let allQueued;
  const filled = new Promise((resolve) => (allQueued = resolve));
  const onEvent = (name) => name === "queued" && ++queued === MAX_LIVE_PER_CLIENT && allQueued();
  const live = [];
  for (let i = 0; i < MAX_LIVE_PER_CLIENT; i++) {
    live.push(client.query("bounded", { ms, nonce: `${nonce}-${i}` }, { onEvent }).catch((e) => e));
  }
  await withTimeout(filled, 20_000, () => `${queued} of ${MAX_LIVE_PER_CLIENT} jobs queued`);
  return live;
}

function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(what())), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
