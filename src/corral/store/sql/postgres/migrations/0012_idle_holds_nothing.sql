-- An idle node holds no task (docs/core.md, "Idle means holding nothing"): before,
-- set_agent_status could make a node that held a lease idle, and its record then
-- named the held task while the answers of heartbeat and register_node did not. Such
-- a node is working on what it holds: it becomes working again (idle_since cleared),
-- with a node_status event saying why.
INSERT INTO events (ts, kind, node_id, task_id, data)
SELECT extract(epoch FROM now())::double precision, 'node_status', n.id,
       (SELECT t.id FROM tasks t WHERE t.assigned_to = n.id AND t.status = 'in_progress'
        ORDER BY t.claimed_at DESC, t.id DESC LIMIT 1),
       json_build_object('old', 'idle', 'new', 'working', 'reason', 'holds a task')::text
FROM nodes n
WHERE n.status = 'idle'
  AND EXISTS (SELECT 1 FROM tasks t WHERE t.assigned_to = n.id AND t.status = 'in_progress');
UPDATE nodes SET status = 'working', idle_since = NULL
WHERE status = 'idle'
  AND EXISTS (SELECT 1 FROM tasks t WHERE t.assigned_to = nodes.id AND t.status = 'in_progress');
