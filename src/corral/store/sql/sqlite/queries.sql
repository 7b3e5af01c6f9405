-- Named queries for the SQLite adapter. Parameters are :name.

-- The hot path's rules, each written once here and included where it applies (a rule
-- change is an edit of this file, no migration): tests/test_node_truth.py and
-- tests/test_lifecycle.py check each against its pure function in corral.lifecycle.

-- rule: stamp_due
-- lifecycle.stamp_due: a node's activity stamp (last_activity, dead_at) is due once a
-- tenth of its liveness window has passed since it (:stamp is 1 - STAMP_FRACTION).
(dead_at - :now < live_window * :stamp)

-- rule: idle_after_finishing
-- lifecycle.status_after_finishing: a working node, not the bootstrap manager, done
-- with task :id and holding no other task becomes idle.
(status = 'working' AND role <> 'bootstrap_manager'
 AND NOT EXISTS (SELECT 1 FROM tasks h WHERE h.assigned_to = :node_id
                   AND h.status = 'in_progress' AND h.id <> :id))

-- rule: progress_deadline
-- deadlines.progress_deadline: an attempt without progress since :now is stuck at
-- :now plus the task's own progress_timeout, else the cluster's setting (0: off, so
-- NULL: no deadline).
(:now + coalesce(progress_timeout,
                 (SELECT nullif(CAST(value AS REAL), 0) FROM settings
                  WHERE key = 'progress_timeout')))

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
SELECT * FROM nodes WHERE id = :id AND terminated_at IS NULL;

-- name: node_latest
SELECT *, (SELECT t.id FROM tasks t WHERE t.assigned_to = nodes.id AND t.status = 'in_progress'
        ORDER BY t.claimed_at DESC, t.id DESC LIMIT 1) AS held_task_id
FROM nodes WHERE id = :id ORDER BY incarnation DESC LIMIT 1;

-- name: nodes_live
SELECT *, (SELECT t.id FROM tasks t WHERE t.assigned_to = nodes.id AND t.status = 'in_progress'
        ORDER BY t.claimed_at DESC, t.id DESC LIMIT 1) AS held_task_id
FROM nodes WHERE terminated_at IS NULL ORDER BY registered_at, incarnation;

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
-- A live node registering again; its status and idle_since by
-- lifecycle.status_on_reregistering (a new role: a new node's status, unless it holds
-- a task).
UPDATE nodes SET role = :role, model = :model, strength = :strength,
                 status = :status, idle_since = :idle_since,
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
WHERE id = :id AND terminated_at IS NULL;

