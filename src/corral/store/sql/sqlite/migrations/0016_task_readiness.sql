-- Tasks with time and order (docs/core.md "Tasks with time and order",
-- docs/guardrails.md).
--
-- A task that is not ready yet is outside the claim's indexes: its status is
-- 'scheduled' (claimable from ready_at on: its not_before, or the end of a failed
-- attempt's retry_backoff) or 'blocked' (waiting_on of its dependencies are not done
-- yet), so tasks_open and the role heads (ready) hold only tasks a claim may take and
-- a claim stays two index heads. The monitor makes a scheduled task pending at its
-- ready_at (the head of tasks_ready_at) and takes a run back at claimed_at + timeout
-- (the head of tasks_timeout_at). A dependency's completion makes its dependents
-- ready in the completion's own transaction (tasks_release_dependents); task_deps
-- holds the edges, by dependency. taken_from: the node the monitor last took the task
-- back from (a run past its timeout, a stuck task requeued or failed), for the record.
-- dependents: how many tasks wait on this one (the trigger's guard: a completion of a
-- task nobody waits on costs nothing more).
ALTER TABLE tasks ADD COLUMN timeout REAL;
ALTER TABLE tasks ADD COLUMN retry_backoff REAL;
ALTER TABLE tasks ADD COLUMN not_before REAL;
ALTER TABLE tasks ADD COLUMN depends_on TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN ready_at REAL;
ALTER TABLE tasks ADD COLUMN waiting_on INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN dependents INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN taken_from TEXT;
CREATE INDEX tasks_ready_at ON tasks (ready_at) WHERE status = 'scheduled';
CREATE INDEX tasks_timeout_at ON tasks (claimed_at + timeout)
    WHERE status = 'in_progress' AND timeout IS NOT NULL;
CREATE TABLE task_deps (
    dep_id  INTEGER NOT NULL,
    task_id INTEGER NOT NULL,
    PRIMARY KEY (dep_id, task_id)
) WITHOUT ROWID;
CREATE TRIGGER tasks_release_dependents AFTER UPDATE OF status ON tasks
WHEN new.status = 'done' AND old.status <> 'done' AND new.dependents > 0
BEGIN
    UPDATE tasks SET waiting_on = waiting_on - 1
    WHERE id IN (SELECT task_id FROM task_deps WHERE dep_id = new.id) AND status = 'blocked';
    INSERT INTO ready (role, sort_key, created_at, task_id)
    SELECT r.value, t.sort_key, t.created_at, t.id
    FROM tasks t, json_each('["' || replace(t.roles, ' ', '","') || '"]') r
    WHERE t.id IN (SELECT task_id FROM task_deps WHERE dep_id = new.id)
      AND t.status = 'blocked' AND t.waiting_on = 0 AND t.roles <> ''
      AND (t.ready_at IS NULL OR t.ready_at <= new.updated_at);
    INSERT INTO events (ts, kind, task_id, data)
    SELECT new.updated_at, 'task_unblocked', t.id,
           json_object('after', new.id,
                       'status', CASE WHEN t.ready_at IS NULL OR t.ready_at <= new.updated_at
                                      THEN 'pending' ELSE 'scheduled' END)
    FROM tasks t
    WHERE t.id IN (SELECT task_id FROM task_deps WHERE dep_id = new.id)
      AND t.status = 'blocked' AND t.waiting_on = 0;
    UPDATE tasks SET status = CASE WHEN ready_at IS NULL OR ready_at <= new.updated_at
                                   THEN 'pending' ELSE 'scheduled' END,
                     updated_at = new.updated_at
    WHERE id IN (SELECT task_id FROM task_deps WHERE dep_id = new.id)
      AND status = 'blocked' AND waiting_on = 0;
END;
