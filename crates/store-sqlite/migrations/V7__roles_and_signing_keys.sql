-- Every API key has a role (docs/security.md): keys made before roles existed keep doing
-- what they did, as admins of their tenant.
ALTER TABLE api_keys ADD COLUMN role TEXT NOT NULL DEFAULT 'admin';

-- The keys this deployment signs its own end-user tokens with (POST /v1/tokens), shared by
-- every node; the newest signs, each verifies the tokens it signed.
CREATE TABLE signing_keys (
    id         BLOB PRIMARY KEY,
    secret     TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
