-- corral schema (PostgreSQL): the whole current schema. migrations/ must produce exactly this.
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
-- The monitor's deadlines, read from index heads (the earliest death, the earliest idle
-- start); its passes range-scan only the nodes past their deadline.
CREATE INDEX nodes_dead_at ON nodes (dead_at) WHERE status <> 'terminated';
CREATE INDEX nodes_idle_since ON nodes (idle_since)
    WHERE status = 'idle' AND role <> 'bootstrap_manager';

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
    error         text,
    -- Tasks with time and order (migration 0016): its run's limit, its retries'
    -- backoff, its not-before time and the tasks it depends on (as given); when a
    -- scheduled task becomes pending; how many of its dependencies are not done, how
    -- many tasks wait on it; the node the monitor last took it back from.
    timeout       double precision,
    retry_backoff double precision,
    not_before    double precision,
    depends_on    text NOT NULL DEFAULT '',
    ready_at      double precision,
    waiting_on    integer NOT NULL DEFAULT 0,
    dependents    integer NOT NULL DEFAULT 0,
    taken_from    text,
    -- Progress and sessions (migration 0017, docs/guardrails.md): the UUID the first
    -- claim fixes; the task's own progress limit; the attempt's last progress report;
    -- when the attempt is stuck without progress (NULL: no limit, or flagged already)
    -- and since when it is flagged stuck.
    session_id       text,
    progress_timeout double precision,
    progress_at      double precision,
    progress_note    text,
    stuck_at         double precision,
    stuck_since      double precision,
    -- Its usage's sums (migration 0020, docs/guardrails.md): every report on it
    -- adds to them, a completion's in its own statement.
    usage_input_tokens  bigint NOT NULL DEFAULT 0,
    usage_output_tokens bigint NOT NULL DEFAULT 0,
    usage_cost_micros   bigint NOT NULL DEFAULT 0,
    usage_reports       bigint NOT NULL DEFAULT 0
);
-- The claim index (sort_key = created_at - 60 * priority points): pending tasks in score order, without role bonus.
CREATE INDEX tasks_ready ON tasks (sort_key, created_at, id) WHERE status = 'pending';
CREATE INDEX tasks_holder ON tasks (assigned_to, id) WHERE status = 'in_progress';
-- The monitor's next stuck deadline: the head of the tasks in progress with one.
CREATE INDEX tasks_stuck_at ON tasks (stuck_at)
    WHERE stuck_at IS NOT NULL AND status = 'in_progress';
-- A task not ready yet is outside the claim's indexes (its status 'scheduled' or
-- 'blocked'): the monitor makes a scheduled one pending at the head of tasks_ready_at
-- and takes a run back at the head of tasks_timeout_at (migration 0016).
CREATE INDEX tasks_ready_at ON tasks (ready_at) WHERE status = 'scheduled';
CREATE INDEX tasks_timeout_at ON tasks ((claimed_at + timeout))
    WHERE status = 'in_progress' AND timeout IS NOT NULL;
-- A task's dependencies, by dependency (task_id waits on dep_id).
CREATE TABLE task_deps (
    dep_id  bigint NOT NULL,
    task_id bigint NOT NULL,
    PRIMARY KEY (dep_id, task_id)
);
-- Finished tasks by status (pending and in-progress ones have the two above).
CREATE INDEX tasks_finished ON tasks (status, id)
    WHERE status <> 'pending' AND status <> 'in_progress';

-- The role heads: one row per pending task and role it matches, in the same order.
-- The best task for a role is the better of this head (+ bonus) and tasks_ready's.
CREATE TABLE ready (
    role       text NOT NULL,
    sort_key   double precision NOT NULL,
    created_at double precision NOT NULL,
    task_id    bigint NOT NULL,
    PRIMARY KEY (role, sort_key, created_at, task_id)
);

-- The event number of a transaction's events: (its transaction id << 20) + n.
CREATE FUNCTION corral_event_seqs(n integer) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    used bigint := coalesce(nullif(current_setting('corral.event_n', true), ''), '0')::bigint;
BEGIN
    IF used + n > 1048576 THEN
        RAISE EXCEPTION 'corral: more than 1048576 events in one transaction';
    END IF;
    PERFORM set_config('corral.event_n', (used + n)::text, true);
    RETURN (pg_current_xact_id()::text::bigint << 20) + used;
END
$$;

-- seq is the cursor: it follows transaction ids, and readers only return events of
-- transactions older than any still in flight (events_since), so a cursor never
-- passes an event that commits later. Pruning keeps the newest event.
CREATE TABLE events (
    seq     bigint PRIMARY KEY DEFAULT corral_event_seqs(1),
    ts      double precision NOT NULL,
    kind    text NOT NULL,
    node_id text,
    task_id bigint,
    data    text NOT NULL DEFAULT '{}'
);

