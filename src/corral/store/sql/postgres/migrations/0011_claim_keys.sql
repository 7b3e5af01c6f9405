-- corral schema, version 11 (PostgreSQL): claims' idempotency keys.
--
-- A claim sent with a key (the worker SDK's, per call, the same when the call is sent
-- again after its answer was lost) records here, in its own statement, what it took:
-- a claim sent again with that key returns the same task instead of taking another
-- (corral.outage). task_id is NULL when nothing was taken; done_id is the task a
-- complete_and_claim finished (a claim that took nothing records nothing). Kept 10 minutes (claimkeys.CLAIM_KEY_SECONDS), pruned
-- by the keyed claims themselves.
CREATE TABLE claim_keys (
    node_id    text NOT NULL,
    key        text NOT NULL,
    task_id    bigint,
    epoch      bigint,
    done_id    bigint,
    created_at double precision NOT NULL,
    PRIMARY KEY (node_id, key)
);
CREATE INDEX claim_keys_created_at ON claim_keys (created_at);
