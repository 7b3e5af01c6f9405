-- corral schema, version 2 (SQLite): a claim and a completion each become one statement.
--
-- One index serves both open states: pending tasks in claim order (their holder is
-- always NULL) and held tasks by holder. 'in_progress' sorts just before 'pending', so
-- with few tasks held a claim and a completion change one index page, not two.
DROP INDEX tasks_ready;
DROP INDEX tasks_holder;
CREATE INDEX tasks_open ON tasks (status, assigned_to, sort_key, created_at, id)
    WHERE status = 'pending' OR status = 'in_progress';

-- The bookkeeping of a claim and of a completion, in the statement that makes them:
-- the holder's row is re-stamped only when a tenth of its liveness window has passed
-- since the last stamp (lifecycle.STAMP_FRACTION) or its state changes, each records
-- its event, and a claim drops its role head.
ALTER TABLE tasks ADD COLUMN claimed_role TEXT;
CREATE TRIGGER task_claimed AFTER UPDATE OF status ON tasks
WHEN old.status = 'pending' AND new.status = 'in_progress'
BEGIN
    UPDATE nodes SET status = 'working', idle_since = NULL, current_task_id = NULL,
                     last_activity = new.claimed_at, dead_at = new.claimed_at + live_window
    WHERE id = new.assigned_to AND status <> 'terminated'
      AND (status <> 'working' OR current_task_id IS NOT NULL
           OR dead_at - new.claimed_at < live_window * 0.9);
    INSERT INTO events (ts, kind, node_id, task_id, data)
    VALUES (new.claimed_at, 'task_claimed', new.assigned_to, new.id,
            json_object('epoch', new.epoch, 'role', new.claimed_role, 'attempt', new.attempts));
    -- A task matching one role has one role head (a task matching several: the store
    -- drops them; role names hold no spaces).
    DELETE FROM ready
    WHERE old.roles <> '' AND instr(old.roles, ' ') = 0 AND role = old.roles
      AND sort_key = old.sort_key AND created_at = old.created_at AND task_id = old.id;
END;

CREATE TRIGGER task_completed AFTER UPDATE OF status ON tasks
WHEN old.status = 'in_progress' AND new.status = 'done'
BEGIN
    UPDATE nodes SET current_task_id = CASE WHEN current_task_id = new.id THEN NULL
                                            ELSE current_task_id END,
                     last_activity = new.finished_at, dead_at = new.finished_at + live_window
    WHERE id = new.assigned_to AND status <> 'terminated'
      AND (current_task_id = new.id OR dead_at - new.finished_at < live_window * 0.9);
    INSERT INTO events (ts, kind, node_id, task_id, data)
    VALUES (new.finished_at, 'task_completed', new.assigned_to, new.id,
            json_object('epoch', new.epoch));
END;
