-- Event cursors that never skip an event committed late (docs/deploy.md, "Event
-- cursors"). A seq is (the writing transaction's id << 20) + its n-th event, so seqs
-- follow transaction ids, not the moment a sequence was read; a reader returns only
-- events of transactions older than every transaction still in flight in its snapshot
-- (queries.sql: events_since). At most 2^20 events per transaction (add_tasks takes
-- at most 100,000); older seqs (from the sequence) are all below the new ones.
CREATE FUNCTION corral_event_seqs(n integer) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    used bigint := coalesce(nullif(current_setting('corral.event_n', true), ''), '0')::bigint;
BEGIN
    IF used + n > 1048576 THEN
        RAISE EXCEPTION 'corral: more than 1048576 events in one transaction';
    END IF;
    PERFORM set_config('corral.event_n', (used + n)::text, true);
    RETURN (pg_current_xact_id()::text::bigint << 20) + used;
END
$$;

ALTER TABLE events ALTER COLUMN seq SET DEFAULT corral_event_seqs(1);
DROP SEQUENCE events_seq_seq;
