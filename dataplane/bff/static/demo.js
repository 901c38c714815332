// @ts-nocheck
// The demo page: one panel per demo surface, a coalescing burst, typed errors, abort.
// Every query goes through dataClient.js. With a token, the panels run their queries
// (and the error cases) when the page opens; body[data-loaded] says when that round
// has settled. Test hooks: window.dataplaneDemo.
import { createDataClient, download } from "./dataClient.js";

const TOKEN_KEY = "dataplane.token";
const BURST = 50;
const MAX_ROWS = 25; // rows a table shows; the caption says how many there are

const $ = (selector, root = document) => root.querySelector(selector);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null) continue;
    if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  node.append(...children);
  return node;
}

// ---- token: ?token= in the URL wins, then localStorage --------------------------------
const tokenInput = $("#token");
const fromUrl = new URLSearchParams(location.search).get("token");
if (fromUrl) localStorage.setItem(TOKEN_KEY, fromUrl);
tokenInput.value = fromUrl || localStorage.getItem(TOKEN_KEY) || "";
tokenInput.addEventListener("change", () =>
  localStorage.setItem(TOKEN_KEY, tokenInput.value.trim()),
);
const currentToken = () => tokenInput.value.trim();

// ---- clients: one per surface, with EventSources the page can count -------------------
const streams = new Set();
class TrackedEventSource extends EventSource {
  constructor(url, init) {
    super(url, init);
    streams.add(this);
  }
  close() {
    streams.delete(this);
    super.close();
  }
}
const openStreams = () =>
  [...streams].filter((s) => s.readyState !== EventSource.CLOSED).length;

function clientFor(surface, getToken = currentToken, extra = {}) {
  return createDataClient({
    baseUrl: `/api/${surface}`,
    getToken,
    EventSource: TrackedEventSource,
    ...extra,
  });
}

// ---- a "slot": one request's button, live status line, timings, badges, output --------
const slots = {};

