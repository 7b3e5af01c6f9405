-- Named queries for the SQLite adapter. Parameters are :name.

-- name: settings_all
SELECT key, value FROM settings;

-- name: settings_put
INSERT INTO settings (key, value) VALUES (:key, :value)
ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- name: meta_get
SELECT value FROM meta WHERE key = :key;

-- name: meta_put
INSERT INTO meta (key, value) VALUES (:key, :value)
ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- name: node_live
SELECT * FROM nodes WHERE id = :id AND status <> 'terminated';

-- name: node_latest
SELECT *, (SELECT t.id FROM tasks t WHERE t.assigned_to = nodes.id AND t.status = 'in_progress'
        ORDER BY t.claimed_at DESC, t.id DESC LIMIT 1) AS held_task_id
FROM nodes WHERE id = :id ORDER BY incarnation DESC LIMIT 1;

-- name: nodes_live
SELECT *, (SELECT t.id FROM tasks t WHERE t.assigned_to = nodes.id AND t.status = 'in_progress'
        ORDER BY t.claimed_at DESC, t.id DESC LIMIT 1) AS held_task_id
FROM nodes WHERE status <> 'terminated' ORDER BY registered_at, incarnation;

-- name: nodes_all_latest
SELECT *, (SELECT t.id FROM tasks t WHERE t.assigned_to = nodes.id AND t.status = 'in_progress'
        ORDER BY t.claimed_at DESC, t.id DESC LIMIT 1) AS held_task_id
FROM nodes
WHERE incarnation = (SELECT max(incarnation) FROM nodes m WHERE m.id = nodes.id)
ORDER BY registered_at, incarnation;