-- The horizon of the event reads (queries.sql: event_horizon) for snapshot s: every
-- event below it that ever commits is visible in s. The least of s's xmax, the
-- reader's own transaction and the oldest transaction of s still in flight that may
-- be ours. Exact under READ COMMITTED (each statement here takes a new snapshot);
-- under REPEATABLE READ a transaction of s not found running counts as ours.
CREATE FUNCTION corral_event_horizon(s pg_snapshot) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    -- Running transactions that never write here: those of other databases (and
    -- their prepared ones), and autovacuum's.
    others bigint[];
    x bigint := least(pg_snapshot_xmax(s)::text::bigint,
                      pg_current_xact_id_if_assigned()::text::bigint);
BEGIN
    PERFORM pg_stat_clear_snapshot();  -- not a list cached earlier in this transaction
    others := ARRAY(
        SELECT a.backend_xid::text::bigint FROM pg_stat_get_activity(NULL) AS a
        WHERE a.backend_xid IS NOT NULL
          AND (a.datid <> (SELECT oid FROM pg_database WHERE datname = current_database())
               OR a.backend_type = 'autovacuum worker')
        UNION ALL
        SELECT p.transaction::text::bigint FROM pg_prepared_xacts AS p
        WHERE p.database <> current_database());
    -- The oldest other transaction of s that may still add events here. This
    -- statement's snapshot is taken after the list above, so one of s's transactions
    -- missing from it has ended by now: if its events are here now, it is ours and
    -- committed after s; if not, it never writes here. One still running may be ours.
    -- (Under REPEATABLE READ this snapshot is s: every one counts as running.)
    SELECT least(x, min(v)) INTO x
    FROM (SELECT v::text::bigint AS v FROM pg_snapshot_xip(s) AS v) AS xip
    WHERE v < x AND v % 4294967296 <> ALL (others)
      AND (NOT pg_visible_in_snapshot(v::text::xid8, pg_current_snapshot())
           OR EXISTS (SELECT 1 FROM events WHERE seq >= v << 20 AND seq < (v + 1) << 20));
    -- corral.event_floor: a horizon read exactly just before this transaction began
    -- (PostgresStore._read_latest), valid for every later snapshot.
    RETURN greatest(x << 20,
                    nullif(current_setting('corral.event_floor', true), '')::bigint);
END
$$;

-- The supervised processes: each host's supervisor replaces its rows whole
-- (report_processes).
CREATE TABLE processes (
    host        text NOT NULL,
    agent       text NOT NULL,
    state       text NOT NULL,
    pid         bigint,
    restarts    bigint NOT NULL DEFAULT 0,
    started_at  double precision,
    last_beat   double precision,
    flags       text NOT NULL DEFAULT '[]',
    last_exit   text,
    reported_at double precision NOT NULL,
    PRIMARY KEY (host, agent)
);
-- A supervisor's inbox: the process_action_requested events naming its host.
CREATE INDEX events_process_actions ON events (((data::jsonb) ->> 'host'), seq)
    WHERE kind = 'process_action_requested';

-- The live-node count (meta 'live_nodes': nodes whose status is not 'terminated'),
-- kept by triggers in the same transaction as the node changes (deferred to the commit,
-- so the counter row is the last lock a transaction takes).
INSERT INTO meta (key, value) VALUES ('live_nodes', '0');

CREATE FUNCTION corral_live_nodes() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE meta SET value = (value::bigint + CASE
        WHEN TG_OP = 'INSERT' THEN 1
        WHEN TG_OP = 'DELETE' THEN -1
        WHEN NEW.status <> 'terminated' THEN 1
        ELSE -1 END)::text
    WHERE key = 'live_nodes';
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER nodes_live_insert AFTER INSERT ON nodes
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.status <> 'terminated') EXECUTE FUNCTION corral_live_nodes();
CREATE CONSTRAINT TRIGGER nodes_live_update AFTER UPDATE OF status ON nodes
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN ((OLD.status <> 'terminated') <> (NEW.status <> 'terminated'))
    EXECUTE FUNCTION corral_live_nodes();
CREATE CONSTRAINT TRIGGER nodes_live_delete AFTER DELETE ON nodes
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.status <> 'terminated') EXECUTE FUNCTION corral_live_nodes();

