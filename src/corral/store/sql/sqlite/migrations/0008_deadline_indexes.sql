-- corral schema, version 8 (SQLite): the monitor's deadlines read from index heads.
--
-- A node's death deadline (dead_at: its last sign of life plus its liveness window,
-- kept by every write that stamps it) and its idle start are indexed over the nodes
-- they concern, so the monitor's wake reads the earliest of each from an index head
-- and its passes visit only the nodes past their deadline, whatever the fleet's size.
-- (IF NOT EXISTS: opening a database migrated by hand again changes nothing.)
CREATE INDEX IF NOT EXISTS nodes_dead_at ON nodes (dead_at) WHERE status <> 'terminated';
CREATE INDEX IF NOT EXISTS nodes_idle_since ON nodes (idle_since)
    WHERE status = 'idle' AND role <> 'bootstrap_manager';
