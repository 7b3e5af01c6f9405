-- Usage kept per node and hour, and per task on the task's row (docs/guardrails.md).
--
-- usage_hours replaces usage_buckets: one row per hour (start: the hour's first
-- second) and reporting node, carrying the node's role and model as registered when
-- the report was written ('' when it had none, or was not live) and its pool (a pool
-- member is the node '<pool>-<n>'). A report adds to its one row, in its operation's
-- own transaction (one upsert: reports by different nodes lock different rows); the
-- sums of a scope (the cluster, role:R, model:M, pool:P, node:N) are computed at read,
-- over the window's hours, on the index of its column. A task's sums are kept on its
-- own row (usage_*), updated by the completion's own statement. Cost is in
-- micro-dollars so concurrent reports sum exactly.
--
-- The sums recorded so far are carried over: each node's hourly rows, with the role
-- and model of its live row at migration (else ''), and each task's rows summed onto
-- the task.
CREATE TABLE IF NOT EXISTS usage_hours (
    start         double precision NOT NULL,
    node_id       text NOT NULL,
    role          text NOT NULL,
    model         text NOT NULL,
    pool          text,
    input_tokens  bigint NOT NULL DEFAULT 0,
    output_tokens bigint NOT NULL DEFAULT 0,
    cost_micros   bigint NOT NULL DEFAULT 0,
    reports       bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (start, node_id, role, model)
);
CREATE INDEX IF NOT EXISTS usage_hours_node ON usage_hours (node_id, start);
CREATE INDEX IF NOT EXISTS usage_hours_role ON usage_hours (role, start);
CREATE INDEX IF NOT EXISTS usage_hours_model ON usage_hours (model, start) WHERE model <> '';
CREATE INDEX IF NOT EXISTS usage_hours_pool ON usage_hours (pool, start) WHERE pool IS NOT NULL;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS usage_input_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS usage_output_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS usage_cost_micros bigint NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS usage_reports bigint NOT NULL DEFAULT 0;
DO $$
BEGIN
    IF to_regclass('usage_buckets') IS NOT NULL THEN
        INSERT INTO usage_hours (start, node_id, role, model, pool, input_tokens,
                                 output_tokens, cost_micros, reports)
        SELECT b.start, substr(b.scope, 6), coalesce(n.role, ''), coalesce(n.model, ''),
               substring(substr(b.scope, 6) FROM '^(.+)-[0-9]+$'),  -- budgets.pool_of
               b.input_tokens, b.output_tokens, b.cost_micros, b.reports
        FROM usage_buckets b
        LEFT JOIN nodes n ON n.id = substr(b.scope, 6) AND n.status <> 'terminated'
        WHERE b.scope LIKE 'node:%'
        ON CONFLICT DO NOTHING;
        UPDATE tasks SET usage_input_tokens = s.i, usage_output_tokens = s.o,
                         usage_cost_micros = s.c, usage_reports = s.r
        FROM (SELECT substr(scope, 2)::bigint AS id, sum(input_tokens) AS i,
                     sum(output_tokens) AS o, sum(cost_micros) AS c, sum(reports) AS r
              FROM usage_buckets WHERE scope LIKE '#%' GROUP BY scope) AS s
        WHERE tasks.id = s.id;
        DROP TABLE usage_buckets;
    END IF;
END
$$;
