-- corral schema, version 10 (SQLite): claims' idempotency keys.
--
-- A claim sent with a key (the worker SDK's, per call, the same when the call is sent
-- again after its answer was lost) records here, in its own transaction, what it took:
-- a claim sent again with that key returns the same task instead of taking another
-- (corral.outage). task_id is NULL when nothing was taken; done_id is the task a
-- complete_and_claim finished (a claim that took nothing records nothing). Kept 10
-- minutes (claimkeys.CLAIM_KEY_SECONDS), pruned by the keyed claims themselves.
CREATE TABLE claim_keys (
    node_id    TEXT NOT NULL,
    key        TEXT NOT NULL,
    task_id    INTEGER,
    epoch      INTEGER,
    done_id    INTEGER,
    created_at REAL NOT NULL,
    PRIMARY KEY (node_id, key)
) WITHOUT ROWID;
CREATE INDEX claim_keys_created_at ON claim_keys (created_at);
