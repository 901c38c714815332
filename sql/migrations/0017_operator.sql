-- What operators do, and the state it leaves (issue #41, the console and the CLI).
--
-- dataplane_audit: one row per operator action (retry, discard, pause, resume, cancel),
-- written in the action's own transaction, so an action that changed rows always has
-- its row and one that failed has none: who (the operator's identity: a verified
-- token's sub and email through the console, the OS user through the CLI), when, what,
-- the filter or the job it was asked about, and how many rows it changed.
--
-- maestro_paused: the queue types whose claims take nothing while their row exists
-- (rows stay pending, enqueues and attaches still work); who paused it and when.

CREATE TABLE IF NOT EXISTS dataplane_audit (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       timestamptz NOT NULL DEFAULT now(),
    actor    text        NOT NULL CHECK (length(actor) BETWEEN 1 AND 320),
    via      text        NOT NULL CHECK (via IN ('console', 'cli')),
    action   text        NOT NULL
             CHECK (action IN ('retry', 'discard', 'pause', 'resume', 'cancel')),
    target   jsonb       NOT NULL,
    rows     integer     NOT NULL CHECK (rows >= 0)
);

CREATE INDEX IF NOT EXISTS dataplane_audit_at ON dataplane_audit (at);

CREATE TABLE IF NOT EXISTS maestro_paused (
    type      text        PRIMARY KEY,
    paused_at timestamptz NOT NULL DEFAULT now(),
    paused_by text        NOT NULL
);