-- name: node_done_with
-- After task :id is given up (the task's statement ran first): node :node_id is done
-- with it (the rule idle_after_finishing), its activity re-stamped when due (the rule
-- stamp_due; a change of status alone does not re-stamp). Writes only when there is
-- something to change: the node named this task as its current one, it becomes idle,
-- or its stamp is due.
UPDATE nodes SET
    idle_since = CASE WHEN
                     -- include: idle_after_finishing
                      THEN :now ELSE idle_since END,
    current_task_id = CASE WHEN current_task_id = :id OR
                          -- include: idle_after_finishing
                           THEN NULL ELSE current_task_id END,
    status = CASE WHEN
                 -- include: idle_after_finishing
                  THEN 'idle' ELSE status END,
    last_activity = CASE WHEN
                        -- include: stamp_due
                         THEN :now ELSE last_activity END,
    dead_at = CASE WHEN
                  -- include: stamp_due
                   THEN :now + live_window ELSE dead_at END
WHERE id = :node_id AND terminated_at IS NULL
  AND (current_task_id = :id
       OR
       -- include: stamp_due
       OR
       -- include: idle_after_finishing
      );

-- name: node_now_idle
-- node_done_with after a completion: the completion's trigger (trigger_task_completed)
-- has already cleared the node's current task and re-stamped it when due, so what is
-- left is the rule idle_after_finishing. The statement sets no column of the
-- nodes_dead_at index: an idle <-> working flip rewrites only the node's row and its
-- nodes_idle_since entry (SQLite rewrites an index entry whenever an UPDATE sets a
-- column of the index, even to the value it had).
UPDATE nodes SET status = 'idle', idle_since = :now, current_task_id = NULL
WHERE id = :node_id AND terminated_at IS NULL
  AND
  -- include: idle_after_finishing
  ;

-- name: node_claim_state
SELECT incarnation, status, current_task_id, dead_at, live_window
FROM nodes WHERE id = :id AND terminated_at IS NULL;

-- name: node_held_task
SELECT id AS t FROM tasks WHERE assigned_to = :id AND status = 'in_progress'
ORDER BY claimed_at DESC, id DESC LIMIT 1;

-- name: node_heartbeat_steady
-- A beat that changes no health, in one guarded statement; no row: the node is not
-- live or its health changes (then the store reads it and records the change).
UPDATE nodes SET last_heartbeat = :now, heartbeat = :payload,
                 health = coalesce(:health, health), dead_at = :now + live_window
WHERE id = :id AND terminated_at IS NULL AND (:health IS NULL OR health IS :health)
RETURNING *;

-- name: node_heartbeat
-- A beat that changes the node's health (the store records the change); a beat with
-- no health (no health_status, no metrics) keeps the last one.
UPDATE nodes SET last_heartbeat = :now, heartbeat = :payload,
                 health = coalesce(:health, health), dead_at = :now + live_window
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
-- ``due`` counts every due node (PostgreSQL's query skips rows others hold locked).
SELECT *, (SELECT count(*) FROM nodes d WHERE d.terminated_at IS NULL
                                          AND d.dead_at <= :now) AS due
FROM nodes WHERE terminated_at IS NULL AND dead_at <= :now
ORDER BY dead_at LIMIT :limit;

-- name: nodes_dead_left
SELECT 1 AS n FROM nodes WHERE terminated_at IS NULL AND dead_at <= :now LIMIT 1;

-- name: nodes_idle_expired
SELECT * FROM nodes WHERE status = 'idle' AND role <> 'bootstrap_manager'
  AND idle_since <= :cutoff
ORDER BY idle_since LIMIT :limit;

-- name: nodes_idle_left
SELECT 1 AS n FROM nodes WHERE status = 'idle' AND role <> 'bootstrap_manager'
  AND idle_since <= :cutoff LIMIT 1;

-- name: deadline_heads
-- The monitor's wake-up read, one statement: the heads of nodes_dead_at and
-- nodes_idle_since (one index entry each, whatever the fleet's size), the settings'
-- version and the work distribution (its last assessment), and the head of
-- tasks_stuck_at (the next stuck deadline).
SELECT (SELECT dead_at FROM nodes WHERE terminated_at IS NULL
        ORDER BY dead_at LIMIT 1) AS dead,
       (SELECT idle_since FROM nodes WHERE status = 'idle' AND role <> 'bootstrap_manager'
        ORDER BY idle_since LIMIT 1) AS idle,
       (SELECT value FROM meta WHERE key = 'settings_version') AS settings_version,
       (SELECT value FROM meta WHERE key = 'work_distribution') AS work_distribution,
       (SELECT stuck_at FROM tasks INDEXED BY tasks_stuck_at
        WHERE stuck_at IS NOT NULL AND status = 'in_progress'
        ORDER BY stuck_at LIMIT 1) AS stuck;

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
-- only by a live node. The TEMP trigger corral_task_claimed (trigger_task_claimed)
-- re-stamps the holder when due, records the event, drops the role head and hands the
-- claimed row to the store. The first claim fixes the task's session (:session_id, a
-- new UUID); every claim starts the attempt's progress deadline afresh. It has no
-- RETURNING: SQLite fills an ephemeral table for one, a seventh of the claim's work.
UPDATE tasks SET status = 'in_progress', assigned_to = :node_id, epoch = epoch + 1,
                 attempts = attempts + 1, claimed_at = :now, updated_at = :now,
                 claimed_role = :role, session_id = coalesce(session_id, :session_id),
                 progress_at = NULL, progress_note = NULL, stuck_since = NULL,
                 stuck_at =
                 -- include: progress_deadline
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
  AND EXISTS (SELECT 1 FROM nodes WHERE id = :node_id AND terminated_at IS NULL);

-- name: task_complete
-- The TEMP trigger corral_task_completed (trigger_task_completed) re-stamps the
-- holder when due and records the event.
UPDATE tasks SET status = 'done', result = :result, error = NULL, finished_at = :now,
                 updated_at = :now
WHERE id = :id AND status = 'in_progress' AND assigned_to = :node_id
  AND (:epoch IS NULL OR epoch = :epoch)
RETURNING *;

-- name: trigger_task_claimed
-- The bookkeeping of a claim (claim_take) and of a completion (task_complete), in the
-- statement that makes them: TEMP triggers that each SQLiteStore connection creates
-- when it opens (SQLiteStore._bookkeeping), so the rules they apply are this file's.
-- SQLite takes no parameters in a trigger: the store writes :now as new.updated_at
-- (the claim's and the completion's own time) and :stamp as its number. The holder's
-- row is re-stamped only when the rule stamp_due says so (a change of status alone
-- does not re-stamp), each records its event, and a claim drops its role head. The
-- status and the stamp are separate statements, so a flip sets no column of
-- nodes_dead_at. Whether a completion leaves its node idle is decided by the store
-- after the claim that may follow in the same call (node_now_idle), so a worker's
-- complete-and-claim step does not rewrite its node's row twice.
CREATE TEMP TRIGGER IF NOT EXISTS corral_task_claimed AFTER UPDATE OF status ON main.tasks
WHEN old.status = 'pending' AND new.status = 'in_progress'
BEGIN
    UPDATE nodes SET status = 'working', idle_since = NULL, current_task_id = NULL
    WHERE id = new.assigned_to AND terminated_at IS NULL
      AND (status <> 'working' OR current_task_id IS NOT NULL);
    UPDATE nodes SET last_activity = new.updated_at, dead_at = new.updated_at + live_window
    WHERE id = new.assigned_to AND terminated_at IS NULL
      AND
      -- include: stamp_due
      ;
    INSERT INTO events (ts, kind, node_id, task_id, data)
    VALUES (new.claimed_at, 'task_claimed', new.assigned_to, new.id,
            json_object('epoch', new.epoch, 'role', new.claimed_role, 'attempt', new.attempts,
                        'created_at', new.created_at));
    -- A task matching one role has one role head (a task matching several: the store
    -- drops them; role names hold no spaces).
    DELETE FROM ready
    WHERE old.roles <> '' AND instr(old.roles, ' ') = 0 AND role = old.roles
      AND sort_key = old.sort_key AND created_at = old.created_at AND task_id = old.id;
    -- The claimed row, to the store that claimed it (SQLiteStore._note_claimed): the
    -- columns of rows.TaskRow in its order (what the claim's record and its
    -- completion's are built from; a test checks), not the usage sums or the
    -- monitor's columns, which a Task does not carry.
    SELECT corral_claimed(new.id, new.title, new.description, new.priority, new.role,
                          new.roles, new.status, new.assigned_to, new.epoch, new.attempts,
                          new.max_attempts, new.sort_key, new.created_at, new.claimed_at,
                          new.updated_at, new.finished_at, new.result, new.error,
                          new.session_id, new.progress_timeout, new.timeout,
                          new.retry_backoff, new.not_before, new.depends_on, new.ready_at);
END;

-- name: trigger_task_completed
CREATE TEMP TRIGGER IF NOT EXISTS corral_task_completed AFTER UPDATE OF status ON main.tasks
WHEN old.status = 'in_progress' AND new.status = 'done'
BEGIN
    UPDATE nodes SET current_task_id = NULL
    WHERE id = new.assigned_to AND terminated_at IS NULL AND current_task_id = new.id;
    UPDATE nodes SET last_activity = new.updated_at, dead_at = new.updated_at + live_window
    WHERE id = new.assigned_to AND terminated_at IS NULL
      AND
      -- include: stamp_due
      ;
    -- A completion with usage (task_complete_usage) keeps its report on the task's row
    -- (usage_last_*): the event is the same as without, and the usage roll-up reads the
    -- report from the task (usage_tail).
    INSERT INTO events (ts, kind, node_id, task_id, data)
    VALUES (new.finished_at, 'task_completed', new.assigned_to, new.id,
            json_object('epoch', new.epoch, 'claimed_at', new.claimed_at));
END;

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

-- Operator actions on tasks (cancel_task, requeue_task and their bulk forms;
-- corral.store.sqltasks).

-- name: task_for_update
SELECT * FROM tasks WHERE id = :id;

-- name: task_cancel
-- Cancelled by the operator (:error says by whom and why); a holder keeps its name
-- on the task (its late completion is refused: sqldb.refuse).
UPDATE tasks SET status = 'cancelled', error = :error, finished_at = :now, updated_at = :now
WHERE id = :id
RETURNING *;

-- name: task_requeue_fresh
-- Requeued by the operator: pending with a new epoch (the old holder's completion is
-- refused by the fencing) and a fresh set of attempts.
UPDATE tasks SET status = 'pending', assigned_to = NULL, epoch = epoch + 1, attempts = 0,
                 error = NULL, result = NULL, finished_at = NULL, updated_at = :now
WHERE id = :id
RETURNING *;

-- name: node_drop_task
-- Node :node_id no longer holds task :id (the operator took it: the task's statement
-- ran first): its current task cleared, idle by the rule idle_after_finishing; its
-- activity is not stamped (the node did nothing).
UPDATE nodes SET
    idle_since = CASE WHEN
                     -- include: idle_after_finishing
                      THEN :now ELSE idle_since END,
    current_task_id = CASE WHEN current_task_id = :id OR
                          -- include: idle_after_finishing
                           THEN NULL ELSE current_task_id END,
    status = CASE WHEN
                 -- include: idle_after_finishing
                  THEN 'idle' ELSE status END
WHERE id = :node_id AND terminated_at IS NULL
  AND (current_task_id = :id
       OR
       -- include: idle_after_finishing
      );

-- name: tasks_matching
-- The tasks a bulk action applies to: status :s1, :s2, :s3 or :s4 (repeated when it
-- applies to fewer), and every filter given (NULL: any): :role among its matched roles,
-- :priority, its holder :assigned_to, a title containing :title (case-insensitive),
-- created at or before :created_before.
SELECT * FROM tasks
WHERE status IN (:s1, :s2, :s3, :s4)
  AND (:role IS NULL OR instr(' ' || roles || ' ', ' ' || :role || ' ') > 0)
  AND (:priority IS NULL OR priority = :priority)
  AND (:assigned_to IS NULL OR assigned_to = :assigned_to)
  AND (:title IS NULL OR instr(lower(title), lower(:title)) > 0)
  AND (:created_before IS NULL OR created_at <= :created_before)
ORDER BY id;

-- name: tasks_cancelled_of
-- Of the tasks :ids (a JSON array) a heartbeat names as current, those cancelled
-- while node :node_id held them, or taken from it (a stuck task requeued or failed):
-- every one it neither holds nor finished itself.
SELECT id FROM tasks
WHERE id IN (SELECT value FROM json_each(:ids))
  AND NOT (assigned_to = :node_id AND status IN ('in_progress', 'done'))
ORDER BY id;

-- name: assess_counts
SELECT
    (SELECT count(*) FROM tasks WHERE status = 'pending') AS pending,
    (SELECT count(*) FROM tasks WHERE status = 'in_progress') AS in_progress,
    (SELECT count(*) FROM nodes WHERE terminated_at IS NULL) AS active_count,
    (SELECT count(*) FROM nodes WHERE status = 'working' AND role <> 'bootstrap_manager')
        AS working,
    (SELECT count(*) FROM nodes WHERE status = 'idle') AS idle,
    (SELECT count(*) FROM tasks WHERE status = 'pending' AND roles = 'architect')
        AS architect_only,
    (SELECT id FROM nodes WHERE terminated_at IS NULL AND role = 'bootstrap_manager'
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
SELECT max(last_heartbeat) AS t FROM nodes WHERE terminated_at IS NULL;

-- Row locks: SQLite's write transaction already excludes other writers, so these
-- are the plain reads; PostgreSQL's versions lock.

-- name: lock_registry
SELECT 1 AS locked;

-- name: node_live_for_update
SELECT * FROM nodes WHERE id = :id AND terminated_at IS NULL;

-- name: nodes_live_for_update
SELECT * FROM nodes WHERE terminated_at IS NULL;

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
-- Per status: the tasks, their attempts, and those finished at or after :since (done,
-- failed or cancelled in the last hour; none when :since is NULL), in one scan.
SELECT status, count(*) AS n, coalesce(sum(attempts), 0) AS attempts,
       coalesce(sum(CASE WHEN finished_at >= :since THEN 1 ELSE 0 END), 0) AS recent
FROM tasks GROUP BY status;

-- name: stats_event_count
-- The events of a kind, and the newest one's time (NULL when there is none).
SELECT count(*) AS n, max(ts) AS last FROM events WHERE kind = :kind;

-- name: stats_live_nodes
-- The live nodes as the statistics list them (nodes_live without the held task).
SELECT id, role, status, cursor, last_activity, last_heartbeat, registered_at
FROM nodes WHERE terminated_at IS NULL ORDER BY registered_at, incarnation;

-- name: stats_inbox
-- The live nodes' inboxes (the events after each one's cursor up to :last, events_last)
-- in one aggregate over one read of the seq index: the newest :cap events after the
-- oldest live cursor, and beside them each distinct live cursor; counting events down
-- from the newest, a cursor's count is the events after it. A cursor older than every
-- event read counts them all, so an inbox is at most :cap. Rows: cursor, inbox (event
-- numbers need not be consecutive, so a difference of numbers is not a count).
WITH live AS (SELECT DISTINCT cursor FROM nodes WHERE terminated_at IS NULL),
recent AS (
    SELECT seq FROM events
    WHERE seq <= :last AND seq > (SELECT min(cursor) FROM live)
    ORDER BY seq DESC LIMIT :cap
),
marks AS (
    SELECT cursor AS pos, 0 AS is_event FROM live
    UNION ALL
    SELECT seq, 1 FROM recent
),
counted AS (
    SELECT pos, is_event,
           sum(is_event) OVER (ORDER BY pos DESC, is_event ROWS UNBOUNDED PRECEDING) AS after
    FROM marks
)
SELECT pos AS cursor, after AS inbox FROM counted WHERE is_event = 0;

-- name: node_beat_by_call
-- A call that counts as the node's heartbeat (Store.touch, the MCP tools): stamped as
-- a beat, its payload kept.
UPDATE nodes SET last_activity = :now, last_heartbeat = :now, dead_at = :now + live_window
WHERE id = :id AND terminated_at IS NULL;

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


-- Workflow runs (corral.store.sqlworkflows). ---------------------------------------

-- name: wf_hosts_clear
DELETE FROM workflow_hosts WHERE host = :host;

-- name: wf_host_insert
INSERT INTO workflow_hosts (workflow, host, idle_release_after, seen_at)
VALUES (:workflow, :host, :idle_release_after, :now);

-- name: wf_hosts_of
SELECT * FROM workflow_hosts WHERE host = :host ORDER BY workflow;

-- name: wf_host_seen
UPDATE workflow_hosts SET seen_at = :now WHERE host = :host;

-- name: wf_host_live
SELECT 1 AS live FROM workflow_hosts WHERE workflow = :workflow AND seen_at >= :since LIMIT 1;

-- name: handler_insert
INSERT INTO handlers (handler_id, workflow, status, claim_at, start, created_at, updated_at)
VALUES (:handler_id, :workflow, 'running', :now, :start, :now, :now);

-- name: handler_get
SELECT * FROM handlers WHERE handler_id = :handler_id;

-- name: handler_set_idle
UPDATE handlers SET idle_since = :idle_since, waiters = :waiters, wake_at = :wake_at,
                    release_requested_at = :release_requested_at, updated_at = :now
WHERE handler_id = :handler_id;

-- name: handler_resident
-- A run kept resident ends an operator's request to release it.
UPDATE handlers SET resident_reason = :reason, release_requested_at = NULL, updated_at = :now
WHERE handler_id = :handler_id;

-- name: handler_finish
UPDATE handlers SET status = :status, result = :result, error = :error, idle_since = NULL,
                    waiters = '[]', wake_at = NULL, claim_at = NULL, finished_at = :now,
                    release_requested_at = NULL, updated_at = :now
WHERE handler_id = :handler_id;

-- name: handler_release
-- The checkpoint and the status in one statement: released means resumable.
UPDATE handlers SET status = 'released', host = NULL, checkpoint = :checkpoint,
                    claim_at = wake_at, released_at = :now, release_requested_at = NULL,
                    updated_at = :now
WHERE handler_id = :handler_id AND host = :host AND status = 'running';

-- name: handler_request_release
-- An operator's request that an idle run be released now (release_workflow).
UPDATE handlers SET release_requested_at = :now, updated_at = :now
WHERE handler_id = :handler_id AND status = 'running' AND idle_since IS NOT NULL;

-- name: handler_wake
-- An event for a released run: any host serving its workflow may take it now.
UPDATE handlers SET claim_at = :now, updated_at = :now
WHERE handler_id = :handler_id AND status = 'released';

-- name: inbox_insert
INSERT INTO handler_inbox (handler_id, event_type, data, sent_at)
VALUES (:handler_id, :event_type, :data, :now);

-- name: inbox_count
SELECT count(*) AS n FROM handler_inbox WHERE handler_id = :handler_id;

-- part: host_idle
-- A host's releasable idle runs, on handlers_host_idle.
FROM handlers
WHERE host = :host AND status = 'running' AND idle_since IS NOT NULL
  AND resident_reason IS NULL

-- name: handlers_idle_count_on_host
SELECT count(*) AS n
-- include: host_idle
;

-- name: handlers_idle_on_host
-- The release policy's candidates (idle.release_due decides): the runs idle since
-- before :before (now less the shortest release delay any of them has), those an
-- operator asked to release (on handlers_release_requested), and the :oldest longest
-- idle (those beyond max_resident_idle).
SELECT handler_id, idle_since, release_after, release_requested_at
-- include: host_idle
  AND idle_since < :before
UNION
SELECT handler_id, idle_since, release_after, release_requested_at
FROM handlers INDEXED BY handlers_release_requested  -- (few; not by handlers_host_idle)
WHERE host = :host AND release_requested_at IS NOT NULL AND status = 'running'
  AND idle_since IS NOT NULL AND resident_reason IS NULL
UNION
SELECT * FROM (
    SELECT handler_id, idle_since, release_after, release_requested_at
    -- include: host_idle
    ORDER BY idle_since, handler_id LIMIT :oldest
) AS oldest
ORDER BY idle_since, handler_id;

-- name: handlers_release_after
-- A host's declared release delays on its resident runs (serve_workflows).
UPDATE handlers
SET release_after = (SELECT w.idle_release_after FROM workflow_hosts w
                     WHERE w.workflow = handlers.workflow AND w.host = :host)
WHERE host = :host AND status = 'running';

-- name: handler_lock
SELECT * FROM handlers WHERE handler_id = :handler_id;

-- name: handlers_claim
-- New runs and released runs that are due (an event, a waiter deadline), of the
-- host's workflows, on handlers_claim; the host's own release delay comes along.
UPDATE handlers
SET host = :host, status = 'running', claim_at = NULL, idle_since = NULL,
    resumes = resumes + (status = 'released'), updated_at = :now,
    release_after = (SELECT w.idle_release_after FROM workflow_hosts w
                     WHERE w.workflow = handlers.workflow AND w.host = :host)
WHERE handler_id IN (
    SELECT h.handler_id FROM workflow_hosts w
    JOIN handlers h ON h.workflow = w.workflow AND h.claim_at IS NOT NULL
                   AND h.claim_at <= :now
    WHERE w.host = :host
    ORDER BY h.claim_at LIMIT :limit)
RETURNING *;

-- name: inbox_take
-- The events for the host's running handlers, taken (deleted) as they are handed over.
-- The inbox holds only undelivered events: read it first (CROSS JOIN keeps that order).
DELETE FROM handler_inbox WHERE seq IN (
    SELECT i.seq FROM handler_inbox i CROSS JOIN handlers h ON h.handler_id = i.handler_id
    WHERE h.host = :host AND h.status = 'running' ORDER BY i.seq LIMIT :limit)
RETURNING *;

-- name: handlers_idle_list
-- Idle runs, longest idle first, on handlers_idle.
SELECT * FROM handlers
WHERE idle_since IS NOT NULL AND idle_since < :before
  AND (:status IS NULL OR status = :status)
  AND (:workflow IS NULL OR workflow = :workflow) AND (:host IS NULL OR host = :host)
ORDER BY idle_since, handler_id LIMIT :limit;

-- name: handlers_by_status
SELECT * FROM handlers
WHERE status = :status AND (:busy IS NULL OR idle_since IS NULL)
  AND (:workflow IS NULL OR workflow = :workflow) AND (:host IS NULL OR host = :host)
ORDER BY created_at, handler_id LIMIT :limit;

-- name: handlers_all
SELECT * FROM handlers
WHERE (:busy IS NULL OR idle_since IS NULL)
  AND (:workflow IS NULL OR workflow = :workflow) AND (:host IS NULL OR host = :host)
ORDER BY created_at, handler_id LIMIT :limit;
-- === the activation scheduler (corral.store.sqlsched) ===============================
-- name: agent_upsert
INSERT INTO agents (id, config, min_interval, next_due_at, next_due_task, created_at,
                    updated_at)
VALUES (:id, :config, :min_interval, :next_due_at, :next_due_task, :now, :now)
ON CONFLICT (id) DO UPDATE SET config = excluded.config,
    min_interval = excluded.min_interval, next_due_at = excluded.next_due_at,
    next_due_task = excluded.next_due_task, updated_at = excluded.updated_at
RETURNING *;

-- name: agent_get
SELECT * FROM agents WHERE id = :id;

-- name: agents_page
SELECT * FROM agents WHERE id > :after ORDER BY id LIMIT :limit;

-- name: agent_unread_add
UPDATE agents SET unread = unread + 1 WHERE id = :id RETURNING id;

-- name: notification_insert
INSERT INTO notifications (agent_id, payload, created_at)
VALUES (:agent_id, :payload, :now)
RETURNING *;

-- name: notifications_unread
SELECT * FROM notifications WHERE agent_id = :agent_id AND read_at IS NULL
ORDER BY id LIMIT :limit;

-- name: notifications_mark_read
UPDATE notifications SET read_at = :now
WHERE agent_id = :agent_id AND read_at IS NULL AND id <= :upto;

-- name: agent_unread_sub
UPDATE agents SET unread = unread - :n WHERE id = :id;

-- name: runner_seen
INSERT INTO runners (id, mode, seen_at) VALUES (:id, :mode, :now)
ON CONFLICT (id) DO UPDATE SET mode = excluded.mode, seen_at = excluded.seen_at;

-- name: activation_insert
INSERT INTO activations (agent_id, runner_id, mode, kind, epoch, task, due_at, inbox_upto,
                         posts_left, comments_left, claimed_at, expires_at)
VALUES (:agent_id, :runner_id, :mode, :kind, :epoch, :task, :due_at, :inbox_upto,
        :posts_left, :comments_left, :now, :expires_at)
RETURNING *;

-- name: activations_all
SELECT * FROM activations ORDER BY id LIMIT :limit;

-- name: activation_delete
DELETE FROM activations WHERE id = :id;

-- name: agent_release
-- A released activation: the agent free again, stamped, counted, its caps tallied and
-- its next cron override set; unread less what the activation read.
UPDATE agents SET held_by = NULL, last_activated_at = :now,
    activation_count = activation_count + 1, unread = unread - :read,
    cap_day = :cap_day, posts_today = :posts, comments_today = :comments,
    next_due_at = :next_due_at, next_due_task = :next_due_task, updated_at = :now
WHERE id = :id
RETURNING *;

-- name: agent_unhold
-- An expired activation: the agent free again, as it was before it.
UPDATE agents SET held_by = NULL, updated_at = :now WHERE id = :id;

-- name: notifications_prune
-- Read inbox items older than the event retention, oldest first, a batch at a time
-- (ids grow with time, so the scan meets them first).
DELETE FROM notifications WHERE id IN (
    SELECT id FROM notifications WHERE read_at IS NOT NULL AND read_at < :cutoff
    ORDER BY id LIMIT :limit);

-- name: next_activation_expiry
SELECT min(expires_at) AS t FROM activations;

-- name: sched_stats
SELECT
    (SELECT count(*) FROM notifications WHERE read_at IS NULL) AS inbox_depth,
    (SELECT min(created_at) FROM notifications WHERE read_at IS NULL) AS oldest_unread,
    (SELECT max(last_activated_at) FROM agents) AS last_activation,
    (SELECT count(*) FROM agents) AS agents;

-- name: sched_active_by_kind
SELECT kind, count(*) AS n FROM activations GROUP BY kind;

-- name: sched_runners_by_mode
SELECT r.mode, count(*) AS n FROM runners r
WHERE EXISTS (SELECT 1 FROM nodes n WHERE n.id = r.id AND n.terminated_at IS NULL)
GROUP BY r.mode;

-- name: sched_runner_alive
-- Whether an expired activation's runner still lives (the event's reason); no lock.
SELECT id FROM nodes WHERE id = :id AND terminated_at IS NULL;

-- name: sched_runner_lock
-- An assignment and a release lock the runner's node first (as the node's end does
-- before it ends the node's activations), so they never wait on each other in
-- opposite orders; an assignment's node cannot end before it commits, so the end
-- sees the new activation.
SELECT id FROM nodes WHERE id = :id AND terminated_at IS NULL;

-- name: sched_runner_working
-- The runner holds an activation: working (never idle-retired meanwhile), its call a
-- sign of life.
UPDATE nodes SET status = 'working', idle_since = NULL, last_activity = :now,
                 dead_at = :now + live_window
WHERE id = :id AND terminated_at IS NULL
RETURNING id;

-- name: sched_runner_done
-- After a release: a runner holding no other activation and no task is idle again
-- (a bootstrap manager stays working).
UPDATE nodes SET status = 'idle', idle_since = :now, last_activity = :now,
                 dead_at = :now + live_window
WHERE id = :id AND status = 'working' AND role <> 'bootstrap_manager'
  AND NOT EXISTS (SELECT 1 FROM activations WHERE runner_id = :id)
  AND NOT EXISTS (SELECT 1 FROM tasks WHERE assigned_to = :id AND status = 'in_progress');

-- name: agent_for_update
SELECT * FROM agents WHERE id = :id;

-- name: activation_for_update
SELECT * FROM activations WHERE id = :id;

-- name: activations_expired
SELECT * FROM activations WHERE expires_at <= :now ORDER BY expires_at LIMIT :limit;

-- The claims: one statement each, taking the head of one class of the order
-- (corral.scheduler.policy) inside the write transaction, which excludes every other
-- writer. :runner holds it from then on.
-- name: claim_inbox
UPDATE agents SET held_by = :runner, epoch = epoch + 1, updated_at = :now
WHERE id = (SELECT id FROM agents WHERE held_by IS NULL AND unread > 0
            ORDER BY unread DESC, last_activated_at ASC NULLS FIRST, id LIMIT 1)
RETURNING *;

-- name: claim_scheduled
UPDATE agents SET held_by = :runner, epoch = epoch + 1, updated_at = :now
WHERE id = (SELECT id FROM agents
            WHERE held_by IS NULL AND next_due_at IS NOT NULL AND next_due_at <= :now
            ORDER BY next_due_at, id LIMIT 1)
RETURNING *;

-- name: claim_discovery
-- The better of two heads: the stalest agent under the cluster's interval (taken only
-- if rested: if it is not, none of them is), and the stalest rested agent with an
-- interval of its own (a walk over those few).
UPDATE agents SET held_by = :runner, epoch = epoch + 1, updated_at = :now
WHERE id = (
    SELECT id FROM (
        SELECT * FROM (
            SELECT id, last_activated_at FROM agents
            WHERE held_by IS NULL AND unread = 0 AND min_interval IS NULL
            ORDER BY last_activated_at ASC NULLS FIRST, id LIMIT 1)
        WHERE last_activated_at IS NULL OR :interval <= 0
           OR last_activated_at <= :now - :interval
        UNION ALL
        SELECT * FROM (
            SELECT id, last_activated_at FROM agents
            WHERE held_by IS NULL AND unread = 0 AND min_interval IS NOT NULL
              AND (last_activated_at IS NULL OR min_interval <= 0
                   OR last_activated_at <= :now - min_interval)
            ORDER BY last_activated_at ASC NULLS FIRST, id LIMIT 1)
    )
    ORDER BY last_activated_at ASC NULLS FIRST, id LIMIT 1)
RETURNING *;

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

-- name: claim_key_get
-- What the claim sent with this key took (corral.outage): a row, or none.
SELECT task_id, epoch, done_id FROM claim_keys WHERE node_id = :node_id AND key = :key;

-- name: claim_key_put
INSERT INTO claim_keys (node_id, key, task_id, epoch, done_id, created_at)
VALUES (:node_id, :key, :task_id, :epoch, :done_id, :now);

-- name: claim_keys_prune
DELETE FROM claim_keys WHERE created_at < :before;

-- Named tokens (corral.store.sqltokens) -------------------------------------------

-- name: token_insert
-- Nothing when the name is taken (the caller says so).
INSERT INTO tokens (name, role, hash, created_at, created_by)
VALUES (:token_name, :role, :hash, :now, :actor)
ON CONFLICT (name) DO NOTHING
RETURNING *;

-- name: token_by_hash
SELECT * FROM tokens WHERE hash = :hash;

-- name: token_by_id
SELECT * FROM tokens WHERE id = :id;

-- name: token_used
-- Last use to the minute: at most one write per token a minute, however busy.
UPDATE tokens SET last_used_at = :now
WHERE id = :id AND (last_used_at IS NULL OR last_used_at < :stale);

-- name: tokens_list
SELECT * FROM tokens ORDER BY name;

-- name: token_delete
DELETE FROM tokens WHERE name = :token_name RETURNING *;

-- Progress and stuck tasks (corral.store.sqlprogress; docs/guardrails.md).

-- name: task_set_progress_timeout
-- A task's own limit without progress (add_task's progress_timeout), set as it is added.
UPDATE tasks SET progress_timeout = :seconds WHERE id = :id
RETURNING *;

