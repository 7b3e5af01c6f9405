-- The supervised processes of every host (corral.store.sqlprocs).
--
-- Each host's supervisor reports its processes (report_processes): its rows are
-- replaced whole. An operator's start/stop/restart is a process_action_requested
-- event naming the host; a supervisor reads its own through this partial index.
CREATE TABLE processes (
    host        text NOT NULL,
    agent       text NOT NULL,
    state       text NOT NULL,
    pid         bigint,
    restarts    bigint NOT NULL DEFAULT 0,
    started_at  double precision,
    last_beat   double precision,
    flags       text NOT NULL DEFAULT '[]',
    last_exit   text,
    reported_at double precision NOT NULL,
    PRIMARY KEY (host, agent)
);
CREATE INDEX events_process_actions ON events (((data::jsonb) ->> 'host'), seq)
    WHERE kind = 'process_action_requested';
