//! API keys: high-entropy secrets shown once; only their hash is stored. A plain SHA-256
//! is enough for a 256-bit random key (no dictionary to guess from), and lookups by hash
//! compare fixed-length digests, so timing reveals nothing about the secret.

use sha2::{Digest, Sha256};

pub const KEY_PREFIX: &str = "sw_";

/// A new random key: `sw_` and 64 hex digits (256 bits from the OS).
pub fn generate_api_key() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!("{KEY_PREFIX}{}", hex(&bytes)))
}

/// A new secret for signing the deployment's own tokens (HS256): 64 hex digits, 256 bits
/// from the OS.
pub fn generate_signing_secret() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(hex(&bytes))
}

/// A random token for a worker's lease on an execution: `lease_` and 32 hex digits (128
/// bits from the OS), so no one can guess another worker's lease.
pub fn generate_lease_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    Ok(format!("lease_{}", hex(&bytes)))
}

/// The stored form of a key: hex SHA-256 of the secret.
pub fn hash_api_key(secret: &str) -> String {
    hex(&Sha256::digest(secret.as_bytes()))
}

/// Compares two strings in time that depends only on their lengths.
pub fn constant_time_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A stable id derived from a tenant and an id of that tenant, different for every
/// tenant: in-memory maps keyed by it cannot mix two tenants that name the same id.
pub fn tenant_scoped_id(tenant: &str, id: uuid::Uuid) -> uuid::Uuid {
    let mut hasher = Sha256::new();
    hasher.update((tenant.len() as u64).to_le_bytes());
    hasher.update(tenant.as_bytes());
    hasher.update(id.as_bytes());
    let digest = hasher.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Uuid::from_bytes(bytes)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_random_and_hash_stably() {
        let a = generate_api_key().unwrap_or_default();
        let b = generate_api_key().unwrap_or_default();
        assert!(a.starts_with(KEY_PREFIX) && a.len() == 67);
        assert_ne!(a, b);
        assert_eq!(hash_api_key(&a), hash_api_key(&a));
        assert_ne!(hash_api_key(&a), hash_api_key(&b));
        assert!(!hash_api_key(&a).contains(&a[3..]));
        assert!(constant_time_eq("abc", "abc") && !constant_time_eq("abc", "abd"));
    }
}