-- name: task_progress
-- A progress report on the attempt in progress: its time and note (a report without
-- a note keeps the last one), no longer stuck, and its deadline moved on.
UPDATE tasks SET progress_at = :now, progress_note = coalesce(:note, progress_note),
                 stuck_since = NULL,
                 stuck_at =
                 -- include: progress_deadline
WHERE id = :id
RETURNING *;

-- name: stuck_head
-- The monitor's next stuck deadline: the head of tasks_stuck_at (one index entry; named,
-- for without statistics SQLite would scan tasks_open's tasks in progress for it).
SELECT stuck_at FROM tasks INDEXED BY tasks_stuck_at
WHERE stuck_at IS NOT NULL AND status = 'in_progress'
ORDER BY stuck_at LIMIT 1;

-- name: tasks_stuck
-- Tasks in progress past their stuck deadline at :now (at most :limit, earliest
-- first), with their holders: the monitor locks each holder, then the task.
SELECT id, assigned_to FROM tasks INDEXED BY tasks_stuck_at
WHERE stuck_at IS NOT NULL AND status = 'in_progress' AND stuck_at <= :now
ORDER BY stuck_at LIMIT :limit;

-- name: task_flag_stuck
-- Flagged stuck at its deadline; out of tasks_stuck_at until its next progress.
UPDATE tasks SET stuck_since = stuck_at, stuck_at = NULL, updated_at = :now
WHERE id = :id
RETURNING *;

