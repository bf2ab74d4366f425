-- The queue's heads carry what a claim filters on (the head execution's agent type and
-- tenant), so the claim's read of the oldest heads is one index walk of `queue_heads`
-- alone. It used to join `executions` for them; on a fresh database whose tables had not
-- been analyzed yet, the planner took that join as a hash join over every execution, and
-- each claim read the whole queue (a 50,000-deep queue drained at half the rate of a
-- 1,000-deep one, measured with `stepwise bench queue`). A head's agent type and tenant
-- never change while it is the head: both are set when the execution is created.

ALTER TABLE queue_heads ADD COLUMN agent_type text;
ALTER TABLE queue_heads ADD COLUMN tenant_id text;

UPDATE queue_heads h SET agent_type = e.agent_type, tenant_id = e.tenant_id
    FROM executions e WHERE e.id = h.execution_id;

CREATE OR REPLACE FUNCTION queue_head_refresh(session uuid) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(queue_head_lock(session));
    DELETE FROM queue_heads WHERE queue_key = session;
    INSERT INTO queue_heads (queue_key, execution_id, created_at, agent_type, tenant_id)
        SELECT e.session_id, e.id, e.created_at, e.agent_type, e.tenant_id FROM executions e
        WHERE e.session_id = session AND e.status = 'pending' AND e.parent_execution_id IS NULL
          AND NOT EXISTS (SELECT 1 FROM executions r WHERE r.session_id = session AND r.status = 'running')
        ORDER BY e.created_at, e.id LIMIT 1;
END
$$;

CREATE OR REPLACE FUNCTION queue_heads_maintain() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    row executions;
BEGIN
    IF TG_OP = 'DELETE' THEN
        row := OLD;
    ELSE
        row := NEW;
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.status IS NOT DISTINCT FROM NEW.status THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' AND NEW.status NOT IN ('pending', 'running') THEN
        RETURN NULL;
    END IF;
    IF row.session_id IS NOT NULL THEN
        IF TG_OP = 'INSERT' AND NEW.status = 'pending' THEN
            -- Behind an older head (a busy session's next message) nothing changes.
            PERFORM pg_advisory_xact_lock(queue_head_lock(row.session_id));
            PERFORM 1 FROM queue_heads h WHERE h.queue_key = row.session_id
                AND (h.created_at, h.execution_id) < (NEW.created_at, NEW.id);
            IF FOUND THEN
                RETURN NULL;
            END IF;
        END IF;
        PERFORM queue_head_refresh(row.session_id);
    ELSE
        PERFORM pg_advisory_xact_lock(queue_head_lock(row.id));
        DELETE FROM queue_heads WHERE queue_key = row.id;
        IF TG_OP <> 'DELETE' AND row.status = 'pending' AND row.parent_execution_id IS NULL THEN
            INSERT INTO queue_heads (queue_key, execution_id, created_at, agent_type, tenant_id)
                VALUES (row.id, row.id, row.created_at, row.agent_type, row.tenant_id);
        END IF;
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION queue_heads_subagents() RETURNS trigger
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
        INSERT INTO queue_heads (queue_key, execution_id, created_at, agent_type, tenant_id)
            VALUES (row.id, row.id, row.created_at, row.agent_type, row.tenant_id);
    END IF;
    RETURN NULL;
END
$$;
