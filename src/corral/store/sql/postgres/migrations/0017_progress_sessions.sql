-- Progress, stuck tasks and sessions (docs/guardrails.md).
--
-- session_id: a UUID a task's first claim fixes, the same for every later attempt (a
-- crashed agent session resumes its conversation with it). progress_timeout: the
-- task's own limit without progress (NULL: the cluster's setting). progress_at and
-- progress_note: the attempt's last progress report. stuck_at: when the attempt in
-- progress is stuck without further progress (NULL: no limit applies, or flagged
-- already); stuck_since: when it was flagged stuck. The monitor reads the next stuck
-- deadline from the head of tasks_stuck_at.
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS session_id text;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS progress_timeout double precision;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS progress_at double precision;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS progress_note text;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS stuck_at double precision;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS stuck_since double precision;
CREATE INDEX IF NOT EXISTS tasks_stuck_at ON tasks (stuck_at)
    WHERE stuck_at IS NOT NULL AND status = 'in_progress';