-- name: task_take_back
-- A stuck task taken from its holder: pending again at a new epoch (the holder's late
-- heartbeat, progress report or completion is refused by the fencing).
UPDATE tasks SET status = 'pending', assigned_to = NULL, epoch = epoch + 1, error = :error,
                 stuck_since = stuck_at, stuck_at = NULL, updated_at = :now
WHERE id = :id
RETURNING *;

-- name: task_take_back_later
-- A stuck task of a retry_backoff taken from its holder: scheduled at a new epoch,
-- claimable again from :ready_at on (a failed attempt backing off).
UPDATE tasks SET status = 'scheduled', assigned_to = NULL, epoch = epoch + 1,
                 ready_at = :ready_at, error = :error, stuck_since = stuck_at,
                 stuck_at = NULL, updated_at = :now
WHERE id = :id
RETURNING *;

-- name: tasks_stuck_count
-- How many tasks in progress are flagged stuck (/metrics).
SELECT count(*) AS n FROM tasks WHERE status = 'in_progress' AND stuck_since IS NOT NULL;

-- Tasks with time and order (corral.store.sqltasks; docs/core.md "Tasks with time and
-- order"). A task not ready yet is 'scheduled' (pending from ready_at on) or
-- 'blocked' (waiting_on of its dependencies not done): outside the claim's indexes.

-- name: tasks_not_ready_all
-- The tasks a role_keywords change re-matches besides the pending ones (their role
-- heads are added when they become pending).
SELECT * FROM tasks WHERE status IN ('scheduled', 'blocked');

-- name: task_set_order
-- A task's time and order, set as it is added (after task_insert, before its role
-- heads): :status 'pending', 'scheduled' (from :ready_at on) or 'blocked'.
UPDATE tasks SET timeout = :timeout, retry_backoff = :retry_backoff,
                 not_before = :not_before, depends_on = :depends_on, ready_at = :ready_at,
                 waiting_on = :waiting_on, status = :status