function makeSlot(container, key, label, onRun) {
  const ids = (part) => `${part}-${key}`;
  const node = el("div", { class: "slot", "data-testid": ids("slot"), "data-state": "idle" });
  const head = el("div", { class: "slot-head" });
  if (onRun) {
    const button = el("button", { type: "button", "data-testid": ids("run"), text: label });
    button.addEventListener("click", () => onRun().catch(() => {}));
    head.append(button);
  } else {
    head.append(el("b", { text: label }));
  }
  const status = el("span", { class: "status", "data-testid": ids("status"), text: "idle" });
  const e2e = el("b", { "data-testid": ids("e2e"), text: "–" });
  const queue = el("b", { "data-testid": ids("queue"), text: "–" });
  const cache = el("span", { class: "badge", "data-testid": ids("cache"), hidden: "" });
  const coalesced = el("span", { class: "badge", "data-testid": ids("coalesced"), hidden: "" });
  head.append(
    status,
    el("span", { class: "timing" }, "end-to-end ", e2e),
    el("span", { class: "timing" }, "queue wait ", queue),
    cache,
    coalesced,
  );
  // The job's progress, when its handler reports some (ctx.progress): hidden until then.
  const bar = el("progress", { max: "1", value: "0", "data-testid": ids("progress") });
  const said = el("span", { class: "progress-message", "data-testid": ids("progress-message") });
  const meter = el("div", { class: "progress", hidden: "" }, bar, said);
  // A failed attempt the plane tries again (the stream's retry event): what failed and
  // when the next try is due, counted down; hidden until then, kept once it answered.
  const retried = el("div", { class: "retry", "data-testid": ids("retry"), hidden: "" });
  let countdown = null;
  let lastRetry = null;
  const failed = (data) => `attempt ${data.attempt} of ${data.maxAttempts} failed: ${data.error}`;
  const stopCountdown = () => {
    clearInterval(countdown);
    countdown = null;
  };
  const showRetry = (data) => {
    stopCountdown();
    lastRetry = data;
    const due = performance.now() + data.retryInMs;
    const tick = () => {
      const left = Math.ceil((due - performance.now()) / 1000);
      retried.textContent = `${failed(data)}; ${left > 0 ? `next try in ${left} s` : "trying again now"}`;
      if (left <= 0) stopCountdown();
    };
    Object.assign(retried.dataset, { attempt: data.attempt, retryInMs: data.retryInMs });
    retried.hidden = false;
    tick();
    countdown = setInterval(tick, 250);
  };
  const error = el("div", { class: "error", "data-testid": ids("error"), hidden: "" });
  const out = el("div", { class: "out", "data-testid": ids("out") });
  node.append(head, meter, retried, error, out);
  container.append(node);

  const trail = [];
  const show = () => {
    status.textContent = trail.map(([text, n]) => (n > 1 ? `${text} ×${n}` : text)).join(" → ");
  };
  const step = (text) => {
    const last = trail[trail.length - 1];
    if (last && last[0] === text) last[1] += 1;
    else trail.push([text, 1]);
    show();
  };
  const slot = {
    key,
    out,
    get jobId() {
      return node.dataset.jobId || null;
    },
    start() {
      trail.length = 0;
      node.dataset.state = "running";
      node.dataset.jobId = "";
      error.hidden = cache.hidden = coalesced.hidden = meter.hidden = retried.hidden = true;
      stopCountdown();
      lastRetry = null;
      bar.value = 0;
      said.textContent = "";
      delete bar.dataset.seq;
      e2e.textContent = queue.textContent = "…";
      out.replaceChildren();
      step("posted");
      return performance.now();
    },
    onEvent(name, data) {
      if (data?.jobId) node.dataset.jobId = data.jobId;
      if (name === "queued") step(`queued (${data.status})`);
      else if (name === "progress") {
        meter.hidden = false;
        if (typeof data.fraction === "number") bar.value = data.fraction;
        bar.dataset.seq = String(data.seq);
        said.textContent = data.message ?? "";
        step("progress");
      }
      else if (name === "retry") {
        showRetry(data);
        step(`attempt ${data.attempt} failed`);
      }
      else if (name === "poll") step(`poll ${data.httpStatus}`);
      else if (name === "error") {
        step(data.code === "TIMEOUT" ? "stream TIMEOUT → polling" : `stream ${data.code}`);
      }
      else if (name === "done") {
        cache.textContent = `cache: ${data.cache ?? "n/a"}`;
        cache.dataset.value = data.cache ?? "";
        cache.className = `badge cache-${data.cache}`;
        coalesced.textContent = data.coalesced ? "coalesced" : "own execution";
        coalesced.dataset.value = String(Boolean(data.coalesced));
        coalesced.className = `badge ${data.coalesced ? "on" : "off"}`;
        cache.hidden = coalesced.hidden = false;
        const queueMs = data.timings?.queueMs;
        queue.textContent = typeof queueMs === "number" ? `${Math.round(queueMs)} ms` : "n/a";
        queue.title =
          typeof queueMs === "number" ? "" : "the answer does not say when the job was claimed";
      }
    },
    finish(t0, err) {
      e2e.textContent = `${Math.round(performance.now() - t0)} ms`;
      stopCountdown();
      if (lastRetry) retried.textContent = failed(lastRetry); // what failed stays, not the wait
      if (queue.textContent === "…") queue.textContent = "n/a";
      if (!err) {
        node.dataset.state = "done";
        step("done");
        return;
      }
      node.dataset.state = "error";
      step(err.name === "AbortError" ? "aborted" : `error ${err.status ?? err.name}`);
      error.hidden = false;
      error.textContent = describe(err, node.dataset.jobId);
    },
  };
  slots[key] = slot;
  return slot;
}

/** One line for a rejected query; an abort says what became of its job, not the
 * browser's "signal is aborted without reason". */
function describe(err, jobId) {
  if (err.name === "DataPlaneError") return `${err.status} ${err.code}: ${err.message}`;
  if (err.name === "AbortError") {
    if (jobId) return "Aborted: the job was withdrawn";
    return "Aborted: the query was withdrawn before its job was known";
  }
  return `${err.name}: ${err.message}`;
}

