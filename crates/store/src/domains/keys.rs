//! API keys (stored as hashes) and the keys the deployment signs its own tokens with.

use stepwise_core::Id;

use crate::{AccessRole, ApiKeyRecord, Result, SigningKey, Tenant};

crate::domain! {
    $
    pub trait KeyStore, pass PassKeys, methods key_store_methods {
        fn create_api_key(&self, tenant: &Tenant, user_id: &str, role: AccessRole, name: Option<String>, key_hash: &str) -> Result<ApiKeyRecord>;

        /// The active (not revoked) key with this hash.
        fn find_api_key(&self, key_hash: &str) -> Result<Option<ApiKeyRecord>>;

        fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>>;

        /// `false` when there is no such key.
        fn revoke_api_key(&self, id: Id) -> Result<bool>;

        fn count_active_api_keys(&self) -> Result<u64>;

        /// Every token signing key, oldest first.
        fn list_signing_keys(&self) -> Result<Vec<SigningKey>>;

        /// Stores a new signing key with this secret; it signs from now on (the newest does).
        fn add_signing_key(&self, secret: &str) -> Result<SigningKey>;
    }
}
