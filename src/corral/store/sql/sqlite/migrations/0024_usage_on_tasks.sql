-- A completion's usage report is kept on its task's row (usage_last_*: the report the
-- completion made, NULL when it made none), set by the completion's own statement
-- beside the task's sums; its task_completed event carries no report any more
-- (docs/guardrails.md, "Usage and spend"). Building the report on the event in the
-- completion trigger read the node's row twice and made every claim and completion
-- run a larger trigger program; the columns cost the statement three values. The
-- roll-up (corral.store.sqlite.usage) still walks the completion events after its mark,
-- and reads each one's report from its task and the node's role and model from the
-- node's latest row (a registration that would change them rolls up first).
-- A task is completed at most once (nothing takes a done task back), so a report on
-- its row is its completion's.
ALTER TABLE tasks ADD COLUMN usage_last_input INTEGER;
ALTER TABLE tasks ADD COLUMN usage_last_output INTEGER;
ALTER TABLE tasks ADD COLUMN usage_last_micros INTEGER;
-- The reports the version before left on events not rolled up yet: on their tasks.
UPDATE tasks SET
    usage_last_input = json_extract(e.data, '$.usage.input_tokens'),
    usage_last_output = json_extract(e.data, '$.usage.output_tokens'),
    usage_last_micros = json_extract(e.data, '$.usage.cost_micros')
FROM events AS e
WHERE e.task_id = tasks.id AND e.kind = 'task_completed'
  AND e.seq > coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'usage_rolled'), 0)
  AND json_extract(e.data, '$.usage') IS NOT NULL;
