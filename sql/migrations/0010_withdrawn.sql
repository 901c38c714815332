-- Who has withdrawn from a live job. A requester (a digest of its client and user id,
-- named by its URL token or bearer JWT) withdraws once: a repeated DELETE must not
-- count again and cancel the job under the requesters still waiting on it. NULL
-- until the first withdrawal: rows nobody withdraws from store nothing more.

ALTER TABLE maestro_queues ADD COLUMN IF NOT EXISTS withdrawn text[];
