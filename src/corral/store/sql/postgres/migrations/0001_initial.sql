-- corral schema, version 1 (PostgreSQL).
-- Timestamps are epoch seconds (double precision), JSON is text (parsed by the adapter).
CREATE TABLE settings (
    key   text PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

-- One row per incarnation: a terminated id registering again gets a new row.
CREATE TABLE nodes (
    incarnation        bigserial PRIMARY KEY,
    id                 text NOT NULL,
    role               text NOT NULL,
    model              text,
    strength           text,
    status             text NOT NULL,
    current_task_id    bigint,
    idle_since         double precision,
    last_activity      double precision NOT NULL,
    last_heartbeat     double precision,
    heartbeat_interval double precision,
    live_window        double precision NOT NULL,
    dead_at            double precision NOT NULL,
    health             text,
    heartbeat          text NOT NULL DEFAULT '{}',
    host               text,
    pid                bigint,
    cursor             bigint NOT NULL DEFAULT 0,
    registered_at      double precision NOT NULL,
    terminated_at      double precision
);
CREATE UNIQUE INDEX nodes_live_id ON nodes (id) WHERE status <> 'terminated';
CREATE INDEX nodes_by_id ON nodes (id, incarnation);
CREATE INDEX nodes_dead_at ON nodes (dead_at) WHERE status <> 'terminated';

-- Task ids are never reused (tasks are never deleted).
CREATE TABLE tasks (
    id            bigserial PRIMARY KEY,
    title         text NOT NULL,
    description   text NOT NULL DEFAULT '',
    priority      text NOT NULL,
    role          text,
    roles         text NOT NULL DEFAULT '',
    status        text NOT NULL,
    assigned_to   text,
    epoch         bigint NOT NULL DEFAULT 0,
    attempts      integer NOT NULL DEFAULT 0,
    max_attempts  integer NOT NULL,
    sort_key      double precision NOT NULL,
    created_at    double precision NOT NULL,
    claimed_at    double precision,
    updated_at    double precision NOT NULL,
    finished_at   double precision,
    result        text,
    error         text
);
-- The claim index (sort_key = created_at - 60 * priority points): pending tasks in score order, without role bonus.
CREATE INDEX tasks_ready ON tasks (sort_key, created_at, id) WHERE status = 'pending';
CREATE INDEX tasks_holder ON tasks (assigned_to, id) WHERE status = 'in_progress';
CREATE INDEX tasks_status ON tasks (status, id);

-- The role heads: one row per pending task and role it matches, in the same order.
-- The best task for a role is the better of this head (+ bonus) and tasks_ready's.
CREATE TABLE ready (
    role       text NOT NULL,
    sort_key   double precision NOT NULL,
    created_at double precision NOT NULL,
    task_id    bigint NOT NULL,
    PRIMARY KEY (role, sort_key, created_at, task_id)
);

-- seq is the cursor; pruning always keeps the newest event, so seq never goes back.
CREATE TABLE events (
    seq     bigserial PRIMARY KEY,
    ts      double precision NOT NULL,
    kind    text NOT NULL,
    node_id text,
    task_id bigint,
    data    text NOT NULL DEFAULT '{}'
);
CREATE INDEX events_ts ON events (ts);