-- name: nodes_count_live
-- The live-node count the triggers keep (one row read, whatever the fleet's size).
SELECT CAST(value AS INTEGER) AS n FROM meta WHERE key = 'live_nodes';

-- name: node_insert
INSERT INTO nodes (id, role, model, strength, status, idle_since, last_activity,
                   heartbeat_interval, live_window, dead_at, host, pid, cursor, registered_at)
VALUES (:id, :role, :model, :strength, :status, :idle_since, :now, :heartbeat_interval,
        :live_window, :dead_at, :host, :pid, :cursor, :now)
RETURNING *;

-- name: node_reregister
UPDATE nodes SET role = :role, model = :model, strength = :strength,
                 heartbeat_interval = :heartbeat_interval, live_window = :live_window,
                 dead_at = :dead_at, last_activity = :now,
                 host = coalesce(:host, host), pid = coalesce(:pid, pid)
WHERE incarnation = :incarnation
RETURNING *;

-- name: node_update_status
UPDATE nodes SET status = :status, current_task_id = :current_task_id,
                 idle_since = :idle_since, last_activity = :now,
                 dead_at = :now + live_window, terminated_at = :terminated_at
WHERE incarnation = :incarnation
RETURNING *;

-- name: node_touch
UPDATE nodes SET last_activity = :now, dead_at = :now + live_window
WHERE id = :id AND status <> 'terminated';

-- name: node_done_with
-- After a task is given up (the task's statement ran first): the node is done with it
-- (lifecycle.status_after_finishing: a working node holding no other task becomes idle, a
-- bootstrap manager stays working). Writes only when there is something to change:
-- the node named this task as its current one, it becomes idle, or its activity
-- stamp is due (lifecycle.stamp_due, encoded here).
UPDATE nodes SET
    idle_since = CASE WHEN status = 'working' AND role <> 'bootstrap_manager'
                           AND NOT EXISTS (SELECT 1 FROM tasks h WHERE h.assigned_to = :id
                                             AND h.status = 'in_progress' AND h.id <> :task_id)
                      THEN :now ELSE idle_since END,
    current_task_id = CASE WHEN current_task_id = :task_id
                                OR (status = 'working' AND role <> 'bootstrap_manager'
                                    AND NOT EXISTS (SELECT 1 FROM tasks h
                                                    WHERE h.assigned_to = :id
                                                      AND h.status = 'in_progress'
                                                      AND h.id <> :task_id))
                           THEN NULL ELSE current_task_id END,
    status = CASE WHEN status = 'working' AND role <> 'bootstrap_manager'
                       AND NOT EXISTS (SELECT 1 FROM tasks h WHERE h.assigned_to = :id
                                         AND h.status = 'in_progress' AND h.id <> :task_id)
                  THEN 'idle' ELSE status END,
    last_activity = :now, dead_at = :now + live_window
WHERE id = :id AND status <> 'terminated'
  AND (current_task_id = :task_id OR dead_at - :now < live_window * :stamp
       OR (status = 'working' AND role <> 'bootstrap_manager'
           AND NOT EXISTS (SELECT 1 FROM tasks h WHERE h.assigned_to = :id
                             AND h.status = 'in_progress' AND h.id <> :task_id)));

-- name: node_claim_state
SELECT incarnation, status, current_task_id, dead_at, live_window
FROM nodes WHERE id = :id AND status <> 'terminated';

-- name: node_held_task
SELECT id AS t FROM tasks WHERE assigned_to = :id AND status = 'in_progress'
ORDER BY claimed_at DESC, id DESC LIMIT 1;

-- name: node_heartbeat_steady
-- A beat that changes no health, in one guarded statement; no row: the node is not
-- live or its health changes (then the store reads it and records the change).
UPDATE nodes SET last_heartbeat = :now, heartbeat = :payload, health = :health,
                 dead_at = :now + live_window
WHERE id = :id AND status <> 'terminated' AND (:health IS NULL OR health IS :health)
RETURNING *;

-- name: node_heartbeat
UPDATE nodes SET last_heartbeat = :now, heartbeat = :payload, health = :health,
                 dead_at = :now + live_window
WHERE incarnation = :incarnation
RETURNING *;

-- name: node_set_cursor
UPDATE nodes SET cursor = :cursor, last_activity = :now, dead_at = :now + live_window
WHERE incarnation = :incarnation;

-- name: node_set_window
UPDATE nodes SET live_window = :live_window, dead_at = :dead_at WHERE incarnation = :incarnation;

-- name: node_terminate
UPDATE nodes SET status = 'terminated', current_task_id = NULL, idle_since = NULL,
                 terminated_at = :now
WHERE incarnation = :incarnation;

-- name: nodes_dead
SELECT * FROM nodes WHERE status <> 'terminated' AND dead_at <= :now
ORDER BY dead_at LIMIT :limit;

-- name: nodes_dead_left
SELECT 1 AS n FROM nodes WHERE status <> 'terminated' AND dead_at <= :now LIMIT 1;

-- name: nodes_idle_expired
SELECT * FROM nodes WHERE status = 'idle' AND role <> 'bootstrap_manager'
  AND idle_since <= :cutoff
ORDER BY idle_since LIMIT :limit;

-- name: nodes_idle_left
SELECT 1 AS n FROM nodes WHERE status = 'idle' AND role <> 'bootstrap_manager'
  AND idle_since <= :cutoff LIMIT 1;

-- name: next_dead_at
SELECT min(dead_at) AS t FROM nodes WHERE status <> 'terminated';

-- name: next_idle_since
SELECT min(idle_since) AS t FROM nodes WHERE status = 'idle' AND role <> 'bootstrap_manager';

-- name: task_insert
INSERT INTO tasks (title, description, priority, role, roles, status, max_attempts,
                   sort_key, created_at, updated_at)
VALUES (:title, :description, :priority, :role, :roles, 'pending', :max_attempts,
        :sort_key, :now, :now)
RETURNING *;

-- name: task_get
SELECT * FROM tasks WHERE id = :id;

-- name: tasks_pending
SELECT * FROM tasks WHERE status = 'pending' AND assigned_to IS NULL
ORDER BY sort_key, created_at, id LIMIT :limit;

-- name: tasks_in_progress
SELECT * FROM tasks WHERE status = 'in_progress' ORDER BY id LIMIT :limit;

-- name: tasks_by_status
SELECT * FROM tasks WHERE status = :status ORDER BY id DESC LIMIT :limit;

-- name: tasks_by_status_holder
SELECT * FROM tasks WHERE status = :status AND assigned_to = :assigned_to
ORDER BY id DESC LIMIT :limit;

-- name: tasks_all
SELECT * FROM tasks ORDER BY id DESC LIMIT :limit;

-- name: tasks_pending_all
SELECT * FROM tasks WHERE status = 'pending';

-- name: ready_insert
INSERT INTO ready (role, sort_key, created_at, task_id)
VALUES (:role, :sort_key, :created_at, :task_id);

-- name: ready_remove
DELETE FROM ready
WHERE role = :role AND sort_key = :sort_key AND created_at = :created_at AND task_id = :task_id;

-- name: ready_clear
DELETE FROM ready;

-- name: claim_take
-- The better of two index heads: the best task matching :role (its score carries the
-- role bonus, :bonus seconds of sort key) and the best pending task of any role; taken
-- only by a live node. The trigger task_claimed re-stamps the holder when due, records
-- the event and drops the role head.
UPDATE tasks SET status = 'in_progress', assigned_to = :node_id, epoch = epoch + 1,
                 attempts = attempts + 1, claimed_at = :now, updated_at = :now,
                 claimed_role = :role
WHERE status = 'pending' AND id = (
    SELECT task_id FROM (
        SELECT task_id, sort_key - :bonus AS k, created_at FROM (
            SELECT task_id, sort_key, created_at FROM ready WHERE role = :role
            ORDER BY sort_key, created_at, task_id LIMIT 1)
        UNION ALL
        SELECT task_id, sort_key AS k, created_at FROM (
            SELECT id AS task_id, sort_key, created_at FROM tasks
            WHERE status = 'pending' AND assigned_to IS NULL
            ORDER BY sort_key, created_at, id LIMIT 1)
    )
    ORDER BY k, created_at, task_id LIMIT 1)
  AND EXISTS (SELECT 1 FROM nodes WHERE id = :node_id AND status <> 'terminated')
RETURNING *;

-- name: task_complete
-- The trigger task_completed re-stamps the holder when due and records the event.
UPDATE tasks SET status = 'done', result = :result, error = NULL, finished_at = :now,
                 updated_at = :now
WHERE id = :id AND status = 'in_progress' AND assigned_to = :node_id
  AND (:epoch IS NULL OR epoch = :epoch)
RETURNING *;

-- name: task_fail_final
UPDATE tasks SET status = 'failed', error = :error, finished_at = :now, updated_at = :now
WHERE id = :id
RETURNING *;

-- name: task_requeue
UPDATE tasks SET status = 'pending', assigned_to = NULL, error = :error, updated_at = :now
WHERE id = :id
RETURNING *;

-- name: task_set_roles
UPDATE tasks SET roles = :roles WHERE id = :id;

-- name: assess_counts
SELECT
    (SELECT count(*) FROM tasks WHERE status = 'pending') AS pending,
    (SELECT count(*) FROM tasks WHERE status = 'in_progress') AS in_progress,
    (SELECT count(*) FROM nodes WHERE status <> 'terminated') AS active_count,
    (SELECT count(*) FROM nodes WHERE status = 'working' AND role <> 'bootstrap_manager')
        AS working,
    (SELECT count(*) FROM nodes WHERE status = 'idle') AS idle,
    (SELECT count(*) FROM tasks WHERE status = 'pending' AND roles = 'architect')
        AS architect_only,
    (SELECT id FROM nodes WHERE status <> 'terminated' AND role = 'bootstrap_manager'
        ORDER BY registered_at LIMIT 1) AS manager_id;

-- name: event_insert
INSERT INTO events (ts, kind, node_id, task_id, data)
VALUES (:ts, :kind, :node_id, :task_id, :data);

-- name: events_since
SELECT * FROM events WHERE seq > :since ORDER BY seq LIMIT :limit;

-- name: events_last
SELECT seq, ts FROM events ORDER BY seq DESC LIMIT 1;

-- name: events_prune
DELETE FROM events
WHERE seq < (SELECT coalesce((SELECT seq FROM events WHERE ts >= :cutoff ORDER BY seq LIMIT 1),
                             (SELECT max(seq) FROM events)));

-- name: last_heartbeat_any
SELECT max(last_heartbeat) AS t FROM nodes WHERE status <> 'terminated';

-- Row locks: SQLite's write transaction already excludes other writers, so these
-- are the plain reads; PostgreSQL's versions lock.

-- name: lock_registry
SELECT 1 AS locked;

-- name: node_live_for_update
SELECT * FROM nodes WHERE id = :id AND status <> 'terminated';

-- name: nodes_live_for_update
SELECT * FROM nodes WHERE status <> 'terminated';

-- name: task_held_for_update
SELECT * FROM tasks WHERE id = :id AND assigned_to = :node_id AND status = 'in_progress';

-- name: tasks_held_by_for_update
SELECT * FROM tasks WHERE assigned_to = :node_id AND status = 'in_progress' ORDER BY id;

-- name: tasks_by_holder
SELECT * FROM tasks WHERE assigned_to = :assigned_to ORDER BY id LIMIT :limit;

-- Alerts and the heartbeat metrics series (worker SDK): rows of the events table.

-- name: event_insert_returning
INSERT INTO events (ts, kind, node_id, task_id, data)
VALUES (:ts, :kind, :node_id, :task_id, :data)
RETURNING *;

-- name: samples_prune
DELETE FROM events
WHERE kind = 'heartbeat_sample' AND node_id = :node_id
  AND seq <= (SELECT seq FROM events WHERE kind = 'heartbeat_sample' AND node_id = :node_id
              ORDER BY seq DESC LIMIT 1 OFFSET :keep);

-- name: samples_latest
SELECT * FROM (
    SELECT * FROM events WHERE kind = 'heartbeat_sample' AND node_id = :node_id
    ORDER BY seq DESC LIMIT :limit
) AS s
ORDER BY seq;

-- Statistics for /metrics and /v1/stats (corral.store.stats).

-- name: stats_nodes
SELECT status, role, count(*) AS n FROM nodes n
WHERE incarnation = (SELECT max(incarnation) FROM nodes m WHERE m.id = n.id)
GROUP BY status, role;

-- name: stats_tasks
SELECT status, count(*) AS n, coalesce(sum(attempts), 0) AS attempts FROM tasks GROUP BY status;

-- name: stats_event_count
SELECT count(*) AS n FROM events WHERE kind = :kind;

-- name: stats_inbox
-- Each live node's inbox: the events after its cursor up to :last (events_last),
-- counted on the seq index and at most :cap of them (event numbers need not be
-- consecutive, so a difference of numbers is not a count).
SELECT n.id, (SELECT count(*) FROM (
    SELECT 1 FROM events e WHERE e.seq > n.cursor AND e.seq <= :last LIMIT :cap
) AS after) AS inbox
FROM nodes n WHERE n.status <> 'terminated';

-- name: node_beat_by_call
-- A call that counts as the node's heartbeat (Store.touch, the MCP tools): stamped as
-- a beat, its payload kept.
UPDATE nodes SET last_activity = :now, last_heartbeat = :now, dead_at = :now + live_window
WHERE id = :id AND status <> 'terminated';

-- name: task_release_claim
-- A claim handed back untouched (Store.release_claim): pending again, its attempt
-- undone; the epoch stays bumped (a lease number is never reused).
UPDATE tasks SET status = 'pending', assigned_to = NULL, attempts = attempts - 1,
                 updated_at = :now
WHERE id = :id
RETURNING *;

-- name: node_release_claim
-- The node as it was before the claim it hands back (:status, :idle_since,
-- :current_task_id), when the claim's change is still there (working, no current
-- task) and it holds no other task, or it was working already.
UPDATE nodes SET status = :status, idle_since = :idle_since,
                 current_task_id = :current_task_id
WHERE id = :id AND status = 'working' AND current_task_id IS NULL
  AND (:status = 'working'
       OR NOT EXISTS (SELECT 1 FROM tasks h WHERE h.assigned_to = :id
                        AND h.status = 'in_progress' AND h.id <> :task_id));

-- Supervised processes (corral.store.sqlprocs). ------------------------------------

-- name: lock_host_processes
-- SQLite's write transaction already excludes other reports; PostgreSQL locks the host.
SELECT 1 AS locked;

-- name: processes_of_host
SELECT * FROM processes WHERE host = :host ORDER BY agent;

-- name: processes_all
SELECT * FROM processes ORDER BY host, agent;

-- name: processes_clear_host
DELETE FROM processes WHERE host = :host;

-- name: process_insert
INSERT INTO processes (host, agent, state, pid, restarts, started_at, last_beat, flags,
                       last_exit, reported_at)
VALUES (:host, :agent, :state, :pid, :restarts, :started_at, :last_beat, :flags,
        :last_exit, :now)
RETURNING *;

-- name: process_get
SELECT * FROM processes WHERE host = :host AND agent = :agent;

-- name: process_actions_since
-- A supervisor's inbox, on the partial index events_process_actions.
SELECT * FROM events
WHERE kind = 'process_action_requested' AND json_extract(data, '$.host') = :host
  AND seq > :since
ORDER BY seq LIMIT :limit;

-- name: event_get
SELECT * FROM events WHERE seq = :seq;

-- Spawn requests (corral.store.sqlspawn) -----------------------------------------

-- name: spawn_request_insert
INSERT INTO spawn_requests (pool, role, status, reason, requested_by, created_at)
VALUES (:pool, :role, 'pending', :reason, :requested_by, :now)
RETURNING *;

-- name: spawn_request_get
SELECT * FROM spawn_requests WHERE id = :id;

-- name: spawn_request_decide
UPDATE spawn_requests SET status = :status, decided_by = :actor, decided_at = :now
WHERE id = :id AND status = 'pending'
RETURNING *;

-- name: spawn_request_fulfil
UPDATE spawn_requests SET member = :member, spawned_at = :now
WHERE id = :id AND status = 'accepted' AND member IS NULL
RETURNING *;

-- name: spawn_requests_list
SELECT * FROM spawn_requests
WHERE (:status IS NULL OR status = :status) AND (:pool IS NULL OR pool = :pool)
ORDER BY id LIMIT :limit;
