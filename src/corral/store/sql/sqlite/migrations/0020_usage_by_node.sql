-- Usage kept per node and hour, and per task on the task's row (docs/guardrails.md).
--
-- usage_hours replaces usage_buckets: one row per hour (start: the hour's first
-- second) and reporting node, carrying the node's role and model as registered when
-- the report was written ('' when it had none, or was not live) and its pool (a pool
-- member is the node '<pool>-<n>'). A report adds to its one row, in its operation's
-- own transaction; the sums of a scope (the cluster, role:R, model:M, pool:P, node:N)
-- are computed at read, over the window's hours, on the index of its column. A task's
-- sums are kept on its own row (usage_*), updated by the completion's own statement.
-- Cost is in micro-dollars so concurrent reports sum exactly.
--
-- The sums recorded so far are carried over: each node's hourly rows, with the role
-- and model of its live row at migration (else ''), and each task's rows summed onto
-- the task.
CREATE TABLE usage_hours (
    start         REAL NOT NULL,
    node_id       TEXT NOT NULL,
    role          TEXT NOT NULL,
    model         TEXT NOT NULL,
    pool          TEXT,
    input_tokens  INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cost_micros   INTEGER NOT NULL DEFAULT 0,
    reports       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (start, node_id, role, model)
) WITHOUT ROWID;
CREATE INDEX usage_hours_node ON usage_hours (node_id, start);
CREATE INDEX usage_hours_role ON usage_hours (role, start);
CREATE INDEX usage_hours_model ON usage_hours (model, start) WHERE model <> '';
CREATE INDEX usage_hours_pool ON usage_hours (pool, start) WHERE pool IS NOT NULL;
ALTER TABLE tasks ADD COLUMN usage_input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN usage_output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN usage_cost_micros INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN usage_reports INTEGER NOT NULL DEFAULT 0;
INSERT OR IGNORE INTO usage_hours (start, node_id, role, model, pool, input_tokens,
                                   output_tokens, cost_micros, reports)
SELECT b.start, substr(b.scope, 6), coalesce(n.role, ''), coalesce(n.model, ''),
       -- budgets.pool_of: the id without its '-<digits>' end
       CASE WHEN rtrim(substr(b.scope, 6), '0123456789') <> substr(b.scope, 6)
             AND rtrim(substr(b.scope, 6), '0123456789') LIKE '_%-'
            THEN substr(rtrim(substr(b.scope, 6), '0123456789'), 1,
                        length(rtrim(substr(b.scope, 6), '0123456789')) - 1) END,
       b.input_tokens, b.output_tokens, b.cost_micros, b.reports
FROM usage_buckets b
LEFT JOIN nodes n ON n.id = substr(b.scope, 6) AND n.terminated_at IS NULL
WHERE b.scope LIKE 'node:%';
UPDATE tasks SET
    usage_input_tokens = (SELECT sum(input_tokens) FROM usage_buckets
                          WHERE scope = printf('#%018d', tasks.id)),
    usage_output_tokens = (SELECT sum(output_tokens) FROM usage_buckets
                           WHERE scope = printf('#%018d', tasks.id)),
    usage_cost_micros = (SELECT sum(cost_micros) FROM usage_buckets
                         WHERE scope = printf('#%018d', tasks.id)),
    usage_reports = (SELECT sum(reports) FROM usage_buckets
                     WHERE scope = printf('#%018d', tasks.id))
WHERE id IN (SELECT CAST(substr(scope, 2) AS INTEGER) FROM usage_buckets WHERE scope LIKE '#%');
DROP TABLE usage_buckets;
