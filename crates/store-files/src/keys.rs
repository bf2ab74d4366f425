//! API keys in the files backend, kept in the root `metadata.json` by hash.

use stepwise_core::Id;
use stepwise_store::{AccessRole, ApiKeyRecord, Result, SigningKey, StoreError, Tenant};

use crate::state::{Key, KeyEntry};
use crate::{FileStore, LOCAL_TENANT, tenant_state};

/// The root `metadata.json`, which holds the API keys.
pub(crate) fn keys_key() -> Key {
    Key {
        tenant: LOCAL_TENANT.to_string(),
        session: None,
    }
}

impl stepwise_store::KeyStore for FileStore {
    async fn create_api_key(
        &self,
        tenant: &Tenant,
        user_id: &str,
        role: AccessRole,
        name: Option<String>,
        key_hash: &str,
    ) -> Result<ApiKeyRecord> {
        let record = ApiKeyRecord::new(tenant, user_id, role, name, self.now());
        let ack = {
            let mut state = self.lock();
            if state.api_keys.iter().any(|k| k.hash == key_hash) {
                return Err(StoreError::Conflict("that key already exists".into()));
            }
            state.api_keys.push(KeyEntry {
                record: record.clone(),
                hash: key_hash.to_string(),
            });
            let root = self.inner.shared.root.clone();
            tenant_state(&mut state, &root, LOCAL_TENANT);
            state.touch(&keys_key(), false);
            self.enqueue(&mut state, record)
        };
        ack.await
    }

    async fn find_api_key(&self, key_hash: &str) -> Result<Option<ApiKeyRecord>> {
        Ok(self
            .lock()
            .api_keys
            .iter()
            .find(|k| k.hash == key_hash && k.record.revoked_at.is_none())
            .map(|k| k.record.clone()))
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        let mut keys: Vec<ApiKeyRecord> = self
            .lock()
            .api_keys
            .iter()
            .map(|k| k.record.clone())
            .collect();
        keys.sort_by_key(|x| (x.created_at, x.id));
        Ok(keys)
    }

    async fn revoke_api_key(&self, id: Id) -> Result<bool> {
        let now = self.now();
        let ack = {
            let mut state = self.lock();
            let Some(key) = state.api_keys.iter_mut().find(|k| k.record.id == id) else {
                return Ok(false);
            };
            key.record.revoked_at.get_or_insert(now);
            state.touch(&keys_key(), false);
            self.enqueue(&mut state, true)
        };
        ack.await
    }

    async fn count_active_api_keys(&self) -> Result<u64> {
        Ok(self
            .lock()
            .api_keys
            .iter()
            .filter(|k| k.record.revoked_at.is_none())
            .count() as u64)
    }

    async fn list_signing_keys(&self) -> Result<Vec<SigningKey>> {
        Ok(self.lock().signing_keys.clone())
    }

    async fn add_signing_key(&self, secret: &str) -> Result<SigningKey> {
        let key = SigningKey {
            id: stepwise_core::new_id(),
            secret: secret.to_string(),
            created_at: self.now(),
        };
        let ack = {
            let mut state = self.lock();
            state.signing_keys.push(key.clone());
            let root = self.inner.shared.root.clone();
            tenant_state(&mut state, &root, LOCAL_TENANT);
            state.touch(&keys_key(), false);
            self.enqueue(&mut state, key)
        };
        ack.await
    }
}