-- Workflow runs reported by their hosts (corral.store.sqlworkflows).
--
-- A host declares the workflows it serves (workflow_hosts, seen_at refreshed by its
-- polls). A handler is one run: claimable by a host serving its workflow from
-- claim_at on (a new run at once; a released run when an event arrives or at its
-- earliest waiter deadline). handler_inbox holds the events sent and not yet taken
-- by the run's host.
CREATE TABLE workflow_hosts (
    workflow           text NOT NULL,
    host               text NOT NULL,
    idle_release_after double precision,
    seen_at            double precision NOT NULL,
    PRIMARY KEY (workflow, host)
);
CREATE INDEX workflow_hosts_host ON workflow_hosts (host);
CREATE TABLE handlers (
    handler_id      text PRIMARY KEY,
    workflow        text NOT NULL,
    host            text,
    status          text NOT NULL,
    idle_since      double precision,
    waiters         text NOT NULL DEFAULT '[]',
    wake_at         double precision,
    claim_at        double precision,
    release_after   double precision,
    start           text NOT NULL DEFAULT '{}',
    checkpoint      text,
    result          text,
    error           text,
    resident_reason text,
    resumes         bigint NOT NULL DEFAULT 0,
    created_at      double precision NOT NULL,
    updated_at      double precision NOT NULL,
    released_at     double precision,
    finished_at     double precision,
    release_requested_at double precision
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
    seq        bigserial PRIMARY KEY,
    handler_id text NOT NULL,
    event_type text NOT NULL,
    data       text NOT NULL,
    sent_at    double precision NOT NULL
);
CREATE INDEX handler_inbox_handler ON handler_inbox (handler_id, seq);
-- The activation scheduler (corral.scheduler): agents, their inboxes, the activation
-- leases, the runners' modes; see migrations/0006_scheduler.sql.
CREATE TABLE agents (
    id                text COLLATE "C" PRIMARY KEY,
    config            text NOT NULL DEFAULT '{}',
    unread            bigint NOT NULL DEFAULT 0,
    last_activated_at double precision,
    activation_count  bigint NOT NULL DEFAULT 0,
    held_by           text,
    epoch             bigint NOT NULL DEFAULT 0,
    min_interval      double precision,
    next_due_at       double precision,
    next_due_task     text,
    cap_day           bigint NOT NULL DEFAULT 0,
    posts_today       bigint NOT NULL DEFAULT 0,
    comments_today    bigint NOT NULL DEFAULT 0,
    created_at        double precision NOT NULL,
    updated_at        double precision NOT NULL
);
CREATE INDEX agents_inbox ON agents (unread DESC, last_activated_at ASC NULLS FIRST, id)
    WHERE held_by IS NULL AND unread > 0;
CREATE INDEX agents_due ON agents (next_due_at, id)
    WHERE held_by IS NULL AND next_due_at IS NOT NULL;
CREATE INDEX agents_stale ON agents (last_activated_at ASC NULLS FIRST, id)
    WHERE held_by IS NULL AND unread = 0 AND min_interval IS NULL;
CREATE INDEX agents_stale_own ON agents (last_activated_at ASC NULLS FIRST, id)
    WHERE held_by IS NULL AND unread = 0 AND min_interval IS NOT NULL;

-- An agent's inbox; read items stay (read_at set) for the record.
CREATE TABLE notifications (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent_id   text COLLATE "C" NOT NULL,
    payload    text NOT NULL,
    created_at double precision NOT NULL,
    read_at    double precision
);
CREATE INDEX notifications_unread ON notifications (agent_id, id) WHERE read_at IS NULL;
CREATE INDEX notifications_unread_age ON notifications (created_at) WHERE read_at IS NULL;

-- The live activation leases: one per agent at most (the UNIQUE backstop), gone when
-- released or expired. Identity ids are never reused, so a late release of an old
-- assignment finds nothing to release.
CREATE TABLE activations (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent_id      text COLLATE "C" NOT NULL UNIQUE,
    runner_id     text NOT NULL,
    mode          text NOT NULL,
    kind          text NOT NULL,
    epoch         bigint NOT NULL,
    task          text,
    due_at        double precision,
    inbox_upto    bigint,
    posts_left    bigint,
    comments_left bigint,
    claimed_at    double precision NOT NULL,
    expires_at    double precision NOT NULL
);
CREATE INDEX activations_expiry ON activations (expires_at);
CREATE INDEX activations_runner ON activations (runner_id);

-- The mode each runner last asked in (for /metrics).
CREATE TABLE runners (
    id      text PRIMARY KEY,
    mode    text NOT NULL,
    seen_at double precision NOT NULL
);

-- An activation lives while its runner's node does: the node's end (termination,
-- death, retirement) brings its activations' expiry forward to that moment, and the
-- monitor clears them at that deadline.
CREATE FUNCTION corral_end_activations() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE activations
    SET expires_at = least(expires_at, coalesce(NEW.terminated_at, NEW.last_activity))
    WHERE runner_id = NEW.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER nodes_end_activations AFTER UPDATE OF status ON nodes
    FOR EACH ROW WHEN (NEW.status = 'terminated' AND OLD.status <> 'terminated')
    EXECUTE FUNCTION corral_end_activations();
