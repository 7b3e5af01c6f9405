-- Progress, stuck tasks and sessions (docs/guardrails.md).
--
-- session_id: a UUID a task's first claim fixes, the same for every later attempt (a
-- crashed agent session resumes its conversation with it). progress_timeout: the
-- task's own limit without progress (NULL: the cluster's setting). progress_at and
-- progress_note: the attempt's last progress report. stuck_at: when the attempt in
-- progress is stuck without further progress (NULL: no limit applies, or flagged
-- already); stuck_since: when it was flagged stuck. The monitor reads the next stuck
-- deadline from the head of tasks_stuck_at.
ALTER TABLE tasks ADD COLUMN session_id TEXT;
ALTER TABLE tasks ADD COLUMN progress_timeout REAL;
ALTER TABLE tasks ADD COLUMN progress_at REAL;
ALTER TABLE tasks ADD COLUMN progress_note TEXT;
ALTER TABLE tasks ADD COLUMN stuck_at REAL;
ALTER TABLE tasks ADD COLUMN stuck_since REAL;
CREATE INDEX tasks_stuck_at ON tasks (stuck_at)
    WHERE stuck_at IS NOT NULL AND status = 'in_progress';
