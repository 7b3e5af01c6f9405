-- The dependents' release (migration 0016) costs a claim nothing: the trigger fires on
-- a finishing statement (every one sets finished_at; a claim sets none) of a task
-- others wait on, instead of on every change of status (a claim's too, which then
-- evaluated its condition), and the function goes on only for a completion.
CREATE OR REPLACE FUNCTION corral_release_dependents() RETURNS trigger
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
DROP TRIGGER IF EXISTS tasks_release_dependents ON tasks;
CREATE TRIGGER tasks_release_dependents AFTER UPDATE OF finished_at ON tasks
FOR EACH ROW WHEN (NEW.dependents > 0)
EXECUTE FUNCTION corral_release_dependents();
