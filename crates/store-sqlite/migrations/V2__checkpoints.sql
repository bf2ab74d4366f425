-- LangGraph checkpoints. A thread is a session of the tenant; checkpoint ids are
-- LangGraph's (time-ordered strings), so "newest first" is checkpoint_id descending.

CREATE TABLE threads (
    tenant_id  TEXT NOT NULL,
    thread_id  TEXT NOT NULL,
    session_id BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, thread_id)
) WITHOUT ROWID;
CREATE INDEX threads_session ON threads (session_id);

CREATE TABLE checkpoints (
    tenant_id            TEXT NOT NULL,
    session_id           BLOB NOT NULL,
    checkpoint_ns        TEXT NOT NULL,
    checkpoint_id        TEXT NOT NULL,
    parent_checkpoint_id TEXT,
    type                 TEXT NOT NULL,
    payload              BLOB NOT NULL,
    metadata             TEXT NOT NULL,
    channel_versions     TEXT NOT NULL,
    run_id               TEXT,
    created_at           INTEGER NOT NULL
);
CREATE UNIQUE INDEX checkpoints_key ON checkpoints (tenant_id, session_id, checkpoint_ns, checkpoint_id DESC);
CREATE INDEX checkpoints_session_newest ON checkpoints (tenant_id, session_id, checkpoint_id DESC, checkpoint_ns DESC);
CREATE INDEX checkpoints_tenant_newest ON checkpoints (tenant_id, checkpoint_id DESC, session_id DESC, checkpoint_ns DESC);
CREATE INDEX checkpoints_run ON checkpoints (tenant_id, run_id) WHERE run_id IS NOT NULL;

-- Channel values, written once per version. An append row holds only the items added on
-- top of base_version (type is NULL); the payload's first byte says whether it is zstd.
CREATE TABLE checkpoint_blobs (
    tenant_id     TEXT NOT NULL,
    session_id    BLOB NOT NULL,
    checkpoint_ns TEXT NOT NULL,
    channel       TEXT NOT NULL,
    version       TEXT NOT NULL,
    is_append     INTEGER NOT NULL,
    base_version  TEXT,
    type          TEXT,
    payload       BLOB NOT NULL
);
CREATE UNIQUE INDEX checkpoint_blobs_key ON checkpoint_blobs (tenant_id, session_id, checkpoint_ns, channel, version);

CREATE TABLE checkpoint_writes (
    tenant_id     TEXT NOT NULL,
    session_id    BLOB NOT NULL,
    checkpoint_ns TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    task_id       TEXT NOT NULL,
    idx           INTEGER NOT NULL,
    channel       TEXT NOT NULL,
    type          TEXT NOT NULL,
    payload       BLOB NOT NULL,
    task_path     TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX checkpoint_writes_key ON checkpoint_writes (tenant_id, session_id, checkpoint_ns, checkpoint_id, task_id, idx);
