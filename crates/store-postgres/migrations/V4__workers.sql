-- Worker processes that run users' own agents (docs/workers.md): each one's agent types and
-- when it last claimed or renewed a lease; `GET /v1/agents` reads them.
CREATE TABLE workers (
    tenant_id    text NOT NULL,
    worker_id    text NOT NULL,
    agents       text NOT NULL,
    last_seen_at bigint NOT NULL,
    PRIMARY KEY (tenant_id, worker_id)
);
CREATE INDEX workers_seen ON workers (last_seen_at);

-- A session's default agent (`{type, config}`): a message that names none uses it.
ALTER TABLE sessions ADD COLUMN agent text;

-- A pending subagent execution (a worker agent's subagent, queued for its agent type's
-- workers) is its own head: it runs while its parent runs, outside its session's order.
CREATE FUNCTION queue_heads_subagents() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    row executions;
BEGIN
    IF TG_OP = 'DELETE' THEN
        row := OLD;
    ELSE
        row := NEW;
    END IF;
    IF row.parent_execution_id IS NULL
       OR (TG_OP = 'UPDATE' AND OLD.status IS NOT DISTINCT FROM NEW.status)
       OR (TG_OP = 'INSERT' AND NEW.status <> 'pending') THEN
        RETURN NULL;
    END IF;
    PERFORM pg_advisory_xact_lock(queue_head_lock(row.id));
    DELETE FROM queue_heads WHERE queue_key = row.id;
    IF TG_OP <> 'DELETE' AND row.status = 'pending' THEN
        INSERT INTO queue_heads (queue_key, execution_id, created_at)
            VALUES (row.id, row.id, row.created_at);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER queue_heads_subagents AFTER INSERT OR DELETE OR UPDATE OF status ON executions
    FOR EACH ROW EXECUTE FUNCTION queue_heads_subagents();
