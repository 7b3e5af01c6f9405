-- corral schema, version 4 (SQLite): the live-node count kept as the nodes change.
--
-- meta 'live_nodes' is the number of nodes whose status is not 'terminated', so the
-- capacity check at registration reads one row instead of counting the fleet. The
-- triggers change it in the same transaction as the node (every path that makes a
-- node live or not: registration, termination, reaping, idle retirement); it starts
-- from a recount.
INSERT OR REPLACE INTO meta (key, value)
    SELECT 'live_nodes', count(*) FROM nodes WHERE status <> 'terminated';

CREATE TRIGGER nodes_live_insert AFTER INSERT ON nodes
WHEN NEW.status <> 'terminated'
BEGIN
    UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'live_nodes';
END;

CREATE TRIGGER nodes_live_update AFTER UPDATE OF status ON nodes
WHEN (OLD.status <> 'terminated') <> (NEW.status <> 'terminated')
BEGIN
    UPDATE meta SET value = CAST(value AS INTEGER)
        + (CASE WHEN NEW.status <> 'terminated' THEN 1 ELSE -1 END)
    WHERE key = 'live_nodes';
END;

CREATE TRIGGER nodes_live_delete AFTER DELETE ON nodes
WHEN OLD.status <> 'terminated'
BEGIN
    UPDATE meta SET value = CAST(value AS INTEGER) - 1 WHERE key = 'live_nodes';
END;
