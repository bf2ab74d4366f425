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
