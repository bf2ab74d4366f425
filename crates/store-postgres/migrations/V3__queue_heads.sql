-- The queue's runnable heads: one row per session that has a pending top-level execution
-- and nothing running, naming its oldest pending one (a pending top-level execution
-- without a session is its own head). A claim takes the oldest head it can lock: one
-- index probe, whatever the queue's depth. A trigger on `executions` keeps the table
-- current on every insert, status change and delete, so no code path can forget it.
--
-- Concurrency: every change to a session's head happens under that session's advisory
-- transaction lock (`queue_head_lock`), taken by the trigger before it looks at the
-- session's executions (each statement of the function then reads a fresh snapshot, so it
-- sees what the previous holder committed). Claims take the same lock with
-- `pg_try_advisory_xact_lock` and pass over a session another transaction holds, as
-- `SKIP LOCKED` would; they never wait for it, so no lock cycle can form.

CREATE TABLE queue_heads (
    -- The session's id (the execution's own id when it has no session).
    queue_key    uuid PRIMARY KEY,
    execution_id uuid NOT NULL,
    created_at   bigint NOT NULL
);
CREATE INDEX queue_heads_order ON queue_heads (created_at, execution_id);

CREATE INDEX executions_session_pending ON executions (session_id, created_at, id)
    WHERE status = 'pending' AND parent_execution_id IS NULL;
CREATE INDEX executions_session_running ON executions (session_id) WHERE status = 'running';

-- The advisory lock key of a queue key (a session's id).
CREATE FUNCTION queue_head_lock(queue_key uuid) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ('x' || substr(md5(queue_key::text), 1, 16))::bit(64)::bigint
$$;

-- Recomputes one session's head under its lock.
CREATE FUNCTION queue_head_refresh(session uuid) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(queue_head_lock(session));
    DELETE FROM queue_heads WHERE queue_key = session;
    INSERT INTO queue_heads (queue_key, execution_id, created_at)
        SELECT e.session_id, e.id, e.created_at FROM executions e
        WHERE e.session_id = session AND e.status = 'pending' AND e.parent_execution_id IS NULL
          AND NOT EXISTS (SELECT 1 FROM executions r WHERE r.session_id = session AND r.status = 'running')
        ORDER BY e.created_at, e.id LIMIT 1;
END
$$;

CREATE FUNCTION queue_heads_maintain() RETURNS trigger
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
            INSERT INTO queue_heads (queue_key, execution_id, created_at)
                VALUES (row.id, row.id, row.created_at);
        END IF;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER queue_heads_maintain AFTER INSERT OR DELETE OR UPDATE OF status ON executions
    FOR EACH ROW EXECUTE FUNCTION queue_heads_maintain();

-- The heads of what is queued already.
INSERT INTO queue_heads (queue_key, execution_id, created_at)
    SELECT COALESCE(e.session_id, e.id), e.id, e.created_at FROM executions e
    WHERE e.status = 'pending' AND e.parent_execution_id IS NULL
      AND (e.session_id IS NULL OR (
          NOT EXISTS (SELECT 1 FROM executions r WHERE r.session_id = e.session_id AND r.status = 'running')
          AND NOT EXISTS (SELECT 1 FROM executions p WHERE p.session_id = e.session_id AND p.status = 'pending'
                          AND p.parent_execution_id IS NULL AND (p.created_at, p.id) < (e.created_at, e.id))));
