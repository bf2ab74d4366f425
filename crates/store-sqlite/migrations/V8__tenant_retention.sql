-- A tenant's own retention (`PUT /v1/retention`): the day counts (as JSON) that override the
-- server's policy for its sessions.
CREATE TABLE tenant_retention (
    tenant_id  TEXT PRIMARY KEY,
    retention  TEXT NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;
