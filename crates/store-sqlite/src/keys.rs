//! API keys on SQLite: stored by hash, looked up only while not revoked.

use rusqlite::{OptionalExtension, params};
use stepwise_core::Id;
use stepwise_store::{AccessRole, ApiKeyRecord, Result, SigningKey, StoreError, Tenant};

use crate::rows::{self, bid};
use crate::writer::map_sqlite;
use crate::{SqliteStore, count, is_unique_violation};

const INSERT_KEY: &str = "INSERT INTO api_keys (id, tenant_id, user_id, role, name, key_hash, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
const FIND_ACTIVE_KEY: &str = "SELECT id, name, tenant_id, user_id, role, created_at, revoked_at FROM api_keys WHERE key_hash = ?1 AND revoked_at IS NULL";
const LIST_KEYS: &str = "SELECT id, name, tenant_id, user_id, role, created_at, revoked_at FROM api_keys ORDER BY created_at, id";
const LIST_SIGNING_KEYS: &str =
    "SELECT id, secret, created_at FROM signing_keys ORDER BY created_at, id";
const INSERT_SIGNING_KEY: &str =
    "INSERT INTO signing_keys (id, secret, created_at) VALUES (?1, ?2, ?3)";
const REVOKE_KEY: &str = "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?1) WHERE id = ?2";
const COUNT_ACTIVE_KEYS: &str = "SELECT COUNT(*) FROM api_keys WHERE revoked_at IS NULL";

impl stepwise_store::KeyStore for SqliteStore {
    async fn create_api_key(
        &self,
        tenant: &Tenant,
        user_id: &str,
        role: AccessRole,
        name: Option<String>,
        key_hash: &str,
    ) -> Result<ApiKeyRecord> {
        let record = ApiKeyRecord::new(tenant, user_id, role, name, self.now());
        let key_hash = key_hash.to_string();
        self.write(move |conn, _| {
            let r = &record;
            conn.prepare_cached(INSERT_KEY)
                .and_then(|mut s| {
                    s.execute(params![
                        bid(r.id),
                        r.tenant_id,
                        r.user_id,
                        r.role.as_str(),
                        r.name,
                        key_hash,
                        r.created_at.0
                    ])
                })
                .map_err(|e| {
                    if is_unique_violation(&e) {
                        StoreError::Conflict("that key already exists".into())
                    } else {
                        map_sqlite(e)
                    }
                })?;
            Ok(record)
        })
        .await
    }

    async fn find_api_key(&self, key_hash: &str) -> Result<Option<ApiKeyRecord>> {
        // Every authenticated request asks this: a point lookup on the calling thread.
        self.read_point(|conn| {
            conn.prepare_cached(FIND_ACTIVE_KEY)
                .and_then(|mut s| s.query_row(params![key_hash], rows::api_key).optional())
                .map_err(map_sqlite)
        })
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        self.read(|conn, _| {
            conn.prepare_cached(LIST_KEYS)
                .and_then(|mut s| s.query_map([], rows::api_key)?.collect())
                .map_err(map_sqlite)
        })
        .await
    }

    async fn revoke_api_key(&self, id: Id) -> Result<bool> {
        let now = self.now();
        self.write(move |conn, _| {
            conn.prepare_cached(REVOKE_KEY)
                .and_then(|mut s| s.execute(params![now.0, bid(id)]))
                .map(|n| n > 0)
                .map_err(map_sqlite)
        })
        .await
    }

    async fn count_active_api_keys(&self) -> Result<u64> {
        self.read(|conn, _| count(conn, COUNT_ACTIVE_KEYS, []))
            .await
    }

    async fn list_signing_keys(&self) -> Result<Vec<SigningKey>> {
        self.read(|conn, _| {
            conn.prepare_cached(LIST_SIGNING_KEYS)
                .and_then(|mut s| s.query_map([], rows::signing_key)?.collect())
                .map_err(map_sqlite)
        })
        .await
    }

    async fn add_signing_key(&self, secret: &str) -> Result<SigningKey> {
        let key = SigningKey {
            id: stepwise_core::new_id(),
            secret: secret.to_string(),
            created_at: self.now(),
        };
        self.write(move |conn, _| {
            conn.prepare_cached(INSERT_SIGNING_KEY)
                .and_then(|mut s| s.execute(params![bid(key.id), key.secret, key.created_at.0]))
                .map_err(map_sqlite)?;
            Ok(key)
        })
        .await
    }
}
