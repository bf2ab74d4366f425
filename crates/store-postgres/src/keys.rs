//! API keys on PostgreSQL: only their hashes are stored; revoking keeps the row (and the
//! first revocation time).

use stepwise_core::Id;
use stepwise_store::{AccessRole, ApiKeyRecord, Result, SigningKey, StoreError, Tenant};

use crate::PgStore;
use crate::sql::{self, api_key_cols, args, count, is_unique_violation, map_pg};

const INSERT_API_KEY: &str = "INSERT INTO api_keys (id, tenant_id, user_id, role, name, key_hash, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)";
const ALL_SIGNING_KEYS: &str =
    "SELECT id, secret, created_at FROM signing_keys ORDER BY created_at, id";
const INSERT_SIGNING_KEY: &str =
    "INSERT INTO signing_keys (id, secret, created_at) VALUES ($1, $2, $3)";
const LIVE_KEY_BY_HASH: &str = concat!(
    "SELECT ",
    api_key_cols!(),
    " FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL"
);
const ALL_KEYS: &str = concat!(
    "SELECT ",
    api_key_cols!(),
    " FROM api_keys ORDER BY created_at, id"
);
const REVOKE_API_KEY: &str =
    "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2";
const COUNT_LIVE_KEYS: &str = "SELECT COUNT(*) AS n FROM api_keys WHERE revoked_at IS NULL";

impl stepwise_store::KeyStore for PgStore {
    async fn create_api_key(
        &self,
        tenant: &Tenant,
        user_id: &str,
        role: AccessRole,
        name: Option<String>,
        key_hash: &str,
    ) -> Result<ApiKeyRecord> {
        let record = ApiKeyRecord::new(tenant, user_id, role, name, self.now());
        let r = &record;
        let client = self.client().await?;
        client
            .execute_typed(
                INSERT_API_KEY,
                args![
                    r.id,
                    r.tenant_id,
                    r.user_id,
                    r.role.as_str(),
                    r.name,
                    key_hash,
                    r.created_at.0
                ],
            )
            .await
            .map_err(|e| {
                if is_unique_violation(&e) {
                    StoreError::Conflict("that key already exists".into())
                } else {
                    map_pg(e)
                }
            })?;
        Ok(record)
    }

    /// The unrevoked key with this hash.
    async fn find_api_key(&self, key_hash: &str) -> Result<Option<ApiKeyRecord>> {
        let client = self.client().await?;
        let row = client
            .query_typed_opt(LIVE_KEY_BY_HASH, args![key_hash])
            .await
            .map_err(map_pg)?;
        row.as_ref().map(sql::api_key).transpose()
    }

    /// Every key of every tenant, revoked ones too, oldest first.
    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        let client = self.client().await?;
        let rows = client
            .query_typed(ALL_KEYS, args![])
            .await
            .map_err(map_pg)?;
        sql::collect(&rows, sql::api_key)
    }

    /// Whether the key exists (revoking twice keeps the first time).
    async fn revoke_api_key(&self, id: Id) -> Result<bool> {
        let now = self.now();
        let client = self.client().await?;
        let n = client
            .execute_typed(REVOKE_API_KEY, args![now.0, id])
            .await
            .map_err(map_pg)?;
        Ok(n > 0)
    }

    async fn count_active_api_keys(&self) -> Result<u64> {
        let client = self.client().await?;
        count(&**client, COUNT_LIVE_KEYS, args![]).await
    }

    async fn list_signing_keys(&self) -> Result<Vec<SigningKey>> {
        let client = self.client().await?;
        let rows = client
            .query_typed(ALL_SIGNING_KEYS, args![])
            .await
            .map_err(map_pg)?;
        sql::collect(&rows, sql::signing_key)
    }

    async fn add_signing_key(&self, secret: &str) -> Result<SigningKey> {
        let key = SigningKey {
            id: stepwise_core::new_id(),
            secret: secret.to_string(),
            created_at: self.now(),
        };
        let client = self.client().await?;
        client
            .execute_typed(
                INSERT_SIGNING_KEY,
                args![key.id, key.secret, key.created_at.0],
            )
            .await
            .map_err(map_pg)?;
        Ok(key)
    }
}
