-- An operator cancels a running job (issue #41): its worker cancels the execution and
-- reports the attempt as 'cancelled', an outcome of its own (neither a lost lease nor
-- a failure). The check only widens: every stored row meets it already, so it is added
-- NOT VALID and worker_runs is not scanned under this migration's lock.

ALTER TABLE worker_runs DROP CONSTRAINT IF EXISTS worker_runs_outcome_check;
ALTER TABLE worker_runs ADD CONSTRAINT worker_runs_outcome_check
    CHECK (outcome IN ('done', 'error', 'failed', 'poison', 'lost', 'released', 'cancelled'))
    NOT VALID;