/** Run one query in a slot; resolves with the result, rejects with the typed error. */
async function runIn(slot, surface, operation, params, { getToken, signal } = {}) {
  const t0 = slot.start();
  try {
    const result = await clientFor(surface, getToken).query(operation, params, {
      signal,
      onEvent: (name, data) => slot.onEvent(name, data),
    });
    slot.finish(t0);
    return result;
  } catch (err) {
    slot.finish(t0, err);
    throw err;
  }
}

// ---- rendering results as tables ------------------------------------------------------
function cell(value) {
  if (value === null || value === undefined) return "—";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

// Answers come back from jsonb, which does not keep key order: lead with the telling columns.
const LEADING = [
  "id", "number", "code", "skill", "branch_id", "branch_name",
  "full_name", "title", "name", "email", "role", "status",
];
const ordered = (keys) => [
  ...LEADING.filter((k) => keys.includes(k)),
  ...keys.filter((k) => !LEADING.includes(k)),
];

// A column name may break after each "_" (a narrow panel wraps it there first).
const breakable = (name) =>
  name.split("_").flatMap((part, i) => (i ? [el("wbr"), `_${part}`] : [part]));

function table(testid, rows, caption) {
  const columns = ordered([...new Set(rows.flatMap((row) => Object.keys(row)))]);
  const shown = rows.slice(0, MAX_ROWS);
  const count = rows.length > shown.length ? `${shown.length} of ${rows.length}` : `${rows.length}`;
  const plural = rows.length === 1 ? "" : "s";
  const text = `${caption === "rows" ? "" : `${caption}: `}${count} row${plural}`;
  return el(
    "table",
    { "data-testid": testid, "data-rows": rows.length },
    el("caption", { text }),
    el("thead", {}, el("tr", {}, ...columns.map((c) => el("th", { title: c }, ...breakable(c))))),
    el(
      "tbody",
      {},
      ...shown.map((row) =>
        el("tr", {}, ...columns.map((c) => el("td", { "data-col": c, text: cell(row[c]) }))),
      ),
    ),
  );
}

function keyValues(testid, object, caption) {
  return el(
    "table",
    { class: "kv", "data-testid": testid },
    el("caption", { text: caption }),
    el(
      "tbody",
      {},
      ...ordered(Object.keys(object)).map((k) =>
        el("tr", {}, el("th", { text: k }), el("td", { "data-key": k, text: cell(object[k]) })),
      ),
    ),
  );
}

/** Scalars as one key/value table, arrays of rows as tables, objects as key/value tables. */
function render(slot, result) {
  const id = (field) => `table-${slot.key}-${field}`;
  if (Array.isArray(result)) return slot.out.append(table(id("rows"), result, "rows"));
  if (result === null || typeof result !== "object") {
    return slot.out.append(el("pre", { "data-testid": id("value"), text: cell(result) }));
  }
  const scalars = Object.fromEntries(
    Object.entries(result).filter(([, v]) => v === null || typeof v !== "object"),
  );
  if (Object.keys(scalars).length) slot.out.append(keyValues(id("summary"), scalars, "summary"));
  const nested = Object.entries(result).filter(([, v]) => v && typeof v === "object");
  for (const [field, value] of nested) {
    if (!Array.isArray(value)) slot.out.append(keyValues(id(field), value, field));
  }
  for (const [field, value] of nested) {
    if (Array.isArray(value)) slot.out.append(table(id(field), value, field));
  }
}

// ---- the four demo surfaces -----------------------------------------------------------
const userIdInput = $("#user-id");
const invoiceIdInput = $("#invoice-id");
const pdfButton = $("#invoice-pdf");
const num = (input) => Number(input.value);

const userId = () => ({ userId: num(userIdInput) });
const search = () => {
  const q = $("#users-q").value.trim();
  return q ? { limit: 10, q } : { limit: 10 };
};
// surface -> [slot key, operation, params, runs in "Run all"'s first round (a list)]
const PANELS = {
  users: [
    ["users-list", "list", search, true],
    ["users-detail", "detail", userId],
  ],
  learnerviews: [
    ["lv-branches", "branchSummary", () => ({}), true],
    ["lv-courses", "courseSummary", () => ({ limit: 10 }), true],
    ["lv-learner", "learner", userId],
  ],
  accounting: [
    ["acc-invoices", "invoices", () => ({ limit: 10 }), true],
    ["acc-invoice", "invoice", () => ({ invoiceId: num(invoiceIdInput) })],
  ],
  skills: [
    ["skills-coverage", "coverage", () => ({}), true],
    ["skills-profile", "profile", userId],
  ],
};

const runners = {}; // key -> () => Promise
for (const [surface, entries] of Object.entries(PANELS)) {
  const container = $(`#panel-${surface} .slots`);
  for (const [key, operation, params, primary] of entries) {
    const run = async () => {
      const result = await runIn(slots[key], surface, operation, params());
      render(slots[key], result);
      afterResult(key, result);
      return result;
    };
    runners[key] = Object.assign(run, { primary: Boolean(primary) });
    makeSlot(container, key, `${surface}.${operation}`, run);
  }
}
const pdfSlot = makeSlot($("#panel-accounting .slots"), "acc-pdf", "accounting.invoicePdf");

function afterResult(key, result) {
  const first = result?.rows?.[0];
  if (key === "users-list" && first && !userIdInput.value) userIdInput.value = first.id;
  if (key === "acc-invoices" && first) {
    if (!invoiceIdInput.value) invoiceIdInput.value = first.id;
    pdfButton.disabled = false;
    pdfButton.textContent = `Download invoice PDF (${first.number ?? first.id})`;
  }
}
invoiceIdInput.addEventListener("input", () => {
  pdfButton.disabled = !invoiceIdInput.value;
  pdfButton.textContent = "Download invoice PDF";
});

async function downloadPdf() {
  const blob = await runIn(pdfSlot, "accounting", "invoicePdf", { invoiceId: num(invoiceIdInput) });
  pdfSlot.out.append(
    el("p", {
      "data-testid": "pdf-info",
      text: `${blob.filename}: ${blob.size} bytes, ${blob.contentType}`,
    }),
  );
  download(blob);
  return blob;
}
pdfButton.addEventListener("click", () => downloadPdf().catch(() => {}));

/** Every list, then the drill-downs for the first user and invoice found. */
async function runAll() {
  const lists = Object.entries(runners).filter(([, run]) => run.primary);
  await Promise.allSettled(lists.map(([, run]) => run()));
  const details = Object.entries(runners).filter(([key, run]) => {
    if (run.primary) return false;
    return key === "acc-invoice" ? Boolean(invoiceIdInput.value) : Boolean(userIdInput.value);
  });
  await Promise.allSettled(details.map(([, run]) => run()));
}
$("#run-all").addEventListener("click", () => runAll());

// ---- burst: 50 identical queries, one execution ---------------------------------------
const burstSlot = makeSlot($("#panel-burst .slots"), "burst", `${BURST} × probe.sleep`);

async function burst() {
  const ms = num($("#burst-ms")) || 0;
  const result = $("#burst-result");
  result.textContent = `${BURST} queries in flight…`;
  result.dataset.state = "running";
  const jobIds = new Set();
  let coalesced = 0;
  // 50 at once over HTTP/1.1 (six connections per origin): POSTs held for their answer
  // (Prefer: wait) would take connections the others need while the job runs, so late
  // POSTs could miss the live job. A burst asks for no wait: 202 at once, then streams.
  const probe = clientFor("probe", currentToken, { preferWaitSeconds: 0 });
  const t0 = burstSlot.start();
  const outcomes = await Promise.allSettled(
    Array.from({ length: BURST }, () =>
      probe.query("sleep", { ms }, {
        onEvent: (name, data) => {
          if (name === "queued") burstSlot.onEvent(name, data);
          if (name !== "done") return;
          jobIds.add(data.jobId);
          if (data.coalesced) coalesced += 1;
        },
      }),
    ),
  );
  const answers = outcomes.filter((o) => o.status === "fulfilled").length;
  const failed = outcomes.find((o) => o.status === "rejected");
  burstSlot.finish(t0, failed?.reason);
  const executions = jobIds.size;
  const ids = [...jobIds];
  Object.assign(result.dataset, { state: "done", answers, executions, coalesced, jobIds: ids });
  result.textContent = `${answers} answers, ${executions} execution${executions === 1 ? "" : "s"}`;
  $("#burst-detail").textContent =
    `${coalesced} of ${BURST} coalesced onto a live job · distinct job ids: ${ids.join(", ")}` +
    (failed ? ` · ${BURST - answers} failed (${describe(failed.reason)})` : "");
  return { answers, executions, coalesced, jobIds: ids };
}
$("#burst-run").addEventListener("click", () => burst());

// ---- typed errors: a slot per case ---------------------------------------------------
// case -> [surface, operation, params, getToken (the page's when absent)]
const ERROR_CASES = {
  "reject-400": ["probe", "reject", { status: 400, message: "the probe rejects this (400)" }],
  "reject-404": ["probe", "reject", { status: 404, message: "the probe found nothing (404)" }],
  "unknown-op": ["probe", "noSuchOperation", {}],
  "bad-params": ["users", "list", { limit: 0 }],
  "bad-token": ["users", "list", { limit: 1 }, () => "not-a-valid-token"],
};
const LABELS = {
  "reject-400": "reject 400",
  "reject-404": "reject 404",
  "unknown-op": "unknown operation",
  "bad-params": "bad params",
  "bad-token": "bad token",
};
const FIELDS = ["name", "status", "code", "message", "job"];

async function errorCase(name) {
  const [surface, operation, params, getToken] = ERROR_CASES[name];
  const slot = slots[`err-${name}`];
  let shown;
  try {
    const result = await runIn(slot, surface, operation, params, { getToken });
    shown = { name: "(no error)", message: JSON.stringify(result) };
  } catch (err) {
    shown = err;
  }
  const { name: errorName, status = "", code = "", message = "", jobId = null } = shown;
  const values = { name: errorName, status, code, message, job: jobId || "—" };
  const box = el("dl", {
    class: "error-output",
    "data-testid": `error-output-${name}`,
    "data-case": name,
    "data-name": errorName,
    "data-status": status,
    "data-code": code,
    title: `${LABELS[name]}: ${surface}.${operation}`,
  });
  for (const field of FIELDS) {
    box.append(
      el("dt", { text: field }),
      el("dd", { "data-testid": `error-${name}-${field}`, text: values[field] }),
    );
  }
  slot.out.replaceChildren(box);
  return { name: errorName, status, code, message, jobId };
}
for (const [name, [surface, operation]] of Object.entries(ERROR_CASES)) {
  const slot = makeSlot($("#error-slots"), `err-${name}`, LABELS[name], () => errorCase(name));
  slot.out.title = `${surface}.${operation}`;
}

// ---- progress -------------------------------------------------------------------------
// A job that reports progress: the stream's progress events fill the slot's bar (a POST
// held for its answer would get the answer alone, so this one asks for no wait).
const progressSlot = makeSlot($("#progress-slots"), "progress", "probe.progress");
$("#progress-start").addEventListener("click", async () => {
  const params = { steps: num($("#progress-steps")) || 1, ms: num($("#progress-ms")) || 0 };
  const probe = clientFor("probe", currentToken, { preferWaitSeconds: 0 });
  const t0 = progressSlot.start();
  try {
    await probe.query("progress", params, {
      onEvent: (name, data) => progressSlot.onEvent(name, data),
    });
    progressSlot.finish(t0);
  } catch (err) {
    progressSlot.finish(t0, err);
  }
});

// ---- retries --------------------------------------------------------------------------
// A job whose first attempts fail (probe.fail): each failed attempt the plane tries again
// shows in the slot (what failed, the next try counted down), then the answer, or POISON
// once the attempts are spent.
const failSlot = makeSlot($("#fail-slots"), "fail", "probe.fail");
$("#fail-start").addEventListener("click", async () => {
  const params = { times: num($("#fail-times")) || 0 };
  const probe = clientFor("probe", currentToken, { preferWaitSeconds: 0 });
  const t0 = failSlot.start();
  try {
    const result = await probe.query("fail", params, {
      onEvent: (name, data) => failSlot.onEvent(name, data),
    });
    failSlot.finish(t0);
    render(failSlot, result);
  } catch (err) {
    failSlot.finish(t0, err);
  }
});

// ---- abort ----------------------------------------------------------------------------
const abortSlot = makeSlot($("#abort-slots"), "abort", "probe.sleep (abortable)");
let controller = null;

$("#abort-start").addEventListener("click", async () => {
  controller = new AbortController();
  $("#abort-stop").disabled = false;
  $("#abort-output").textContent = "running…";
  try {
    const params = { ms: num($("#abort-ms")) };
    await runIn(abortSlot, "probe", "sleep", params, { signal: controller.signal });
    $("#abort-output").textContent = "finished (not aborted)";
  } catch (err) {
    const line = describe(err, abortSlot.jobId);
    $("#abort-output").textContent = `${line} · open streams: ${openStreams()}`;
  } finally {
    $("#abort-stop").disabled = true;
  }
});
$("#abort-stop").addEventListener("click", () => controller?.abort());

/**
 * Run a query and abort it at its first `abortOn` event ("queued", "poll", "error").
 * Resolves with what happened: {outcome, name, message, jobId, events, openStreams}.
 */
async function abortAt(surface, operation, params, abortOn = "queued") {
  const ctrl = new AbortController();
  const events = [];
  let jobId = null;
  const onEvent = (name, data) => {
    events.push(name);
    jobId = jobId ?? data?.jobId ?? null;
    if (name === abortOn) ctrl.abort();
  };
  try {
    await clientFor(surface).query(operation, params, { signal: ctrl.signal, onEvent });
    return { outcome: "resolved", jobId, events, openStreams: openStreams() };
  } catch (err) {
    const { name, message } = err;
    return { outcome: "rejected", name, message, jobId, events, openStreams: openStreams() };
  }
}

/** One query with the page's token; resolves with the result and the events seen. */
async function query(surface, operation, params) {
  const events = [];
  const t0 = performance.now();
  try {
    const result = await clientFor(surface).query(operation, params, {
      onEvent: (name, data) => events.push([name, data]),
    });
    return { ok: true, result, events, ms: performance.now() - t0 };
  } catch (err) {
    const { name, status, code, message, jobId } = err;
    return { ok: false, name, status, code, message, jobId, events };
  }
}

// ---- the first round: every panel answers on load ------------------------------------
// The lists, their drill-downs and the error cases, once a token is known (in the URL or
// kept from before, else when one is pasted). The burst, progress, retry and abort demos
// run on their buttons: they are about timing, and 50 queries would hold the connections.
let firstRound = null;
function runFirstRound() {
  const note = $("#first-round");
  if (!currentToken()) {
    note.textContent = "paste a token to run the panels";
    document.body.dataset.loaded = "no-token";
    return null;
  }
  note.textContent = "running every panel…";
  firstRound ??= Promise.allSettled([runAll(), ...Object.keys(ERROR_CASES).map(errorCase)]).then(
    () => {
      note.textContent = "";
      document.body.dataset.loaded = "true";
    },
  );
  return firstRound;
}
tokenInput.addEventListener("change", () => runFirstRound());

window.dataplaneDemo = { runAll, burst, errorCase, abortAt, query, openStreams, downloadPdf };
$("#ready").hidden = false;
document.body.dataset.ready = "true";
runFirstRound();