WHERE id = :id
RETURNING *;

-- name: task_dep_add
-- A new task waits on task :dep_id unless that one is finished: the dependency counts
-- one more dependent (its row locked, so its completion sees the edge) and the edge
-- is kept; no row when :dep_id is unknown or finished (task_get says which).
UPDATE tasks SET dependents = dependents + 1
WHERE id = :dep_id AND status NOT IN ('done', 'failed', 'cancelled')
RETURNING id, status;

-- name: task_dep_insert
INSERT INTO task_deps (dep_id, task_id) VALUES (:dep_id, :task_id);

-- name: tasks_waiting_on
-- The tasks still blocked on task :id (its failure or cancellation ends them too).
SELECT t.* FROM task_deps d JOIN tasks t ON t.id = d.task_id
WHERE d.dep_id = :id AND t.status = 'blocked'
ORDER BY t.id;

-- name: task_schedule
-- A failed attempt backing off: claimable again from :ready_at on.
UPDATE tasks SET status = 'scheduled', assigned_to = NULL, ready_at = :ready_at,
                 error = :error, updated_at = :now
WHERE id = :id
RETURNING *;

-- name: task_end_blocked
-- A blocked task whose dependency failed or was cancelled for good: :status
-- ('failed' or 'cancelled') with :error naming the dependency.
UPDATE tasks SET status = :status, error = :error, finished_at = :now, updated_at = :now
WHERE id = :id AND status = 'blocked'
RETURNING *;

