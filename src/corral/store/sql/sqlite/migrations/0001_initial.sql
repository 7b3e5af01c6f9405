-- corral schema, version 1 (SQLite).
CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

-- One row per incarnation: a terminated id registering again gets a new row.
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
    live_window        REAL NOT NULL,
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

-- Task ids are never reused (tasks are never deleted).
CREATE TABLE tasks (
    id            INTEGER PRIMARY KEY,
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
-- The claim index (sort_key = created_at - 60 * priority points): pending tasks in score order, without role bonus.
CREATE INDEX tasks_ready ON tasks (sort_key, created_at, id) WHERE status = 'pending';
CREATE INDEX tasks_holder ON tasks (assigned_to, id) WHERE status = 'in_progress';

-- The role heads: one row per pending task and role it matches, in the same order.
-- The best task for a role is the better of this head (+ bonus) and tasks_ready's.
CREATE TABLE ready (
    role       TEXT NOT NULL,
    sort_key   REAL NOT NULL,
    created_at REAL NOT NULL,
    task_id    INTEGER NOT NULL,
    PRIMARY KEY (role, sort_key, created_at, task_id)
) WITHOUT ROWID;

-- seq is the cursor; pruning always keeps the newest event, so seq never goes back.
CREATE TABLE events (
    seq     INTEGER PRIMARY KEY,
    ts      REAL NOT NULL,
    kind    TEXT NOT NULL,
    node_id TEXT,
    task_id INTEGER,
    data    TEXT NOT NULL DEFAULT '{}'
);
