-- The checkpoint indexes in ascending order. Checkpoint ids grow with time, so a new one
-- goes at the end of an ascending index, whose pages then fill up; at the start of a
-- descending one, whose pages split in halves and stay half empty (about 500 bytes per
-- LangGraph step). Queries read them backwards for "newest first" just as fast.
DROP INDEX checkpoints_key;
CREATE UNIQUE INDEX checkpoints_key ON checkpoints (tenant_id, session_id, checkpoint_ns, checkpoint_id);
DROP INDEX checkpoints_session_newest;
CREATE INDEX checkpoints_session_newest ON checkpoints (tenant_id, session_id, checkpoint_id, checkpoint_ns);
DROP INDEX checkpoints_tenant_newest;
CREATE INDEX checkpoints_tenant_newest ON checkpoints (tenant_id, checkpoint_id, session_id, checkpoint_ns);
