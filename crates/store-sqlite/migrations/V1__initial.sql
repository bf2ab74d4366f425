-- Ids are 16-byte UUIDv7 blobs, times are microseconds since the Unix epoch (UTC).
-- Every row carries its tenant; every query filters on it.

CREATE TABLE sessions (
    id                  BLOB PRIMARY KEY,
    tenant_id           TEXT NOT NULL,
    user_id             TEXT NOT NULL,
    name                TEXT,
    title               TEXT,
    status              TEXT NOT NULL,
    related_type        TEXT,
    related_id          TEXT,
    initial_context_url TEXT,
    metadata            TEXT NOT NULL DEFAULT 'null',
    last_execution_id   BLOB,
    last_snapshot_id    BLOB,
    message_count       INTEGER NOT NULL DEFAULT 0,
    last_event_id       INTEGER NOT NULL DEFAULT 0,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL
);
CREATE UNIQUE INDEX sessions_tenant_name ON sessions (tenant_id, name) WHERE name IS NOT NULL;
CREATE INDEX sessions_tenant_updated ON sessions (tenant_id, updated_at DESC, id DESC);
CREATE INDEX sessions_status_updated ON sessions (status, updated_at);

CREATE TABLE messages (
    id           BLOB PRIMARY KEY,
    tenant_id    TEXT NOT NULL,
    session_id   BLOB NOT NULL,
    role         TEXT NOT NULL,
    content      TEXT NOT NULL,
    execution_id BLOB,
    related_type TEXT,
    related_id   TEXT,
    context_url  TEXT,
    metadata     TEXT NOT NULL DEFAULT 'null',
    created_at   INTEGER NOT NULL
);
CREATE INDEX messages_session_time ON messages (session_id, created_at, id);

CREATE TABLE executions (
    id                  BLOB PRIMARY KEY,
    tenant_id           TEXT NOT NULL,
    session_id          BLOB,
    parent_execution_id BLOB,
    user_id             TEXT NOT NULL,
    agent_type          TEXT NOT NULL,
    agent_config        TEXT NOT NULL DEFAULT 'null',
    status              TEXT NOT NULL,
    input               TEXT NOT NULL DEFAULT 'null',
    output              TEXT NOT NULL DEFAULT 'null',
    metadata            TEXT NOT NULL DEFAULT 'null',
    last_snapshot_id    BLOB,
    step_count          INTEGER NOT NULL DEFAULT 0,
    tokens_input        INTEGER NOT NULL DEFAULT 0,
    tokens_output       INTEGER NOT NULL DEFAULT 0,
    tokens_total        INTEGER NOT NULL DEFAULT 0,
    error_message       TEXT,
    attempts            INTEGER NOT NULL DEFAULT 0,
    lease_owner         TEXT,
    lease_expires_at    INTEGER,
    resume_answer       TEXT,
    started_at          INTEGER,
    completed_at        INTEGER,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL
);
CREATE INDEX executions_session ON executions (session_id, created_at, id);
CREATE INDEX executions_status ON executions (status, created_at, id);

-- Steps are appended, never rewritten; the payload is a versioned JSON document,
-- zstd-compressed over a threshold.
CREATE TABLE steps (
    execution_id BLOB NOT NULL,
    step_number  INTEGER NOT NULL,
    id           BLOB NOT NULL,
    tenant_id    TEXT NOT NULL,
    session_id   BLOB,
    kind         TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    payload      BLOB NOT NULL
);
CREATE UNIQUE INDEX steps_execution_number ON steps (execution_id, step_number);

CREATE TABLE snapshots (
    id                 BLOB PRIMARY KEY,
    tenant_id          TEXT NOT NULL,
    execution_id       BLOB NOT NULL,
    session_id         BLOB,
    parent_snapshot_id BLOB,
    agent_id           TEXT,
    agent_name         TEXT,
    step_number        INTEGER NOT NULL,
    is_final           INTEGER NOT NULL,
    debug_mode         INTEGER NOT NULL,
    state              BLOB NOT NULL,
    created_at         INTEGER NOT NULL
);
CREATE INDEX snapshots_execution ON snapshots (execution_id, created_at, id);

CREATE TABLE events (
    session_id   BLOB NOT NULL,
    seq          INTEGER NOT NULL,
    tenant_id    TEXT NOT NULL,
    message_id   BLOB,
    execution_id BLOB,
    event_type   TEXT NOT NULL,
    content      TEXT NOT NULL,
    metadata     TEXT NOT NULL DEFAULT 'null',
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

CREATE TABLE api_keys (
    id         BLOB PRIMARY KEY,
    tenant_id  TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    name       TEXT,
    key_hash   TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
