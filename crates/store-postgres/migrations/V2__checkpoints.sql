-- LangGraph checkpoints. A thread is a session of the tenant; checkpoint ids are
-- LangGraph's (time-ordered strings), so "newest first" is checkpoint_id descending.
-- Ids, namespaces and versions compare byte by byte (COLLATE "C"), as on SQLite.

CREATE TABLE threads (
    tenant_id  text NOT NULL,
    thread_id  text NOT NULL,
    session_id uuid NOT NULL,
    created_at bigint NOT NULL,
    PRIMARY KEY (tenant_id, thread_id)
);
CREATE INDEX threads_session ON threads (session_id);

CREATE TABLE checkpoints (
    tenant_id            text NOT NULL,
    session_id           uuid NOT NULL,
    checkpoint_ns        text COLLATE "C" NOT NULL,
    checkpoint_id        text COLLATE "C" NOT NULL,
    parent_checkpoint_id text,
    type                 text NOT NULL,
    payload              bytea NOT NULL,
    metadata             jsonb NOT NULL,
    channel_versions     text NOT NULL,
    run_id               text,
    created_at           bigint NOT NULL,
    PRIMARY KEY (tenant_id, session_id, checkpoint_ns, checkpoint_id)
);
CREATE INDEX checkpoints_session_newest ON checkpoints (tenant_id, session_id, checkpoint_id DESC, checkpoint_ns DESC);
CREATE INDEX checkpoints_tenant_newest ON checkpoints (tenant_id, checkpoint_id DESC, session_id DESC, checkpoint_ns DESC);
CREATE INDEX checkpoints_run ON checkpoints (tenant_id, run_id) WHERE run_id IS NOT NULL;

-- Channel values, written once per version. An append row holds only the items added on
-- top of base_version (type is NULL); the payload's first byte says whether it is zstd.
CREATE TABLE checkpoint_blobs (
    tenant_id     text NOT NULL,
    session_id    uuid NOT NULL,
    checkpoint_ns text COLLATE "C" NOT NULL,
    channel       text COLLATE "C" NOT NULL,
    version       text COLLATE "C" NOT NULL,
    is_append     boolean NOT NULL,
    base_version  text COLLATE "C",
    type          text,
    payload       bytea NOT NULL,
    PRIMARY KEY (tenant_id, session_id, checkpoint_ns, channel, version)
);

CREATE TABLE checkpoint_writes (
    tenant_id     text NOT NULL,
    session_id    uuid NOT NULL,
    checkpoint_ns text COLLATE "C" NOT NULL,
    checkpoint_id text COLLATE "C" NOT NULL,
    task_id       text COLLATE "C" NOT NULL,
    idx           bigint NOT NULL,
    channel       text NOT NULL,
    type          text NOT NULL,
    payload       bytea NOT NULL,
    task_path     text COLLATE "C" NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, session_id, checkpoint_ns, checkpoint_id, task_id, idx)
);
