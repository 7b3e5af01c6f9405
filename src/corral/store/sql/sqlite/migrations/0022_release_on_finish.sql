-- The dependents' release (migration 0016) costs a claim nothing and a completion of a
-- task nobody waits on little. SQLite sets up the frame of every trigger a statement
-- may fire before testing its condition (its WHEN), at a cost in the size of the
-- trigger's program: the release, firing on every change of status, was set up by
-- every claim and every completion. It now fires on finished_at, which every
-- finishing statement sets (task_complete, task_complete_usage) and no claim does,
-- and only notes the completion in task_releases (a one-row insert's program); that
-- row's insert does the release and deletes the row (task_releases_run), in the
-- completion's statement as before. (PostgreSQL's 0021 moved its trigger to
-- finished_at too.)
DROP TRIGGER tasks_release_dependents;
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
