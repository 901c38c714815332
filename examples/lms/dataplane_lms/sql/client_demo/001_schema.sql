-- Demo LMS "client DB" schema (Surface Data Plane demo data set).
-- Everything lives in the dedicated schema `lms`.
-- Idempotent where reasonable (IF NOT EXISTS); assumes a fresh database otherwise.
-- Scope model: client -> branches. users / enrollments / invoices carry both
-- client_id and branch_id; (client_id, branch_id) is FK-checked against
-- lms.branches so a row can never point at another client's branch.
-- Secondary (non-PK/unique) indexes are created in 005_indexes.sql, after loading.

CREATE SCHEMA IF NOT EXISTS lms;

CREATE TABLE IF NOT EXISTS lms.clients (
    id          text PRIMARY KEY,
    name        text NOT NULL,
    currency    char(3) NOT NULL DEFAULT 'USD',
    created_at  timestamptz NOT NULL
);

CREATE TABLE IF NOT EXISTS lms.branches (
    id          text PRIMARY KEY,                       -- e.g. 'acme-north'
    client_id   text NOT NULL REFERENCES lms.clients (id),
    name        text NOT NULL,
    region      text NOT NULL,
    CONSTRAINT branches_client_id_id_key UNIQUE (client_id, id)  -- target of composite scope FKs
);

CREATE TABLE IF NOT EXISTS lms.users (
    id          bigint PRIMARY KEY,
    client_id   text NOT NULL,
    branch_id   text NOT NULL,
    email       text NOT NULL,
    full_name   text NOT NULL,
    role        text NOT NULL CHECK (role IN ('learner', 'manager', 'admin')),
    created_at  timestamptz NOT NULL,
    active      boolean NOT NULL DEFAULT true,
    CONSTRAINT users_branch_fk FOREIGN KEY (client_id, branch_id)
        REFERENCES lms.branches (client_id, id),
    CONSTRAINT users_client_email_key UNIQUE (client_id, email)
);

CREATE TABLE IF NOT EXISTS lms.courses (
    id               bigint PRIMARY KEY,
    client_id        text NOT NULL REFERENCES lms.clients (id),
    code             text NOT NULL,
    title            text NOT NULL,
    category         text NOT NULL,
    duration_minutes integer NOT NULL CHECK (duration_minutes > 0),
    price_cents      integer NOT NULL CHECK (price_cents >= 0),
    CONSTRAINT courses_client_code_key UNIQUE (client_id, code)
);

CREATE TABLE IF NOT EXISTS lms.enrollments (
    id            bigint PRIMARY KEY,
    user_id       bigint NOT NULL REFERENCES lms.users (id),
    course_id     bigint NOT NULL REFERENCES lms.courses (id),
    client_id     text NOT NULL,
    branch_id     text NOT NULL,                        -- denormalised from users.branch_id
    status        text NOT NULL CHECK (status IN ('enrolled', 'in_progress', 'completed', 'failed')),
    progress_pct  integer NOT NULL DEFAULT 0 CHECK (progress_pct BETWEEN 0 AND 100),
    score         integer CHECK (score BETWEEN 0 AND 100),
    enrolled_at   timestamptz NOT NULL,
    completed_at  timestamptz,
    CONSTRAINT enrollments_branch_fk FOREIGN KEY (client_id, branch_id)
        REFERENCES lms.branches (client_id, id),
    CONSTRAINT enrollments_user_course_key UNIQUE (user_id, course_id)
);

CREATE TABLE IF NOT EXISTS lms.skills (
    id          bigint PRIMARY KEY,
    client_id   text NOT NULL REFERENCES lms.clients (id),
    name        text NOT NULL,
    category    text NOT NULL,
    CONSTRAINT skills_client_name_key UNIQUE (client_id, name)
);

CREATE TABLE IF NOT EXISTS lms.course_skills (
    course_id   bigint NOT NULL REFERENCES lms.courses (id),
    skill_id    bigint NOT NULL REFERENCES lms.skills (id),
    weight      numeric(3,2) NOT NULL CHECK (weight > 0 AND weight <= 1),
    PRIMARY KEY (course_id, skill_id)
);

CREATE TABLE IF NOT EXISTS lms.user_skills (
    user_id     bigint NOT NULL REFERENCES lms.users (id),
    skill_id    bigint NOT NULL REFERENCES lms.skills (id),
    level       integer NOT NULL CHECK (level BETWEEN 1 AND 5),
    assessed_at timestamptz NOT NULL,
    PRIMARY KEY (user_id, skill_id)
);

CREATE TABLE IF NOT EXISTS lms.invoices (
    id          bigint PRIMARY KEY,
    client_id   text NOT NULL,
    branch_id   text NOT NULL,
    number      text NOT NULL UNIQUE,
    issued_at   timestamptz NOT NULL,
    due_at      timestamptz NOT NULL,
    status      text NOT NULL CHECK (status IN ('draft', 'sent', 'paid', 'overdue')),
    currency    char(3) NOT NULL,
    total_cents bigint NOT NULL DEFAULT 0 CHECK (total_cents >= 0),
    CONSTRAINT invoices_branch_fk FOREIGN KEY (client_id, branch_id)
        REFERENCES lms.branches (client_id, id)
);

CREATE TABLE IF NOT EXISTS lms.invoice_lines (
    id          bigint PRIMARY KEY,
    invoice_id  bigint NOT NULL REFERENCES lms.invoices (id) ON DELETE CASCADE,
    course_id   bigint REFERENCES lms.courses (id),
    description text NOT NULL,
    quantity    integer NOT NULL CHECK (quantity > 0),
    unit_cents  integer NOT NULL CHECK (unit_cents >= 0)
);
