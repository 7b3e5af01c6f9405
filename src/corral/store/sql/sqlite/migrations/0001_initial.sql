-- corral schema, version 1 (SQLite).
CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE nodes (
    incarnation        INTEGER PRIMARY KEY AUTOINCREMENT,
    id                 TEXT NOT NULL,
    role               TEXT NOT NULL,
    model              TEXT,
    strength           TEXT,
    status             TEXT NOT NULL,
    current_task_id    INTEGER,
    idle_since         REAL,
    last_activity      REAL NOT NULL,
    last_heartbeat     REAL,
    heartbeat_interval REAL,
    live_window             REAL NOT NULL,
    dead_at            REAL NOT NULL,
    health             TEXT,
    heartbeat          TEXT NOT NULL DEFAULT '{}',
    host               TEXT,
    pid                INTEGER,
    cursor             INTEGER NOT NULL DEFAULT 0,
    registered_at      REAL NOT NULL,
    terminated_at      REAL
);
CREATE UNIQUE INDEX nodes_live_id ON nodes (id) WHERE status <> 'terminated';
CREATE INDEX nodes_by_id ON nodes (id, incarnation);
CREATE INDEX nodes_dead_at ON nodes (dead_at) WHERE status <> 'terminated';
CREATE INDEX nodes_idle_since ON nodes (idle_since)
    WHERE status = 'idle' AND role <> 'bootstrap_manager';

CREATE TABLE tasks (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    title         TEXT NOT NULL,
    description   TEXT NOT NULL DEFAULT '',
    priority      TEXT NOT NULL,
    role          TEXT,
    roles         TEXT NOT NULL DEFAULT '',
    status        TEXT NOT NULL,
    assigned_to   TEXT,
    epoch         INTEGER NOT NULL DEFAULT 0,
    attempts      INTEGER NOT NULL DEFAULT 0,
    max_attempts  INTEGER NOT NULL,
    sort_key      REAL NOT NULL,
    created_at    REAL NOT NULL,
    claimed_at    REAL,
    updated_at    REAL NOT NULL,
    finished_at   REAL,
    result        TEXT,
    error         TEXT
);
CREATE INDEX tasks_status ON tasks (status, id);
CREATE INDEX tasks_holder ON tasks (assigned_to) WHERE status = 'in_progress';

-- The claim index: one row per pending task under role '*', and one more under each
-- role the task matches. The best task for a role is the better of two index heads.
CREATE TABLE ready (
    role       TEXT NOT NULL,
    sort_key   REAL NOT NULL,
    created_at REAL NOT NULL,
    task_id    INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    PRIMARY KEY (role, sort_key, created_at, task_id)
) WITHOUT ROWID;
CREATE INDEX ready_task ON ready (task_id);

CREATE TABLE events (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    ts      REAL NOT NULL,
    kind    TEXT NOT NULL,
    node_id TEXT,
    task_id INTEGER,
    data    TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX events_ts ON events (ts);
