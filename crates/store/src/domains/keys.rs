//! API keys (stored as hashes) and the keys the deployment signs its own tokens with.

use std::future::Future;

use stepwise_core::Id;

use crate::{AccessRole, ApiKeyRecord, Result, SigningKey, Tenant};

pub trait KeyStore: Send + Sync {
    fn create_api_key(
        &self,
        tenant: &Tenant,
        user_id: &str,
        role: AccessRole,
        name: Option<String>,
        key_hash: &str,
    ) -> impl Future<Output = Result<ApiKeyRecord>> + Send;

    /// The active (not revoked) key with this hash.
    fn find_api_key(
        &self,
        key_hash: &str,
    ) -> impl Future<Output = Result<Option<ApiKeyRecord>>> + Send;

    fn list_api_keys(&self) -> impl Future<Output = Result<Vec<ApiKeyRecord>>> + Send;

    /// `false` when there is no such key.
    fn revoke_api_key(&self, id: Id) -> impl Future<Output = Result<bool>> + Send;

    fn count_active_api_keys(&self) -> impl Future<Output = Result<u64>> + Send;

    /// Every token signing key, oldest first.
    fn list_signing_keys(&self) -> impl Future<Output = Result<Vec<SigningKey>>> + Send;

    /// Stores a new signing key with this secret; it signs from now on (the newest does).
    fn add_signing_key(&self, secret: &str) -> impl Future<Output = Result<SigningKey>> + Send;
}

/// Passes the whole domain through to the wrapped store (see [`crate::Layer`]).
pub trait PassKeys: crate::Layer {}

impl<L: PassKeys> KeyStore for L {
    fn create_api_key(
        &self,
        tenant: &Tenant,
        user_id: &str,
        role: AccessRole,
        name: Option<String>,
        key_hash: &str,
    ) -> impl Future<Output = Result<ApiKeyRecord>> + Send {
        self.layer_inner()
            .create_api_key(tenant, user_id, role, name, key_hash)
    }

    fn find_api_key(
        &self,
        key_hash: &str,
    ) -> impl Future<Output = Result<Option<ApiKeyRecord>>> + Send {
        self.layer_inner().find_api_key(key_hash)
    }

    fn list_api_keys(&self) -> impl Future<Output = Result<Vec<ApiKeyRecord>>> + Send {
        self.layer_inner().list_api_keys()
    }

    fn revoke_api_key(&self, id: Id) -> impl Future<Output = Result<bool>> + Send {
        self.layer_inner().revoke_api_key(id)
    }

    fn count_active_api_keys(&self) -> impl Future<Output = Result<u64>> + Send {
        self.layer_inner().count_active_api_keys()
    }

    fn list_signing_keys(&self) -> impl Future<Output = Result<Vec<SigningKey>>> + Send {
        self.layer_inner().list_signing_keys()
    }

    fn add_signing_key(&self, secret: &str) -> impl Future<Output = Result<SigningKey>> + Send {
        self.layer_inner().add_signing_key(secret)
    }
}
