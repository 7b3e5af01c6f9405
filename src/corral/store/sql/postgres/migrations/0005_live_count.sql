-- The live-node count kept as the nodes change.
--
-- meta 'live_nodes' is the number of nodes whose status is not 'terminated', so the
-- capacity check at registration reads one row instead of counting the fleet. The
-- triggers change it in the same transaction as the node (every path that makes a
-- node live or not: registration, termination, reaping, idle retirement); it starts
-- from a recount. They are deferred to the commit: the counter row is then the last
-- lock a transaction takes, held only while it commits, so transactions that end
-- nodes in different orders never deadlock on it. Registration reads it after taking
-- lock_registry, which is held until its own increment has committed, so capacity
-- stays serialised.
INSERT INTO meta (key, value)
    SELECT 'live_nodes', count(*)::text FROM nodes WHERE status <> 'terminated'
    ON CONFLICT (key) DO UPDATE SET value = excluded.value;

CREATE FUNCTION corral_live_nodes() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE meta SET value = (value::bigint + CASE
        WHEN TG_OP = 'INSERT' THEN 1
        WHEN TG_OP = 'DELETE' THEN -1
        WHEN NEW.status <> 'terminated' THEN 1
        ELSE -1 END)::text
    WHERE key = 'live_nodes';
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER nodes_live_insert AFTER INSERT ON nodes
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.status <> 'terminated') EXECUTE FUNCTION corral_live_nodes();
CREATE CONSTRAINT TRIGGER nodes_live_update AFTER UPDATE OF status ON nodes
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN ((OLD.status <> 'terminated') <> (NEW.status <> 'terminated'))
    EXECUTE FUNCTION corral_live_nodes();
CREATE CONSTRAINT TRIGGER nodes_live_delete AFTER DELETE ON nodes
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.status <> 'terminated') EXECUTE FUNCTION corral_live_nodes();
