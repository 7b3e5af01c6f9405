-- Tasks with time and order (docs/core.md "Tasks with time and order",
-- docs/guardrails.md).
--
-- A task that is not ready yet is outside the claim's indexes: its status is
-- 'scheduled' (claimable from ready_at on: its not_before, or the end of a failed
-- attempt's retry_backoff) or 'blocked' (waiting_on of its dependencies are not done
-- yet), so tasks_ready and the role heads (ready) hold only tasks a claim may take and
-- a claim stays two index heads. The monitor makes a scheduled task pending at its
-- ready_at (the head of tasks_ready_at) and takes a run back at claimed_at + timeout
-- (the head of tasks_timeout_at). A dependency's completion makes its dependents
-- ready in the completion's own transaction (tasks_release_dependents, which also
-- wakes waiting claims); task_deps holds the edges, by dependency. taken_from: the
-- node the monitor last took the task back from (a run past its timeout, a stuck task
-- requeued or failed), for the record. dependents: how many tasks wait on this one
-- (the trigger's guard: a completion of a task nobody waits on costs nothing more).
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS timeout double precision;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS retry_backoff double precision;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS not_before double precision;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS depends_on text NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS ready_at double precision;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS waiting_on integer NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS dependents integer NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS taken_from text;
CREATE INDEX IF NOT EXISTS tasks_ready_at ON tasks (ready_at) WHERE status = 'scheduled';
CREATE INDEX IF NOT EXISTS tasks_timeout_at ON tasks ((claimed_at + timeout))
    WHERE status = 'in_progress' AND timeout IS NOT NULL;
CREATE TABLE IF NOT EXISTS task_deps (
    dep_id  bigint NOT NULL,
    task_id bigint NOT NULL,
    PRIMARY KEY (dep_id, task_id)
);
CREATE OR REPLACE FUNCTION corral_release_dependents() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    woken integer;
BEGIN
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
DROP TRIGGER IF EXISTS tasks_release_dependents ON tasks;
CREATE TRIGGER tasks_release_dependents AFTER UPDATE OF status ON tasks
FOR EACH ROW WHEN (NEW.status = 'done' AND OLD.status <> 'done' AND NEW.dependents > 0)
EXECUTE FUNCTION corral_release_dependents();
