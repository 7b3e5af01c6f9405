-- corral schema, version 3 (SQLite): finishing its last task returns a node to idle.
--
-- A completion clears the node's current task and, when the node was working, is no
-- bootstrap manager and holds no other task, marks it idle with idle_since set (so an
-- idle node is retired at its idle limit); a claim in the same transaction makes it
-- working again (lifecycle.after_finishing).
DROP TRIGGER task_completed;
CREATE TRIGGER task_completed AFTER UPDATE OF status ON tasks
WHEN old.status = 'in_progress' AND new.status = 'done'
BEGIN
    UPDATE nodes SET
        idle_since = CASE WHEN status = 'working' AND role <> 'bootstrap_manager'
                               AND NOT EXISTS (SELECT 1 FROM tasks h
                                               WHERE h.assigned_to = new.assigned_to
                                                 AND h.status = 'in_progress')
                          THEN new.finished_at ELSE idle_since END,
        current_task_id = CASE WHEN current_task_id = new.id
                                    OR (status = 'working' AND role <> 'bootstrap_manager'
                                        AND NOT EXISTS (SELECT 1 FROM tasks h
                                                        WHERE h.assigned_to = new.assigned_to
                                                          AND h.status = 'in_progress'))
                               THEN NULL ELSE current_task_id END,
        status = CASE WHEN status = 'working' AND role <> 'bootstrap_manager'
                           AND NOT EXISTS (SELECT 1 FROM tasks h
                                           WHERE h.assigned_to = new.assigned_to
                                             AND h.status = 'in_progress')
                      THEN 'idle' ELSE status END,
        last_activity = new.finished_at, dead_at = new.finished_at + live_window
    WHERE id = new.assigned_to AND status <> 'terminated'
      AND (current_task_id = new.id OR dead_at - new.finished_at < live_window * 0.9
           OR (status = 'working' AND role <> 'bootstrap_manager'
               AND NOT EXISTS (SELECT 1 FROM tasks h
                               WHERE h.assigned_to = new.assigned_to
                                 AND h.status = 'in_progress')));
    INSERT INTO events (ts, kind, node_id, task_id, data)
    VALUES (new.finished_at, 'task_completed', new.assigned_to, new.id,
            json_object('epoch', new.epoch));
END;
