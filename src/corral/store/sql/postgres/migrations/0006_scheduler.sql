-- The activation scheduler (corral.scheduler).
--
-- agents: each agent to activate, its config and its scheduling state. unread is kept
-- by notify and by the reads (never a count over notifications); held_by names the
-- runner holding its activation lease. The partial indexes are the assignment
-- order's heads (corral.scheduler.policy): the inbox (most unread first), due cron
-- overrides, and the stalest (never activated first: NULLS FIRST written out, as
-- PostgreSQL sorts NULLs last in ascending order). Ids compare as bytes (COLLATE "C"),
-- as Python compares them. The stalest come in two heads: agents under the cluster's
-- minimum interval (their rested ones are a prefix of the order, so the head alone
-- says whether any is rested) and the few with an interval of their own.
CREATE TABLE agents (
    id                text COLLATE "C" PRIMARY KEY,
    config            text NOT NULL DEFAULT '{}',
    unread            bigint NOT NULL DEFAULT 0,
    last_activated_at double precision,
    activation_count  bigint NOT NULL DEFAULT 0,
    held_by           text,
    epoch             bigint NOT NULL DEFAULT 0,
    min_interval      double precision,
    next_due_at       double precision,
    next_due_task     text,
    cap_day           bigint NOT NULL DEFAULT 0,
    posts_today       bigint NOT NULL DEFAULT 0,
    comments_today    bigint NOT NULL DEFAULT 0,
    created_at        double precision NOT NULL,
    updated_at        double precision NOT NULL
);
CREATE INDEX agents_inbox ON agents (unread DESC, last_activated_at ASC NULLS FIRST, id)
    WHERE held_by IS NULL AND unread > 0;
CREATE INDEX agents_due ON agents (next_due_at, id)
    WHERE held_by IS NULL AND next_due_at IS NOT NULL;
CREATE INDEX agents_stale ON agents (last_activated_at ASC NULLS FIRST, id)
    WHERE held_by IS NULL AND unread = 0 AND min_interval IS NULL;
CREATE INDEX agents_stale_own ON agents (last_activated_at ASC NULLS FIRST, id)
    WHERE held_by IS NULL AND unread = 0 AND min_interval IS NOT NULL;

-- An agent's inbox; read items stay (read_at set) for the record.
CREATE TABLE notifications (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent_id   text COLLATE "C" NOT NULL,
    payload    text NOT NULL,
    created_at double precision NOT NULL,
    read_at    double precision
);
CREATE INDEX notifications_unread ON notifications (agent_id, id) WHERE read_at IS NULL;
CREATE INDEX notifications_unread_age ON notifications (created_at) WHERE read_at IS NULL;

-- The live activation leases: one per agent at most (the UNIQUE backstop), gone when
-- released or expired. Identity ids are never reused, so a late release of an old
-- assignment finds nothing to release.
CREATE TABLE activations (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent_id      text COLLATE "C" NOT NULL UNIQUE,
    runner_id     text NOT NULL,
    mode          text NOT NULL,
    kind          text NOT NULL,
    epoch         bigint NOT NULL,
    task          text,
    due_at        double precision,
    inbox_upto    bigint,
    posts_left    bigint,
    comments_left bigint,
    claimed_at    double precision NOT NULL,
    expires_at    double precision NOT NULL
);
CREATE INDEX activations_expiry ON activations (expires_at);
CREATE INDEX activations_runner ON activations (runner_id);

-- The mode each runner last asked in (for /metrics).
CREATE TABLE runners (
    id      text PRIMARY KEY,
    mode    text NOT NULL,
    seen_at double precision NOT NULL
);

-- An activation lives while its runner's node does: the node's end (termination,
-- death, retirement) brings its activations' expiry forward to that moment, and the
-- monitor clears them at that deadline.
CREATE FUNCTION corral_end_activations() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE activations
    SET expires_at = least(expires_at, coalesce(NEW.terminated_at, NEW.last_activity))
    WHERE runner_id = NEW.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER nodes_end_activations AFTER UPDATE OF status ON nodes
    FOR EACH ROW WHEN (NEW.status = 'terminated' AND OLD.status <> 'terminated')
    EXECUTE FUNCTION corral_end_activations();