-- name: task_taken_from
-- The node the monitor takes task :id back from, for the record (its heartbeat names
-- the task in cancelled_tasks as one it neither holds nor finished: tasks_cancelled_of).
UPDATE tasks SET taken_from = :node_id WHERE id = :id;

-- name: node_lock_skip_locked
-- The live node :id's row, locked; no row when it is not live or another session holds
-- it (PostgreSQL: the monitor's task duties never wait on a row lock).
SELECT incarnation FROM nodes WHERE id = :id AND terminated_at IS NULL;

-- name: task_new_epoch
-- A run taken back at its timeout: a new epoch at once (the holder's late completion,
-- progress report or heartbeat names the old one and is refused by the fencing).
UPDATE tasks SET epoch = epoch + 1 WHERE id = :id;

-- name: task_deadline_heads
-- The monitor's two task deadlines, index heads: the earliest ready_at of a scheduled
-- task (tasks_ready_at) and the earliest end of a run with a timeout (tasks_timeout_at).
SELECT (SELECT ready_at FROM tasks WHERE status = 'scheduled'
        ORDER BY ready_at LIMIT 1) AS ready,
       (SELECT claimed_at + timeout FROM tasks
        WHERE status = 'in_progress' AND timeout IS NOT NULL
        ORDER BY claimed_at + timeout LIMIT 1) AS timeout;

-- name: tasks_due
SELECT * FROM tasks WHERE status = 'scheduled' AND ready_at <= :now
ORDER BY ready_at LIMIT :limit;

-- name: tasks_due_left
SELECT 1 AS n FROM tasks WHERE status = 'scheduled' AND ready_at <= :now LIMIT 1;

-- name: task_make_pending
-- A scheduled task whose time has come: pending (its role heads follow), in the
-- claim order it always had (its sort_key is its creation's).
UPDATE tasks SET status = 'pending', ready_at = NULL, updated_at = :now
WHERE id = :id AND status = 'scheduled'
RETURNING *;

-- name: tasks_timed_out
SELECT * FROM tasks
WHERE status = 'in_progress' AND timeout IS NOT NULL AND claimed_at + timeout <= :now
ORDER BY claimed_at + timeout LIMIT :limit;

-- name: trigger_task_woken
-- A dependency's completion (tasks_release_dependents, in the completion's statement)
-- may make the tasks waiting on it pending (task_releases_run): it wakes waiting
-- claims when the transaction commits, the store's corral_woken() noting it
-- (SQLiteStore._end rings the ReadySignal). Its release is the one way a blocked
-- task becomes pending; a trigger on it, not on every change of a task's status,
-- is set up only then (SQLite sets up a trigger's frame before testing its WHEN).
CREATE TEMP TRIGGER IF NOT EXISTS corral_task_woken AFTER INSERT ON main.task_releases
BEGIN
    SELECT corral_woken();
END;

-- name: nodes_all_stuck
-- The holders whose every task in progress is flagged stuck (read_state shows them).
SELECT assigned_to AS id FROM tasks WHERE status = 'in_progress'
GROUP BY assigned_to HAVING count(*) = count(stuck_since);

-- name: usage_add
-- A usage report added to its node's row of the hour (usage_hours): the node's role
-- and model read from its live row ('' when it is not live), its pool as given.
-- One small statement in the reporting operation's transaction; the scopes' sums are
-- computed at read (usage_sum_*).
INSERT INTO usage_hours (start, node_id, role, model, pool, input_tokens, output_tokens,
                         cost_micros, reports)
SELECT :hour, :node_id, coalesce(n.role, ''), coalesce(n.model, ''), :pool,
       :input_tokens, :output_tokens, :cost_micros, 1
FROM (SELECT 1) AS one
LEFT JOIN nodes n ON n.id = :node_id AND n.terminated_at IS NULL
WHERE true
ON CONFLICT (start, node_id, role, model) DO UPDATE SET
    input_tokens = usage_hours.input_tokens + excluded.input_tokens,
    output_tokens = usage_hours.output_tokens + excluded.output_tokens,
    cost_micros = usage_hours.cost_micros + excluded.cost_micros,
    reports = usage_hours.reports + 1;

-- name: usage_add_sums
-- The roll-up's addition (sqlusage.roll_up): the reports of one node's hour, summed.
INSERT INTO usage_hours (start, node_id, role, model, pool, input_tokens, output_tokens,
                         cost_micros, reports)
VALUES (:hour, :node_id, :role, :model, :pool, :input_tokens, :output_tokens, :cost_micros,
        :reports)
ON CONFLICT (start, node_id, role, model) DO UPDATE SET
    input_tokens = usage_hours.input_tokens + excluded.input_tokens,
    output_tokens = usage_hours.output_tokens + excluded.output_tokens,
    cost_micros = usage_hours.cost_micros + excluded.cost_micros,
    reports = usage_hours.reports + excluded.reports;

-- name: usage_tail
-- The completions' usage reports not in usage_hours yet: the completion events after
-- the roll-up's mark (meta usage_rolled; the events' seq range, in order) whose task
-- holds its completion's report (usage_last_*), with the role and model of the node's
-- latest row ('' when none): a registration that would change them rolls the reports
-- up first (sqlusage.before_registration), so they are the node's at its completion.
-- The readers add them to usage_hours' sums; the roll-up moves them there.
SELECT e.seq, e.ts, e.node_id,
       t.usage_last_input AS input_tokens,
       t.usage_last_output AS output_tokens,
       t.usage_last_micros AS cost_micros,
       coalesce(n.role, '') AS role,
       coalesce(n.model, '') AS model
FROM events AS e
JOIN tasks AS t ON t.id = e.task_id
LEFT JOIN nodes AS n ON n.incarnation = (SELECT max(incarnation) FROM nodes INDEXED BY nodes_by_id
                                         WHERE id = e.node_id)
WHERE e.seq > :after AND e.kind = 'task_completed' AND t.usage_last_micros IS NOT NULL
ORDER BY e.seq LIMIT :limit;

-- name: node_latest_scope
-- A node's latest row's role and model (its live row's, or its last one's).
SELECT role, model FROM nodes INDEXED BY nodes_by_id WHERE id = :id
ORDER BY incarnation DESC LIMIT 1;

-- name: usage_task_add
-- A usage report added to its task's sums (a failure's or a progress report's; a
-- completion adds them in its own statement: task_complete_usage).
UPDATE tasks SET usage_input_tokens = usage_input_tokens + :input_tokens,
                 usage_output_tokens = usage_output_tokens + :output_tokens,
                 usage_cost_micros = usage_cost_micros + :cost_micros,
                 usage_reports = usage_reports + 1
