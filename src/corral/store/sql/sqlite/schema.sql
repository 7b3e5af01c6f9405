-- corral schema (SQLite): the whole current schema. migrations/ must produce exactly this.
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
-- A node is live while terminated_at is NULL (it is set exactly when its status becomes
-- 'terminated'). The partial indexes name terminated_at, not status: SQLite rewrites an
-- index's entry whenever an UPDATE sets a column its key or WHERE clause names, so an
-- idle <-> working flip leaves these two untouched.
CREATE UNIQUE INDEX nodes_live_id ON nodes (id) WHERE terminated_at IS NULL;
CREATE INDEX nodes_by_id ON nodes (id, incarnation);
-- The monitor's deadlines, read from index heads (the earliest death, the earliest idle
-- start); its passes range-scan only the nodes past their deadline.
CREATE INDEX nodes_dead_at ON nodes (dead_at) WHERE terminated_at IS NULL;
CREATE INDEX nodes_idle_since ON nodes (idle_since)
    WHERE status = 'idle' AND role <> 'bootstrap_manager';

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
    error         TEXT,
    claimed_role  TEXT, -- the role its last claim was for (the claim event names it)
    -- Tasks with time and order (migration 0016): its run's limit, its retries'
    -- backoff, its not-before time and the tasks it depends on (as given); when a
    -- scheduled task becomes pending; how many of its dependencies are not done, how
    -- many tasks wait on it; the node the monitor last took it back from.
    timeout       REAL,
    retry_backoff REAL,
    not_before    REAL,
    depends_on    TEXT NOT NULL DEFAULT '',
    ready_at      REAL,
    waiting_on    INTEGER NOT NULL DEFAULT 0,
    dependents    INTEGER NOT NULL DEFAULT 0,
    taken_from    TEXT,
    -- Progress and sessions (migration 0017, docs/guardrails.md): the UUID the first
    -- claim fixes; the task's own progress limit; the attempt's last progress report;
    -- when the attempt is stuck without progress (NULL: no limit, or flagged already)
    -- and since when it is flagged stuck.
    session_id       TEXT,
    progress_timeout REAL,
    progress_at      REAL,
    progress_note    TEXT,
    stuck_at         REAL,
    stuck_since      REAL,
    -- Its usage's sums (migration 0020, docs/guardrails.md): every report on it
    -- adds to them, a completion's in its own statement.
    usage_input_tokens  INTEGER NOT NULL DEFAULT 0,
    usage_output_tokens INTEGER NOT NULL DEFAULT 0,
    usage_cost_micros   INTEGER NOT NULL DEFAULT 0,
    usage_reports       INTEGER NOT NULL DEFAULT 0,
    -- Its completion's report, NULL when it made none (migration 0024): the usage
    -- roll-up reads it (corral.store.sqlite.usage).
    usage_last_input    INTEGER,
    usage_last_output   INTEGER,
    usage_last_micros   INTEGER
);
-- The claim index (sort_key = created_at - 60 * priority points): pending tasks in score order, without role bonus
-- (a pending task's holder is always NULL), and held tasks by holder. 'in_progress'
-- sorts just before 'pending': with few tasks held, a claim changes one index page.
CREATE INDEX tasks_open ON tasks (status, assigned_to, sort_key, created_at, id)
    WHERE status = 'pending' OR status = 'in_progress';
-- The monitor's next stuck deadline: the head of the tasks in progress with one.
CREATE INDEX tasks_stuck_at ON tasks (stuck_at)
    WHERE stuck_at IS NOT NULL AND status = 'in_progress';

-- A task not ready yet is outside the claim's indexes (its status 'scheduled' or
-- 'blocked'): the monitor makes a scheduled one pending at the head of tasks_ready_at
-- and takes a run back at the head of tasks_timeout_at (migration 0016).
CREATE INDEX tasks_ready_at ON tasks (ready_at) WHERE status = 'scheduled';
CREATE INDEX tasks_timeout_at ON tasks (claimed_at + timeout)
    WHERE status = 'in_progress' AND timeout IS NOT NULL;
