-- Who requested a live job: the requester digests (dataplane/bff/auth/tokens.py,
-- requester_of: client and user id) of the POSTs that inserted it or attached to it,
-- each once. Only a requester may withdraw, once; the job is cancelled when every one
-- of them has. NULL for rows enqueued without a requester (by an older BFF, the CLI,
-- the API without one): those keep the count of 0010 (withdraw once, the last cancels).

ALTER TABLE maestro_queues ADD COLUMN IF NOT EXISTS requested_by text[];
