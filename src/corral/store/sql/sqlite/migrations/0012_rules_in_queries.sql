-- corral schema, version 12 (SQLite): the claim's and the completion's bookkeeping
-- leaves the schema. Its rule (lifecycle.stamp_due, with its fraction written as a
-- literal) lived in the permanent triggers task_claimed and task_completed, so each
-- change of the rule was a migration rewriting them (0002, 0009). The same triggers
-- are now TEMP triggers each SQLiteStore connection creates from queries.sql when it
-- opens (trigger_task_claimed, trigger_task_completed: corral_task_claimed and
-- corral_task_completed), including the rule stamp_due written once there; a rule
-- change is an edit of queries.sql. The claim and the completion stay one statement.
DROP TRIGGER IF EXISTS main.task_claimed;
DROP TRIGGER IF EXISTS main.task_completed;
