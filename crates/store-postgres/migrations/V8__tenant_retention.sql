-- A tenant's own retention (`PUT /v1/retention`): the day counts (as JSON) that override the
-- server's policy for its sessions.
CREATE TABLE tenant_retention (
    tenant_id  text PRIMARY KEY,
    retention  text NOT NULL,
    updated_at bigint NOT NULL
);
