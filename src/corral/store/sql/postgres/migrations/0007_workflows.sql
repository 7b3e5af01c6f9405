-- Workflow runs reported by their hosts (corral.store.sqlworkflows).
--
-- A host declares the workflows it serves (workflow_hosts, seen_at refreshed by its
-- polls). A handler is one run: claimable by a host serving its workflow from
-- claim_at on (a new run at once; a released run when an event arrives or at its
-- earliest waiter deadline). handler_inbox holds the events sent and not yet taken
-- by the run's host.
CREATE TABLE workflow_hosts (
    workflow           text NOT NULL,
    host               text NOT NULL,
    idle_release_after double precision,
    seen_at            double precision NOT NULL,
    PRIMARY KEY (workflow, host)
);
CREATE INDEX workflow_hosts_host ON workflow_hosts (host);
CREATE TABLE handlers (
    handler_id      text PRIMARY KEY,
    workflow        text NOT NULL,
    host            text,
    status          text NOT NULL,
    idle_since      double precision,
    waiters         text NOT NULL DEFAULT '[]',
    wake_at         double precision,
    claim_at        double precision,
    release_after   double precision,
    start           text NOT NULL DEFAULT '{}',
    checkpoint      text,
    result          text,
    error           text,
    resident_reason text,
    resumes         bigint NOT NULL DEFAULT 0,
    created_at      double precision NOT NULL,
    updated_at      double precision NOT NULL,
    released_at     double precision,
    finished_at     double precision
);
CREATE INDEX handlers_idle ON handlers (idle_since) WHERE idle_since IS NOT NULL;
CREATE INDEX handlers_host_idle ON handlers (host, idle_since)
    WHERE status = 'running' AND idle_since IS NOT NULL;
CREATE INDEX handlers_claim ON handlers (workflow, claim_at) WHERE claim_at IS NOT NULL;
CREATE INDEX handlers_by_status ON handlers (status, created_at);
CREATE INDEX handlers_created ON handlers (created_at);
CREATE TABLE handler_inbox (
    seq        bigserial PRIMARY KEY,
    handler_id text NOT NULL,
    event_type text NOT NULL,
    data       text NOT NULL,
    sent_at    double precision NOT NULL
);
CREATE INDEX handler_inbox_handler ON handler_inbox (handler_id, seq);
