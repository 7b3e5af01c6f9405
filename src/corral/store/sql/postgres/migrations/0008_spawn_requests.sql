-- Spawn requests (corral.store.sqlspawn).
--
-- A pool in "ask" mode wants a member: one request is one spawn. An operator (or a
-- manager agent) accepts or declines it; the pool spawns an accepted one and notes
-- the member it became.
CREATE TABLE IF NOT EXISTS spawn_requests (
    id           bigserial PRIMARY KEY,
    pool         text NOT NULL,
    role         text NOT NULL,
    status       text NOT NULL DEFAULT 'pending',
    reason       text NOT NULL DEFAULT '',
    requested_by text NOT NULL,
    decided_by   text,
    member       text,
    created_at   double precision NOT NULL,
    decided_at   double precision,
    spawned_at   double precision
);
CREATE INDEX IF NOT EXISTS spawn_requests_by_status ON spawn_requests (status, id);
