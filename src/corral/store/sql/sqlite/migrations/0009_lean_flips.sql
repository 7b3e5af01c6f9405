-- corral schema, version 9 (SQLite): a node's idle <-> working flip writes its row and
-- its nodes_idle_since entry, nothing more.
--
-- SQLite rewrites an index's entry whenever an UPDATE sets a column its key or its
-- WHERE clause names, even to the value it had. A live node is now one whose
-- terminated_at is NULL (set exactly when its status becomes 'terminated'), and the
-- partial indexes and triggers that follow liveness name terminated_at, not status;
-- a claim's or a completion's status change no longer re-stamps the node (only a due
-- stamp does, in a statement of its own), so a flip sets no column of nodes_dead_at.
UPDATE nodes SET terminated_at = last_activity
WHERE status = 'terminated' AND terminated_at IS NULL;
-- The live-node count by the new rule (the same as before wherever the rule held).
UPDATE meta SET value = CAST((SELECT count(*) FROM nodes WHERE terminated_at IS NULL) AS TEXT)
WHERE key = 'live_nodes';

DROP INDEX nodes_live_id;
CREATE UNIQUE INDEX nodes_live_id ON nodes (id) WHERE terminated_at IS NULL;
DROP INDEX nodes_dead_at;
CREATE INDEX nodes_dead_at ON nodes (dead_at) WHERE terminated_at IS NULL;

DROP TRIGGER task_claimed;
DROP TRIGGER task_completed;
-- A claim's and a completion's bookkeeping, in the statement that makes them: the
-- holder's row is re-stamped only when a tenth of its liveness window has passed since
-- the last stamp (lifecycle.STAMP_FRACTION; a change of status alone does not
-- re-stamp), each records its event, and a claim drops its role head. The status and
-- the stamp are separate statements, so a flip sets no column of nodes_dead_at.
-- Whether a completion leaves its node idle (lifecycle.status_after_finishing) is
-- decided by the store after the claim that may follow in the same call (the named
-- query node_now_idle), so a worker's complete-and-claim step does not rewrite its
-- node's row twice.
CREATE TRIGGER task_claimed AFTER UPDATE OF status ON tasks
WHEN old.status = 'pending' AND new.status = 'in_progress'
BEGIN
    UPDATE nodes SET status = 'working', idle_since = NULL, current_task_id = NULL
    WHERE id = new.assigned_to AND terminated_at IS NULL
      AND (status <> 'working' OR current_task_id IS NOT NULL);
    UPDATE nodes SET last_activity = new.claimed_at, dead_at = new.claimed_at + live_window
    WHERE id = new.assigned_to AND terminated_at IS NULL
      AND dead_at - new.claimed_at < live_window * 0.9;
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
    UPDATE nodes SET current_task_id = NULL
    WHERE id = new.assigned_to AND terminated_at IS NULL AND current_task_id = new.id;
    UPDATE nodes SET last_activity = new.finished_at, dead_at = new.finished_at + live_window
    WHERE id = new.assigned_to AND terminated_at IS NULL
      AND dead_at - new.finished_at < live_window * 0.9;
    INSERT INTO events (ts, kind, node_id, task_id, data)
    VALUES (new.finished_at, 'task_completed', new.assigned_to, new.id,
            json_object('epoch', new.epoch));
END;

DROP TRIGGER nodes_live_insert;
DROP TRIGGER nodes_live_update;
DROP TRIGGER nodes_live_delete;
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

DROP TRIGGER nodes_end_activations;
CREATE TRIGGER nodes_end_activations AFTER UPDATE OF terminated_at ON nodes
WHEN OLD.terminated_at IS NULL AND NEW.terminated_at IS NOT NULL
BEGIN
    UPDATE activations SET expires_at = min(expires_at, NEW.terminated_at)
    WHERE runner_id = NEW.id;
END;
