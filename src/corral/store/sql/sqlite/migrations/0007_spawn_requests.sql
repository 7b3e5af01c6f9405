-- corral schema, version 7 (SQLite): spawn requests (corral.store.sqlspawn).
--
-- A pool in "ask" mode wants a member: one request is one spawn. An operator (or a
-- manager agent) accepts or declines it; the pool spawns an accepted one and notes
-- the member it became. (IF NOT EXISTS: a store rewound to an older version by hand
-- re-runs the migrations after it.)
CREATE TABLE IF NOT EXISTS spawn_requests (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    pool         TEXT NOT NULL,
    role         TEXT NOT NULL,
    status       TEXT NOT NULL DEFAULT 'pending',
    reason       TEXT NOT NULL DEFAULT '',
    requested_by TEXT NOT NULL,
    decided_by   TEXT,
    member       TEXT,
    created_at   REAL NOT NULL,
    decided_at   REAL,
    spawned_at   REAL
);
CREATE INDEX IF NOT EXISTS spawn_requests_by_status ON spawn_requests (status, id);
