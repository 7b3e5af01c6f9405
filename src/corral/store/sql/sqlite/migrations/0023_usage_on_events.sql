-- A completion's usage rides on its task_completed event (docs/guardrails.md, "Usage
-- and spend"; corral.store.sqlite.usage): its node's hour (usage_hours) gets it from
-- a roll-up, which keeps in meta 'usage_rolled' the last event seq it has looked past,
-- and every read adds the reports after it. The mark starts past every event written
-- before this migration (none carries a report: those went to usage_hours as they
-- were made), so no read goes through the old events. Kept if already there.
INSERT OR IGNORE INTO meta (key, value)
    SELECT 'usage_rolled', coalesce(max(seq), 0) FROM events;
