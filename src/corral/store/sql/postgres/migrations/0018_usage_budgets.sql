-- Usage and spend, budgets and per-model caps (docs/guardrails.md, corral.budgets).
--
-- usage_buckets: the sums of the usage reports (complete_task, fail_task,
-- report_progress, heartbeat) per scope ('cluster', 'task:N', 'node:ID', 'role:R',
-- 'model:M', 'pool:P') and hour (start: the hour's first second). A report adds to
-- the rows of every scope it counts for in one upsert, in its operation's own
-- transaction; cost is in micro-dollars so concurrent reports sum exactly. A day or a
-- longer window is the sum of its hours (a point read per hour and scope). The key is
-- (start, scope) and a task's scope is stored as '#' and its id in 18 digits, so an
-- hour's rows are together, its tasks first in id order and its other scopes last:
-- a report writes the newest task's row beside its hour's other rows (one page).
-- budget_marks: the highest threshold (0.8 or 1.0) each budget's current window has
-- been announced at, so a crossing is one event.
-- nodes_live_model: a capped model's live nodes, counted at registration.
CREATE TABLE IF NOT EXISTS usage_buckets (
    scope         text NOT NULL,
    start         double precision NOT NULL,
    input_tokens  bigint NOT NULL DEFAULT 0,
    output_tokens bigint NOT NULL DEFAULT 0,
    cost_micros   bigint NOT NULL DEFAULT 0,
    reports       bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (start, scope)
);
CREATE TABLE IF NOT EXISTS budget_marks (
    budget        text NOT NULL,
    window_start  double precision NOT NULL,
    mark          double precision NOT NULL,
    PRIMARY KEY (budget, window_start)
);
CREATE INDEX IF NOT EXISTS nodes_live_model ON nodes (model) WHERE terminated_at IS NULL;
