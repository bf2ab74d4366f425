-- Worker processes that run users' own agents (docs/workers.md): each one's agent types and
-- when it last claimed or renewed a lease; `GET /v1/agents` reads them.
CREATE TABLE workers (
    tenant_id    TEXT NOT NULL,
    worker_id    TEXT NOT NULL,
    agents       TEXT NOT NULL,
    last_seen_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, worker_id)
) WITHOUT ROWID;
CREATE INDEX workers_seen ON workers (last_seen_at);

-- A session's default agent (`{type, config}` as JSON): a message that names none uses it.
ALTER TABLE sessions ADD COLUMN agent TEXT;

-- A pending subagent execution (a worker agent's subagent, queued for its agent type's
-- workers) is its own head: it runs while its parent runs, outside its session's order.
CREATE TRIGGER queue_heads_insert_subagent AFTER INSERT ON executions
WHEN NEW.parent_execution_id IS NOT NULL AND NEW.status = 'pending'
BEGIN
    INSERT OR REPLACE INTO queue_heads (queue_key, execution_id, created_at)
        VALUES (NEW.id, NEW.id, NEW.created_at);
END;

CREATE TRIGGER queue_heads_update_subagent AFTER UPDATE OF status ON executions
WHEN NEW.parent_execution_id IS NOT NULL AND OLD.status IS NOT NEW.status
BEGIN
    DELETE FROM queue_heads WHERE queue_key = NEW.id;
    INSERT INTO queue_heads (queue_key, execution_id, created_at)
        SELECT NEW.id, NEW.id, NEW.created_at WHERE NEW.status = 'pending';
END;

CREATE TRIGGER queue_heads_delete_subagent AFTER DELETE ON executions
WHEN OLD.parent_execution_id IS NOT NULL
BEGIN
    DELETE FROM queue_heads WHERE queue_key = OLD.id;
END;
