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
