-- The event horizon, exact on a shared server (docs/deploy.md, "Event cursors"): the
-- reads of events_since, events_last and process_actions_since return only events
-- below it. Before, a transaction of another database that ended between the read's
-- snapshot and its look at the running transactions could not be placed and held the
-- horizon below it: a read could miss an event committed just before it.
CREATE FUNCTION corral_event_horizon(s pg_snapshot) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    -- Running transactions that never write here: those of other databases (and
    -- their prepared ones), and autovacuum's.
    others bigint[];
    fresh pg_snapshot;
    x bigint;
    h bigint := least(pg_snapshot_xmax(s)::text::bigint,
                      pg_current_xact_id_if_assigned()::text::bigint);
    floor_seq bigint := nullif(current_setting('corral.event_floor', true), '')::bigint;
BEGIN
    PERFORM pg_stat_clear_snapshot();  -- not a list cached earlier in this transaction
    others := ARRAY(
        SELECT a.backend_xid::text::bigint FROM pg_stat_get_activity(NULL) AS a
        WHERE a.backend_xid IS NOT NULL
          AND (a.datid <> (SELECT oid FROM pg_database WHERE datname = current_database())
               OR a.backend_type = 'autovacuum worker')
        UNION ALL
        SELECT p.transaction::text::bigint FROM pg_prepared_xacts AS p
        WHERE p.database <> current_database());
    -- Taken after the list: a transaction of s not in it has ended by now.
    fresh := pg_current_snapshot();
    FOR x IN SELECT v::text::bigint FROM pg_snapshot_xip(s) AS v ORDER BY 1 LOOP
        EXIT WHEN x >= h;
        CONTINUE WHEN x % 4294967296 = ANY (others);
        -- Still running (or, under REPEATABLE READ, where fresh is s: unknown): it may
        -- be ours. Ended: ours and committed after s if its events are there now;
        -- otherwise it will never write here.
        IF NOT pg_visible_in_snapshot(x::text::xid8, fresh)
           OR EXISTS (SELECT 1 FROM events WHERE seq >= x << 20 AND seq < (x + 1) << 20) THEN
            h := x;
            EXIT;
        END IF;
    END LOOP;
    -- corral.event_floor: a horizon read exactly just before this transaction began
    -- (PostgresStore._read_latest), valid for every later snapshot.
    RETURN greatest(h << 20, floor_seq);
END
$$;