-- Spawn requests: a pool in "ask" mode waits for an operator's yes (one request,
-- one spawn).
CREATE TABLE spawn_requests (
    id           bigserial PRIMARY KEY,
    pool         text NOT NULL,
    role         text NOT NULL,
    status       text NOT NULL DEFAULT 'pending',
    reason       text NOT NULL DEFAULT '',
    requested_by text NOT NULL,
    decided_by   text,
    member       text,
    created_at   double precision NOT NULL,
    decided_at   double precision,
    spawned_at   double precision
);
CREATE INDEX spawn_requests_by_status ON spawn_requests (status, id);
-- Claims' idempotency keys: what a keyed claim took, for the same claim sent again.
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
-- Named tokens: only each token's SHA-256 is kept, looked up per request by it.
CREATE TABLE tokens (
    id           bigserial PRIMARY KEY,
    name         text NOT NULL UNIQUE,
    role         text NOT NULL,
    hash         text NOT NULL UNIQUE,
    created_at   double precision NOT NULL,
    created_by   text NOT NULL,
    last_used_at double precision
);

-- A dependency's completion makes the tasks waiting only on it ready, in the same
-- transaction, and wakes waiting claims (migration 0016). The trigger fires on a
-- finishing statement (every one sets finished_at; a claim sets none, so a claim
-- never evaluates it) of a task others wait on; the function goes on only for a
-- completion (migration 0021).
CREATE FUNCTION corral_release_dependents() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    woken integer;
BEGIN
    IF NEW.status <> 'done' OR OLD.status = 'done' THEN
        RETURN NULL;  -- failed, cancelled or requeued: nothing is released
    END IF;
    -- The completion's own statement numbered its events (xid << 20) + 0 and + 1
    -- without counting them (the hot statements'): these come after them.
    IF coalesce(nullif(current_setting('corral.event_n', true), ''), '0')::bigint < 2 THEN
        PERFORM set_config('corral.event_n', '2', true);
    END IF;
    WITH freed AS (
        UPDATE tasks t SET waiting_on = t.waiting_on - 1,
            status = CASE WHEN t.waiting_on > 1 THEN 'blocked'
                          WHEN t.ready_at IS NULL OR t.ready_at <= NEW.updated_at
                              THEN 'pending'
                          ELSE 'scheduled' END,
            updated_at = CASE WHEN t.waiting_on > 1 THEN t.updated_at ELSE NEW.updated_at END
        FROM task_deps d
        WHERE d.dep_id = NEW.id AND t.id = d.task_id AND t.status = 'blocked'
        RETURNING t.id, t.status, t.roles, t.sort_key, t.created_at
    ), heads AS (
        INSERT INTO ready (role, sort_key, created_at, task_id)
        SELECT r, f.sort_key, f.created_at, f.id
        FROM freed f, unnest(string_to_array(f.roles, ' ')) AS r
        WHERE f.status = 'pending' AND r <> ''
    ), ev AS (
        INSERT INTO events (ts, kind, task_id, data)
        SELECT NEW.updated_at, 'task_unblocked', f.id,
               jsonb_build_object('after', NEW.id, 'status', f.status)::text
        FROM freed f WHERE f.status <> 'blocked'
    )
    SELECT count(*) INTO woken FROM freed WHERE status = 'pending';
    IF woken > 0 THEN
        PERFORM pg_notify('corral_ready', '');
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER tasks_release_dependents AFTER UPDATE OF finished_at ON tasks
FOR EACH ROW WHEN (NEW.dependents > 0)
EXECUTE FUNCTION corral_release_dependents();

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
    start         double precision NOT NULL,
    node_id       text NOT NULL,
    role          text NOT NULL,
    model         text NOT NULL,
    pool          text,
    input_tokens  bigint NOT NULL DEFAULT 0,
    output_tokens bigint NOT NULL DEFAULT 0,
    cost_micros   bigint NOT NULL DEFAULT 0,
    reports       bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (start, node_id, role, model)
);
CREATE INDEX usage_hours_node ON usage_hours (node_id, start);
CREATE INDEX usage_hours_role ON usage_hours (role, start);
CREATE INDEX usage_hours_model ON usage_hours (model, start) WHERE model <> '';
CREATE INDEX usage_hours_pool ON usage_hours (pool, start) WHERE pool IS NOT NULL;
CREATE TABLE budget_marks (
    budget        text NOT NULL,
    window_start  double precision NOT NULL,
    mark          double precision NOT NULL,
    PRIMARY KEY (budget, window_start)
);
CREATE INDEX nodes_live_model ON nodes (model) WHERE terminated_at IS NULL;