WHERE id = :id;

-- name: task_complete_usage
-- task_complete with the report's usage added to the task's sums in the same statement,
-- and kept as its completion's (usage_last_*) for usage_hours (usage_tail).
UPDATE tasks SET status = 'done', result = :result, error = NULL, finished_at = :now,
                 updated_at = :now,
                 usage_input_tokens = usage_input_tokens + :input_tokens,
                 usage_output_tokens = usage_output_tokens + :output_tokens,
                 usage_cost_micros = usage_cost_micros + :cost_micros,
                 usage_reports = usage_reports + 1,
                 usage_last_input = :input_tokens, usage_last_output = :output_tokens,
                 usage_last_micros = :cost_micros
WHERE id = :id AND status = 'in_progress' AND assigned_to = :node_id
  AND (:epoch IS NULL OR epoch = :epoch)
RETURNING *;

-- name: usage_sum_cluster
-- The sums of a scope over the whole hours from start to end: the cluster's from the
-- primary key's range, a node's, role's, model's or pool's on its column's index
-- (key: its name; usage_sum_*). A task's are on its row, whatever the window.
SELECT coalesce(sum(input_tokens), 0) AS input_tokens,
       coalesce(sum(output_tokens), 0) AS output_tokens,
       coalesce(sum(cost_micros), 0) AS cost_micros,
       coalesce(sum(reports), 0) AS reports
