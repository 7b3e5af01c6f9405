-- corral schema, version 3 (SQLite): the supervised processes of every host.
--
-- Each host's supervisor reports its processes (report_processes): its rows are
-- replaced whole. An operator's start/stop/restart is a process_action_requested
-- event naming the host; a supervisor reads its own through this partial index.
CREATE TABLE processes (
    host        TEXT NOT NULL,
    agent       TEXT NOT NULL,
    state       TEXT NOT NULL,
    pid         INTEGER,
    restarts    INTEGER NOT NULL DEFAULT 0,
    started_at  REAL,
    last_beat   REAL,
    flags       TEXT NOT NULL DEFAULT '[]',
    last_exit   TEXT,
    reported_at REAL NOT NULL,
    PRIMARY KEY (host, agent)
) WITHOUT ROWID;
CREATE INDEX events_process_actions ON events (json_extract(data, '$.host'), seq)
    WHERE kind = 'process_action_requested';
