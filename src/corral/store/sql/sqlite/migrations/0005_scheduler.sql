-- corral schema, version 5 (SQLite): the activation scheduler (corral.scheduler).
--
-- agents: each agent to activate, its config and its scheduling state. unread is kept
-- by notify and by the reads (never a count over notifications); held_by names the
-- runner holding its activation lease. The partial indexes are the assignment
-- order's heads (corral.scheduler.policy): the inbox (most unread first), due cron
-- overrides, and the stalest (never activated first: NULLS FIRST, SQLite's order for
-- ascending keys, written out in the queries). Ids compare as bytes (BINARY), as
-- Python compares them. The stalest come in two heads: agents under the cluster's
-- minimum interval (their rested ones are a prefix of the order, so the head alone
-- says whether any is rested) and the few with an interval of their own.
CREATE TABLE agents (
    id                TEXT PRIMARY KEY,
    config            TEXT NOT NULL DEFAULT '{}',
    unread            INTEGER NOT NULL DEFAULT 0,
    last_activated_at REAL,
    activation_count  INTEGER NOT NULL DEFAULT 0,
    held_by           TEXT,
    epoch             INTEGER NOT NULL DEFAULT 0,
    min_interval      REAL,
    next_due_at       REAL,
    next_due_task     TEXT,
    cap_day           INTEGER NOT NULL DEFAULT 0,
    posts_today       INTEGER NOT NULL DEFAULT 0,
    comments_today    INTEGER NOT NULL DEFAULT 0,
    created_at        REAL NOT NULL,
    updated_at        REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX agents_inbox ON agents (unread DESC, last_activated_at, id)
    WHERE held_by IS NULL AND unread > 0;
CREATE INDEX agents_due ON agents (next_due_at, id)
    WHERE held_by IS NULL AND next_due_at IS NOT NULL;
CREATE INDEX agents_stale ON agents (last_activated_at, id)
    WHERE held_by IS NULL AND unread = 0 AND min_interval IS NULL;
CREATE INDEX agents_stale_own ON agents (last_activated_at, id)
    WHERE held_by IS NULL AND unread = 0 AND min_interval IS NOT NULL;

-- An agent's inbox; read items stay (read_at set) for the record.
CREATE TABLE notifications (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id   TEXT NOT NULL,
    payload    TEXT NOT NULL,
    created_at REAL NOT NULL,
    read_at    REAL
);
CREATE INDEX notifications_unread ON notifications (agent_id, id) WHERE read_at IS NULL;
CREATE INDEX notifications_unread_age ON notifications (created_at) WHERE read_at IS NULL;

-- The live activation leases: one per agent at most (the UNIQUE backstop), gone when
-- released or expired. Ids are never reused (AUTOINCREMENT), so a late release of an
-- old assignment finds nothing to release.
CREATE TABLE activations (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id      TEXT NOT NULL UNIQUE,
    runner_id     TEXT NOT NULL,
    mode          TEXT NOT NULL,
    kind          TEXT NOT NULL,
    epoch         INTEGER NOT NULL,
    task          TEXT,
    due_at        REAL,
    inbox_upto    INTEGER,
    posts_left    INTEGER,
    comments_left INTEGER,
    claimed_at    REAL NOT NULL,
    expires_at    REAL NOT NULL
);
CREATE INDEX activations_expiry ON activations (expires_at);
CREATE INDEX activations_runner ON activations (runner_id);

-- The mode each runner last asked in (for /metrics).
CREATE TABLE runners (
    id      TEXT PRIMARY KEY,
    mode    TEXT NOT NULL,
    seen_at REAL NOT NULL
) WITHOUT ROWID;

-- An activation lives while its runner's node does: the node's end (termination,
-- death, retirement) brings its activations' expiry forward to that moment, and the
-- monitor clears them at that deadline.
CREATE TRIGGER nodes_end_activations AFTER UPDATE OF status ON nodes
WHEN NEW.status = 'terminated' AND OLD.status <> 'terminated'
BEGIN
    UPDATE activations
    SET expires_at = min(expires_at, coalesce(NEW.terminated_at, NEW.last_activity))
    WHERE runner_id = NEW.id;
END;