-- A task's dependencies, by dependency (task_id waits on dep_id).
CREATE TABLE task_deps (
    dep_id  INTEGER NOT NULL,
    task_id INTEGER NOT NULL,
    PRIMARY KEY (dep_id, task_id)
) WITHOUT ROWID;

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

-- A claim's and a completion's bookkeeping (the holder's stamp and status, the event,
-- the role head) is done by TEMP triggers each SQLiteStore connection creates from
-- queries.sql (trigger_task_claimed, trigger_task_completed), where the rules of the
-- hot path are written once (migration 0012).

-- The supervised processes: each host's supervisor replaces its rows whole
-- (report_processes).
CREATE TABLE processes (
    host        TEXT NOT NULL,
    agent       TEXT NOT NULL,
    state       TEXT NOT NULL,
    pid         INTEGER,
    restarts    INTEGER NOT NULL DEFAULT 0,
    started_at  REAL,
    last_beat   REAL,
    flags       TEXT NOT NULL DEFAULT '[]',
    last_exit   TEXT,
    reported_at REAL NOT NULL,
    PRIMARY KEY (host, agent)
) WITHOUT ROWID;
-- A supervisor's inbox: the process_action_requested events naming its host.
CREATE INDEX events_process_actions ON events (json_extract(data, '$.host'), seq)
    WHERE kind = 'process_action_requested';

-- The live-node count (meta 'live_nodes': nodes whose terminated_at is NULL), kept by
-- triggers in the same transaction as the node changes.
INSERT INTO meta (key, value) VALUES ('live_nodes', '0');
-- The usage roll-up's mark (meta 'usage_rolled', migration 0023): the last event seq
-- whose completion report, if any, usage_hours has (corral.store.sqlite.usage).
INSERT INTO meta (key, value) VALUES ('usage_rolled', '0');

CREATE TRIGGER nodes_live_insert AFTER INSERT ON nodes
WHEN NEW.terminated_at IS NULL
BEGIN
    UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'live_nodes';
END;

CREATE TRIGGER nodes_live_update AFTER UPDATE OF terminated_at ON nodes
WHEN (OLD.terminated_at IS NULL) <> (NEW.terminated_at IS NULL)
BEGIN
    UPDATE meta SET value = CAST(value AS INTEGER)
        + (CASE WHEN NEW.terminated_at IS NULL THEN 1 ELSE -1 END)
    WHERE key = 'live_nodes';
END;

CREATE TRIGGER nodes_live_delete AFTER DELETE ON nodes
WHEN OLD.terminated_at IS NULL
BEGIN
    UPDATE meta SET value = CAST(value AS INTEGER) - 1 WHERE key = 'live_nodes';
END;


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
    finished_at     REAL,
    release_requested_at REAL
);
CREATE INDEX handlers_idle ON handlers (idle_since) WHERE idle_since IS NOT NULL;
CREATE INDEX handlers_host_idle ON handlers (host, idle_since)
    WHERE status = 'running' AND idle_since IS NOT NULL;
CREATE INDEX handlers_claim ON handlers (workflow, claim_at) WHERE claim_at IS NOT NULL;
CREATE INDEX handlers_by_status ON handlers (status, created_at);
CREATE INDEX handlers_created ON handlers (created_at);
CREATE INDEX handlers_release_requested ON handlers (host)
    WHERE release_requested_at IS NOT NULL;
