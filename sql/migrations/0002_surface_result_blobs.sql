-- Claim-check storage for results too large to inline (and for binary
-- results such as PDFs). Written in the same transaction as the job's
-- completion; read by the BFF's blob route; reaped after expiry.

CREATE TABLE IF NOT EXISTS surface_result_blobs (
    id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    job_id       uuid        NOT NULL,
    content_type text        NOT NULL,
    data         bytea       NOT NULL,
    size         bigint      NOT NULL CHECK (size >= 0),
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS surface_result_blobs_job ON surface_result_blobs (job_id);
CREATE INDEX IF NOT EXISTS surface_result_blobs_expiry ON surface_result_blobs (expires_at);
