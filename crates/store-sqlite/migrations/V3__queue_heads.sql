-- The queue's runnable heads: one row per session that has a pending top-level execution
-- and nothing running, naming its oldest pending one (a pending top-level execution
-- without a session is its own head). A claim takes the oldest head: one index probe,
-- whatever the queue's depth. Triggers on `executions` keep the table current on every
-- insert, status change and delete, so no code path can forget it.

CREATE TABLE queue_heads (
    -- The session's id (the execution's own id when it has no session).
    queue_key    BLOB PRIMARY KEY,
    execution_id BLOB NOT NULL,
    created_at   INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX queue_heads_order ON queue_heads (created_at, execution_id);

-- What the triggers ask: a session's oldest pending top-level execution, and whether it
-- has one running.
CREATE INDEX executions_session_pending ON executions (session_id, created_at, id)
    WHERE status = 'pending' AND parent_execution_id IS NULL;
CREATE INDEX executions_session_running ON executions (session_id) WHERE status = 'running';

-- Recomputing a session's head: drop it, then insert the oldest pending top-level
-- execution when nothing of the session runs.
-- A new pending execution behind an older head changes nothing (the common case: a busy
-- session's next message); the head is recomputed only when it may change.
CREATE TRIGGER queue_heads_insert AFTER INSERT ON executions
WHEN NEW.session_id IS NOT NULL AND NEW.status IN ('pending', 'running')
  AND NOT (NEW.status = 'pending' AND EXISTS (
      SELECT 1 FROM queue_heads h WHERE h.queue_key = NEW.session_id
        AND (h.created_at, h.execution_id) < (NEW.created_at, NEW.id)))
BEGIN
    DELETE FROM queue_heads WHERE queue_key = NEW.session_id;
    INSERT INTO queue_heads (queue_key, execution_id, created_at)
        SELECT e.session_id, e.id, e.created_at FROM executions e
        WHERE e.session_id = NEW.session_id AND e.status = 'pending' AND e.parent_execution_id IS NULL
          AND NOT EXISTS (SELECT 1 FROM executions r WHERE r.session_id = NEW.session_id AND r.status = 'running')
        ORDER BY e.created_at, e.id LIMIT 1;
END;

CREATE TRIGGER queue_heads_update AFTER UPDATE OF status ON executions
WHEN NEW.session_id IS NOT NULL AND OLD.status IS NOT NEW.status
BEGIN
    DELETE FROM queue_heads WHERE queue_key = NEW.session_id;
    INSERT INTO queue_heads (queue_key, execution_id, created_at)
        SELECT e.session_id, e.id, e.created_at FROM executions e
        WHERE e.session_id = NEW.session_id AND e.status = 'pending' AND e.parent_execution_id IS NULL
          AND NOT EXISTS (SELECT 1 FROM executions r WHERE r.session_id = NEW.session_id AND r.status = 'running')
        ORDER BY e.created_at, e.id LIMIT 1;
END;

CREATE TRIGGER queue_heads_delete AFTER DELETE ON executions
WHEN OLD.session_id IS NOT NULL AND OLD.status IN ('pending', 'running')
BEGIN
    DELETE FROM queue_heads WHERE queue_key = OLD.session_id;
    INSERT INTO queue_heads (queue_key, execution_id, created_at)
        SELECT e.session_id, e.id, e.created_at FROM executions e
        WHERE e.session_id = OLD.session_id AND e.status = 'pending' AND e.parent_execution_id IS NULL
          AND NOT EXISTS (SELECT 1 FROM executions r WHERE r.session_id = OLD.session_id AND r.status = 'running')
        ORDER BY e.created_at, e.id LIMIT 1;
END;

-- Executions without a session: each pending top-level one is its own head.
CREATE TRIGGER queue_heads_insert_sessionless AFTER INSERT ON executions
WHEN NEW.session_id IS NULL AND NEW.status = 'pending' AND NEW.parent_execution_id IS NULL
BEGIN
    INSERT OR REPLACE INTO queue_heads (queue_key, execution_id, created_at)
        VALUES (NEW.id, NEW.id, NEW.created_at);
END;

CREATE TRIGGER queue_heads_update_sessionless AFTER UPDATE OF status ON executions
WHEN NEW.session_id IS NULL AND OLD.status IS NOT NEW.status
BEGIN
    DELETE FROM queue_heads WHERE queue_key = NEW.id;
    INSERT INTO queue_heads (queue_key, execution_id, created_at)
        SELECT NEW.id, NEW.id, NEW.created_at
        WHERE NEW.status = 'pending' AND NEW.parent_execution_id IS NULL;
END;

CREATE TRIGGER queue_heads_delete_sessionless AFTER DELETE ON executions
WHEN OLD.session_id IS NULL
BEGIN
    DELETE FROM queue_heads WHERE queue_key = OLD.id;
END;

-- The heads of what is queued already.
INSERT INTO queue_heads (queue_key, execution_id, created_at)
    SELECT COALESCE(e.session_id, e.id), e.id, e.created_at FROM executions e
    WHERE e.status = 'pending' AND e.parent_execution_id IS NULL
      AND (e.session_id IS NULL OR (
          NOT EXISTS (SELECT 1 FROM executions r WHERE r.session_id = e.session_id AND r.status = 'running')
          AND NOT EXISTS (SELECT 1 FROM executions p WHERE p.session_id = e.session_id AND p.status = 'pending'
                          AND p.parent_execution_id IS NULL AND (p.created_at, p.id) < (e.created_at, e.id))));
