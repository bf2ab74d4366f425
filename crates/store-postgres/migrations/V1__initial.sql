-- Ids are UUIDs, times are microseconds since the Unix epoch (UTC), JSON documents are
-- text (stored exactly as written). Every row carries its tenant; every query filters on it.

CREATE TABLE sessions (
    id                  uuid PRIMARY KEY,
    tenant_id           text NOT NULL,
    user_id             text NOT NULL,
    name                text,
    title               text,
    status              text NOT NULL,
    related_type        text,
    related_id          text,
    initial_context_url text,
    metadata            text NOT NULL DEFAULT 'null',
    last_execution_id   uuid,
    last_snapshot_id    uuid,
    message_count       bigint NOT NULL DEFAULT 0,
    last_event_id       bigint NOT NULL DEFAULT 0,
    created_at          bigint NOT NULL,
    updated_at          bigint NOT NULL
);
CREATE UNIQUE INDEX sessions_tenant_name ON sessions (tenant_id, name) WHERE name IS NOT NULL;
CREATE INDEX sessions_tenant_updated ON sessions (tenant_id, updated_at DESC, id DESC);
CREATE INDEX sessions_status_updated ON sessions (status, updated_at);

CREATE TABLE messages (
    id           uuid PRIMARY KEY,
    tenant_id    text NOT NULL,
    session_id   uuid NOT NULL,
    role         text NOT NULL,
    content      text NOT NULL,
    execution_id uuid,
    related_type text,
    related_id   text,
    context_url  text,
    metadata     text NOT NULL DEFAULT 'null',
    created_at   bigint NOT NULL
);
CREATE INDEX messages_session_time ON messages (session_id, created_at, id);

CREATE TABLE executions (
    id                  uuid PRIMARY KEY,
    tenant_id           text NOT NULL,
    session_id          uuid,
    parent_execution_id uuid,
    user_id             text NOT NULL,
    agent_type          text NOT NULL,
    agent_config        text NOT NULL DEFAULT 'null',
    status              text NOT NULL,
    input               text NOT NULL DEFAULT 'null',
    output              text NOT NULL DEFAULT 'null',
    metadata            text NOT NULL DEFAULT 'null',
    last_snapshot_id    uuid,
    step_count          bigint NOT NULL DEFAULT 0,
    tokens_input        bigint NOT NULL DEFAULT 0,
    tokens_output       bigint NOT NULL DEFAULT 0,
    tokens_total        bigint NOT NULL DEFAULT 0,
    error_message       text,
    attempts            integer NOT NULL DEFAULT 0,
    lease_owner         text,
    lease_expires_at    bigint,
    resume_answer       text,
    started_at          bigint,
    completed_at        bigint,
    created_at          bigint NOT NULL,
    updated_at          bigint NOT NULL
);
CREATE INDEX executions_session ON executions (session_id, created_at, id);
-- The claim scans only the rows that can be claimed.
CREATE INDEX executions_pending ON executions (created_at, id) WHERE status = 'pending';
CREATE INDEX executions_leased ON executions (lease_expires_at) WHERE status = 'running' AND lease_owner IS NOT NULL;
CREATE INDEX executions_status ON executions (status);

-- Steps are appended, never rewritten; the payload is a versioned JSON document,
-- zstd-compressed over a threshold.
CREATE TABLE steps (
    execution_id uuid NOT NULL,
    step_number  integer NOT NULL,
    id           uuid NOT NULL,
    tenant_id    text NOT NULL,
    session_id   uuid,
    kind         text NOT NULL,
    created_at   bigint NOT NULL,
    payload      bytea NOT NULL,
    PRIMARY KEY (execution_id, step_number)
);

CREATE TABLE snapshots (
    id                 uuid PRIMARY KEY,
    tenant_id          text NOT NULL,
    execution_id       uuid NOT NULL,
    session_id         uuid,
    parent_snapshot_id uuid,
    agent_id           text,
    agent_name         text,
    step_number        integer NOT NULL,
    is_final           boolean NOT NULL,
    debug_mode         boolean NOT NULL,
    state              bytea NOT NULL,
    created_at         bigint NOT NULL
);
CREATE INDEX snapshots_execution ON snapshots (execution_id, created_at, id);

CREATE TABLE events (
    session_id   uuid NOT NULL,
    seq          bigint NOT NULL,
    tenant_id    text NOT NULL,
    message_id   uuid,
    execution_id uuid,
    event_type   text NOT NULL,
    content      text NOT NULL,
    metadata     text NOT NULL DEFAULT 'null',
    created_at   bigint NOT NULL,
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE api_keys (
    id         uuid PRIMARY KEY,
    tenant_id  text NOT NULL,
    user_id    text NOT NULL,
    name       text,
    key_hash   text NOT NULL UNIQUE,
    created_at bigint NOT NULL,
    revoked_at bigint
);