FROM usage_hours WHERE start >= :start AND start < :end;

-- name: usage_sum_node
SELECT coalesce(sum(input_tokens), 0) AS input_tokens,
       coalesce(sum(output_tokens), 0) AS output_tokens,
       coalesce(sum(cost_micros), 0) AS cost_micros,
       coalesce(sum(reports), 0) AS reports
FROM usage_hours INDEXED BY usage_hours_node
WHERE node_id = :key AND start >= :start AND start < :end;

-- name: usage_sum_role
SELECT coalesce(sum(input_tokens), 0) AS input_tokens,
       coalesce(sum(output_tokens), 0) AS output_tokens,
       coalesce(sum(cost_micros), 0) AS cost_micros,
       coalesce(sum(reports), 0) AS reports
FROM usage_hours INDEXED BY usage_hours_role
WHERE role = :key AND start >= :start AND start < :end;

-- name: usage_sum_model
SELECT coalesce(sum(input_tokens), 0) AS input_tokens,
       coalesce(sum(output_tokens), 0) AS output_tokens,
       coalesce(sum(cost_micros), 0) AS cost_micros,
       coalesce(sum(reports), 0) AS reports
FROM usage_hours INDEXED BY usage_hours_model
WHERE model = :key AND model <> '' AND start >= :start AND start < :end;

-- name: usage_sum_pool
SELECT coalesce(sum(input_tokens), 0) AS input_tokens,
       coalesce(sum(output_tokens), 0) AS output_tokens,
       coalesce(sum(cost_micros), 0) AS cost_micros,
       coalesce(sum(reports), 0) AS reports
FROM usage_hours INDEXED BY usage_hours_pool
WHERE pool = :key AND pool IS NOT NULL AND start >= :start AND start < :end;

-- name: usage_sum_task
SELECT usage_input_tokens AS input_tokens, usage_output_tokens AS output_tokens,
       usage_cost_micros AS cost_micros, usage_reports AS reports
FROM tasks WHERE id = :key;

-- name: usage_nodes
-- Each node's (and role's, model's, pool's) sums over the hours from start to end
-- (/metrics: the scopes are summed from them, budgets.scope_sums).
SELECT node_id, role, model, pool, sum(input_tokens) AS input_tokens,
       sum(output_tokens) AS output_tokens, sum(cost_micros) AS cost_micros,
       sum(reports) AS reports
FROM usage_hours WHERE start >= :start AND start < :end
GROUP BY node_id, role, model, pool;

-- name: budget_mark_get
SELECT mark FROM budget_marks WHERE budget = :budget AND window_start = :window_start;

-- name: budget_mark_put
INSERT INTO budget_marks (budget, window_start, mark) VALUES (:budget, :window_start, :mark)
ON CONFLICT (budget, window_start) DO UPDATE SET mark = excluded.mark;

-- name: nodes_count_live_model
-- A capped model's live nodes (nodes_live_model), under the registry lock.
SELECT count(*) AS n FROM nodes WHERE model = :model AND terminated_at IS NULL;

-- name: node_live_scope
-- What a node's budgets are matched on: its role and model.
SELECT role, model FROM nodes WHERE id = :node_id AND terminated_at IS NULL;

-- name: tasks_in_progress_holders
-- The tasks in progress with their holders' role and model (a hard budget's stop).
SELECT t.id, t.assigned_to, n.role, n.model
FROM tasks t JOIN nodes n ON n.id = t.assigned_to AND n.terminated_at IS NULL
WHERE t.status = 'in_progress' ORDER BY t.id;
