-- corral schema, version 6 (SQLite): workflow runs, their hosts and their inboxes.
--
-- Workflow runs reported by their hosts (corral.store.sqlworkflows).
--
-- A host declares the workflows it serves (workflow_hosts, seen_at refreshed by its
-- polls). A handler is one run: claimable by a host serving its workflow from
-- claim_at on (a new run at once; a released run when an event arrives or at its
-- earliest waiter deadline). handler_inbox holds the events sent and not yet taken
-- by the run's host.
CREATE TABLE workflow_hosts (
    workflow           TEXT NOT NULL,
    host               TEXT NOT NULL,
    idle_release_after REAL,
    seen_at            REAL NOT NULL,
    PRIMARY KEY (workflow, host)
) WITHOUT ROWID;
CREATE INDEX workflow_hosts_host ON workflow_hosts (host);
CREATE TABLE handlers (
    handler_id      TEXT PRIMARY KEY,
    workflow        TEXT NOT NULL,
    host            TEXT,
    status          TEXT NOT NULL,
    idle_since      REAL,
    waiters         TEXT NOT NULL DEFAULT '[]',
    wake_at         REAL,
    claim_at        REAL,
    release_after   REAL,
    start           TEXT NOT NULL DEFAULT '{}',
    checkpoint      TEXT,
    result          TEXT,
    error           TEXT,
    resident_reason TEXT,
    resumes         INTEGER NOT NULL DEFAULT 0,
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL,
    released_at     REAL,
    finished_at     REAL
);
CREATE INDEX handlers_idle ON handlers (idle_since) WHERE idle_since IS NOT NULL;
CREATE INDEX handlers_host_idle ON handlers (host, idle_since)
    WHERE status = 'running' AND idle_since IS NOT NULL;
CREATE INDEX handlers_claim ON handlers (workflow, claim_at) WHERE claim_at IS NOT NULL;
CREATE INDEX handlers_by_status ON handlers (status, created_at);
CREATE INDEX handlers_created ON handlers (created_at);
CREATE TABLE handler_inbox (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    handler_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    data       TEXT NOT NULL,
    sent_at    REAL NOT NULL
);
CREATE INDEX handler_inbox_handler ON handler_inbox (handler_id, seq);
