-- An operator's release of an idle workflow run (release_workflow, docs/workflows.md).
--
-- release_requested_at: when an operator asked that the idle run be released now
-- (NULL: no request). The next take_workflow_work of the host running it lists it for
-- release whatever its delay; the request ends when the run is released, goes busy,
-- is kept resident or finishes. handlers_release_requested: a host's requested runs.
ALTER TABLE handlers ADD COLUMN IF NOT EXISTS release_requested_at double precision;
CREATE INDEX IF NOT EXISTS handlers_release_requested ON handlers (host)
    WHERE release_requested_at IS NOT NULL;
