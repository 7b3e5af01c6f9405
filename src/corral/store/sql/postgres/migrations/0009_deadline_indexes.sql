-- The monitor's deadlines read from index heads: dead_at had its index
-- (nodes_dead_at); the idle start gets one over the nodes the monitor may retire, so
-- the wake reads the earliest idle start from an index head and the retirement pass
-- visits only the nodes past their limit, whatever the fleet's size.
CREATE INDEX nodes_idle_since ON nodes (idle_since)
    WHERE status = 'idle' AND role <> 'bootstrap_manager';
