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
    x bigint := least(pg_snapshot_xmax(s)::text::bigint,
                      pg_current_xact_id_if_assigned()::text::bigint);
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
    -- The oldest other transaction of s that may still add events here. This
    -- statement's snapshot is taken after the list above, so one of s's transactions
    -- missing from it has ended by now: if its events are here now, it is ours and
    -- committed after s; if not, it never writes here. One still running may be ours.
    -- (Under REPEATABLE READ this snapshot is s: every one counts as running.)
    SELECT least(x, min(v)) INTO x
    FROM (SELECT v::text::bigint AS v FROM pg_snapshot_xip(s) AS v) AS xip
    WHERE v < x AND v % 4294967296 <> ALL (others)
      AND (NOT pg_visible_in_snapshot(v::text::xid8, pg_current_snapshot())
           OR EXISTS (SELECT 1 FROM events WHERE seq >= v << 20 AND seq < (v + 1) << 20));
    -- corral.event_floor: a horizon read exactly just before this transaction began
    -- (PostgresStore._read_latest), valid for every later snapshot.
    RETURN greatest(x << 20,
                    nullif(current_setting('corral.event_floor', true), '')::bigint);
END
$$;