CREATE TABLE handler_inbox (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    handler_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    data       TEXT NOT NULL,
    sent_at    REAL NOT NULL
);
CREATE INDEX handler_inbox_handler ON handler_inbox (handler_id, seq);
-- The activation scheduler (corral.scheduler): agents, their inboxes, the activation
-- leases, the runners' modes; see migrations/0005_scheduler.sql.
CREATE TABLE agents (
    id                TEXT PRIMARY KEY,
    config            TEXT NOT NULL DEFAULT '{}',
    unread            INTEGER NOT NULL DEFAULT 0,
    last_activated_at REAL,
    activation_count  INTEGER NOT NULL DEFAULT 0,
    held_by           TEXT,
    epoch             INTEGER NOT NULL DEFAULT 0,
    min_interval      REAL,
    next_due_at       REAL,
    next_due_task     TEXT,
    cap_day           INTEGER NOT NULL DEFAULT 0,
    posts_today       INTEGER NOT NULL DEFAULT 0,
    comments_today    INTEGER NOT NULL DEFAULT 0,
    created_at        REAL NOT NULL,
    updated_at        REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX agents_inbox ON agents (unread DESC, last_activated_at, id)
    WHERE held_by IS NULL AND unread > 0;
CREATE INDEX agents_due ON agents (next_due_at, id)
    WHERE held_by IS NULL AND next_due_at IS NOT NULL;
CREATE INDEX agents_stale ON agents (last_activated_at, id)
    WHERE held_by IS NULL AND unread = 0 AND min_interval IS NULL;
CREATE INDEX agents_stale_own ON agents (last_activated_at, id)
    WHERE held_by IS NULL AND unread = 0 AND min_interval IS NOT NULL;

-- An agent's inbox; read items stay (read_at set) for the record.
CREATE TABLE notifications (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id   TEXT NOT NULL,
    payload    TEXT NOT NULL,
    created_at REAL NOT NULL,
    read_at    REAL
);
CREATE INDEX notifications_unread ON notifications (agent_id, id) WHERE read_at IS NULL;
CREATE INDEX notifications_unread_age ON notifications (created_at) WHERE read_at IS NULL;

-- The live activation leases: one per agent at most (the UNIQUE backstop), gone when
-- released or expired. Ids are never reused (AUTOINCREMENT), so a late release of an
-- old assignment finds nothing to release.
CREATE TABLE activations (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id      TEXT NOT NULL UNIQUE,
    runner_id     TEXT NOT NULL,
    mode          TEXT NOT NULL,
    kind          TEXT NOT NULL,
    epoch         INTEGER NOT NULL,
    task          TEXT,
    due_at        REAL,
    inbox_upto    INTEGER,
    posts_left    INTEGER,
    comments_left INTEGER,
    claimed_at    REAL NOT NULL,
    expires_at    REAL NOT NULL
);
CREATE INDEX activations_expiry ON activations (expires_at);
CREATE INDEX activations_runner ON activations (runner_id);

-- The mode each runner last asked in (for /metrics).
CREATE TABLE runners (
    id      TEXT PRIMARY KEY,
    mode    TEXT NOT NULL,
    seen_at REAL NOT NULL
) WITHOUT ROWID;

-- An activation lives while its runner's node does: the node's end (termination,
-- death, retirement) brings its activations' expiry forward to that moment, and the
-- monitor clears them at that deadline.
CREATE TRIGGER nodes_end_activations AFTER UPDATE OF terminated_at ON nodes
WHEN OLD.terminated_at IS NULL AND NEW.terminated_at IS NOT NULL
BEGIN
    UPDATE activations SET expires_at = min(expires_at, NEW.terminated_at)
    WHERE runner_id = NEW.id;
END;
-- Spawn requests: a pool in "ask" mode waits for an operator's yes (one request,
-- one spawn).
CREATE TABLE spawn_requests (
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
CREATE INDEX spawn_requests_by_status ON spawn_requests (status, id);
-- Claims' idempotency keys: what a keyed claim took, for the same claim sent again.
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
-- Named tokens: only each token's SHA-256 is kept, looked up per request by it.
CREATE TABLE tokens (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    name         TEXT NOT NULL UNIQUE,
    role         TEXT NOT NULL,
    hash         TEXT NOT NULL UNIQUE,
    created_at   REAL NOT NULL,
    created_by   TEXT NOT NULL,
    last_used_at REAL
);

-- A dependency's completion makes the tasks waiting only on it ready, in the same
-- transaction (migration 0016), in two steps (0022): tasks_release_dependents, on
-- finished_at (every finishing statement sets it, no claim does), only notes the
-- completion of a task others wait on in task_releases, and that row's insert does
-- the release (task_releases_run) and deletes it: task_releases is empty between
-- statements. SQLite sets up the frame of every trigger a statement may fire before
-- testing its condition, at a cost in the size of the trigger's program: a completion
-- of a task nobody waits on pays for a one-row insert's, not for the release's.
CREATE TABLE task_releases (
    dep_id INTEGER NOT NULL,  -- the task just done
    at     REAL NOT NULL      -- its completion's time (its updated_at)
);

CREATE TRIGGER tasks_release_dependents AFTER UPDATE OF finished_at ON tasks
WHEN new.status = 'done' AND old.status <> 'done' AND new.dependents > 0
BEGIN
    INSERT INTO task_releases (dep_id, at) VALUES (new.id, new.updated_at);
END;

CREATE TRIGGER task_releases_run AFTER INSERT ON task_releases
BEGIN
    UPDATE tasks SET waiting_on = waiting_on - 1
    WHERE id IN (SELECT task_id FROM task_deps WHERE dep_id = new.dep_id) AND status = 'blocked';
    INSERT INTO ready (role, sort_key, created_at, task_id)
    SELECT r.value, t.sort_key, t.created_at, t.id
    FROM tasks t, json_each('["' || replace(t.roles, ' ', '","') || '"]') r
    WHERE t.id IN (SELECT task_id FROM task_deps WHERE dep_id = new.dep_id)
      AND t.status = 'blocked' AND t.waiting_on = 0 AND t.roles <> ''
      AND (t.ready_at IS NULL OR t.ready_at <= new.at);
    INSERT INTO events (ts, kind, task_id, data)
    SELECT new.at, 'task_unblocked', t.id,
           json_object('after', new.dep_id,
                       'status', CASE WHEN t.ready_at IS NULL OR t.ready_at <= new.at
                                      THEN 'pending' ELSE 'scheduled' END)
    FROM tasks t
    WHERE t.id IN (SELECT task_id FROM task_deps WHERE dep_id = new.dep_id)
      AND t.status = 'blocked' AND t.waiting_on = 0;
    UPDATE tasks SET status = CASE WHEN ready_at IS NULL OR ready_at <= new.at
                                   THEN 'pending' ELSE 'scheduled' END,
                     updated_at = new.at
    WHERE id IN (SELECT task_id FROM task_deps WHERE dep_id = new.dep_id)
      AND status = 'blocked' AND waiting_on = 0;
    DELETE FROM task_releases WHERE rowid = new.rowid;
END;

-- Usage and spend, budgets and per-model caps (docs/guardrails.md, corral.budgets).
--
-- usage_hours: the sums of the usage reports (complete_task, fail_task,
-- report_progress, heartbeat) per hour (start: the hour's first second) and reporting
-- node, carrying the node's role and model as registered when the report was written
-- ('' when it had none, or was not live) and its pool (a pool member is the node
-- '<pool>-<n>'). A report adds to its one row, in its operation's own transaction;
-- the sums of a scope (the cluster, role:R, model:M, pool:P, node:N) over a window are
-- computed at read from the window's hours, on the index of its column. A task's sums
-- are on its own row (tasks.usage_*). Cost is in micro-dollars so concurrent reports
-- sum exactly.
-- budget_marks: the highest threshold (0.8 or 1.0) each budget's current window has
-- been announced at, so a crossing is one event.
-- nodes_live_model: a capped model's live nodes, counted at registration.
CREATE TABLE usage_hours (
    start         REAL NOT NULL,
    node_id       TEXT NOT NULL,
    role          TEXT NOT NULL,
    model         TEXT NOT NULL,
    pool          TEXT,
    input_tokens  INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cost_micros   INTEGER NOT NULL DEFAULT 0,
    reports       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (start, node_id, role, model)
) WITHOUT ROWID;
CREATE INDEX usage_hours_node ON usage_hours (node_id, start);
CREATE INDEX usage_hours_role ON usage_hours (role, start);
CREATE INDEX usage_hours_model ON usage_hours (model, start) WHERE model <> '';
CREATE INDEX usage_hours_pool ON usage_hours (pool, start) WHERE pool IS NOT NULL;
CREATE TABLE budget_marks (
    budget        TEXT NOT NULL,
    window_start  REAL NOT NULL,
    mark          REAL NOT NULL,
    PRIMARY KEY (budget, window_start)
) WITHOUT ROWID;
CREATE INDEX nodes_live_model ON nodes (model) WHERE terminated_at IS NULL;
