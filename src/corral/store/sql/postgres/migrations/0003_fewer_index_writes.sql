-- Fewer index entries written per job (docs/performance.md, PostgreSQL).
-- tasks_status (status, id) took an entry at every claim and every completion; the
-- pending and in-progress tasks already have their partial indexes (tasks_ready,
-- tasks_holder), so only finished tasks need one: written once, at the end.
DROP INDEX tasks_status;
CREATE INDEX tasks_finished ON tasks (status, id)
    WHERE status <> 'pending' AND status <> 'in_progress';
-- events_ts served only the hourly prune, which now walks the seq order from the
-- oldest event (events are appended in time order), reading just what it deletes.
DROP INDEX events_ts;
