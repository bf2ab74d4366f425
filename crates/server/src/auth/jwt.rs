//! End-user tokens (JWT, RFC 7519): the app's own, verified with its HS256 secret
//! (`--jwt-secret`) or its identity provider's JWKS (`--jwt-jwks`: RS256, ES256, EdDSA), and
//! the ones this deployment mints itself (`POST /v1/tokens`), HS256 with a signing key kept in
//! the store so every node verifies what any node minted (`docs/security.md`).
//!
//! A verified token is cached by its hash until it expires, so a browser's every request
//! costs a hash and a map lookup, not a signature check. The token text itself is never
//! logged.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde_json::{Map, Value, json};
use stepwise_core::apikey::{generate_signing_secret, hash_api_key};
use stepwise_core::{Id, Timestamp};
use stepwise_store::{AccessRole, SigningKey, Store, Tenant};

use super::{Caller, Credential};
use crate::error::{ApiError, ApiResult};

/// How far `exp`, `nbf` and `iat` may be off (clock skew between the issuer and us).
pub const LEEWAY_SECS: u64 = 60;
/// The shortest HS256 secret taken (RFC 7518 §3.2: at least the hash's size).
pub const MIN_SECRET_BYTES: usize = 32;
/// The `iss` of the tokens this deployment mints.
pub const MINTED_ISSUER: &str = "stepwise";
/// A minted token's `kid` is this and the signing key's id.
const MINTED_KID_PREFIX: &str = "stepwise-";
/// The longest token read (longer ones are refused unread).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// The longest `sub` (a user id) taken.
pub const MAX_SUBJECT_CHARS: usize = 256;
/// A JWKS is fetched again for an unknown `kid` at most this often.
const JWKS_REFETCH: Duration = Duration::from_secs(60);
/// The store's signing keys are read again for an unknown minted `kid` at most this often,
/// and at least this often before minting (so a rotation reaches every node).
const SIGNING_REFETCH: Duration = Duration::from_secs(1);
const SIGNING_MAX_AGE: Duration = Duration::from_secs(60);
const MAX_CACHED_TOKENS: usize = 10_000;

/// How the app's own tokens are verified (`serve --jwt-*`).
#[derive(Clone, Default)]
pub struct JwtSettings {
    /// HS256 shared secret (at least 32 bytes).
    pub secret: Option<String>,
    /// A JWKS file's path or an `https://` URL.
    pub jwks: Option<String>,
    /// Required `aud`, when set.
    pub audience: Option<String>,
    /// Required `iss`, when set.
    pub issuer: Option<String>,
    /// The claim naming the tenant (`tenant` by default).
    pub tenant_claim: String,
    /// The tenant of a token without that claim; without it such a token is refused.
    pub default_tenant: Option<String>,
}

impl std::fmt::Debug for JwtSettings {
    /// Never prints the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtSettings")
            .field("secret", &self.secret.as_ref().map(|_| "<set>"))
            .field("jwks", &self.jwks)
            .field("audience", &self.audience)
            .field("issuer", &self.issuer)
            .field("tenant_claim", &self.tenant_claim)
            .field("default_tenant", &self.default_tenant)
            .finish()
    }
}

impl JwtSettings {
    /// Whether the app's tokens are verified at all (a secret or a JWKS is set).
    pub fn enabled(&self) -> bool {
        self.secret.is_some() || self.jwks.is_some()
    }

    /// Checks the settings before the server starts.
    pub fn check(&self) -> Result<(), String> {
        if let Some(secret) = &self.secret
            && secret.len() < MIN_SECRET_BYTES
        {
            return Err(format!(
                "--jwt-secret must be at least {MIN_SECRET_BYTES} bytes (it is {})",
                secret.len()
            ));
        }
        if let Some(source) = &self.jwks
            && !(source.starts_with("https://") || is_loopback_http(source))
            && source.contains("://")
        {
            return Err(format!(
                "--jwt-jwks must be a file path or an https:// URL, not `{source}`"
            ));
        }
        if let Some(path) = self.jwks.as_deref().filter(|s| !s.contains("://")) {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("--jwt-jwks: cannot read {path}: {e}"))?;
            let set: JwkSet = serde_json::from_str(&text).map_err(|e| {
                format!("--jwt-jwks: {path} is not a JWKS ({{\"keys\": [...]}}): {e}")
            })?;
            if set.keys.is_empty() {
                return Err(format!("--jwt-jwks: {path} holds no keys"));
            }
        }
        if self.tenant_claim.trim().is_empty() {
            return Err("--jwt-tenant-claim must not be empty".into());
        }
        if let Some(tenant) = &self.default_tenant {
            Tenant::new(tenant.clone())
                .map_err(|_| format!("--jwt-default-tenant `{tenant}` is not a valid tenant"))?;
        }
        Ok(())
    }
}

/// `http://` is only taken for a JWKS served on this machine (tests, a local sidecar).
fn is_loopback_http(source: &str) -> bool {
    ["http://127.0.0.1", "http://localhost", "http://[::1]"]
        .iter()
        .any(|p| source.starts_with(p))
}

/// Verifies tokens and mints them; one per server.
pub struct Tokens {
    settings: JwtSettings,
    verified: Mutex<HashMap<String, (Caller, u64)>>,
    jwks: tokio::sync::Mutex<JwksCache>,
    signing: tokio::sync::Mutex<SigningCache>,
    http: reqwest::Client,
}

#[derive(Default)]
struct JwksCache {
    keys: Option<JwkSet>,
    fetched: Option<Instant>,
}

#[derive(Default)]
struct SigningCache {
    keys: Vec<SigningKey>,
    fetched: Option<Instant>,
}

/// Whether a bearer credential is a JWT (three dot-separated base64url parts) rather than
/// an API key.
pub fn looks_like_jwt(text: &str) -> bool {
    text.split('.').count() == 3
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'='))
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn refused(why: &str) -> ApiError {
    ApiError::unauthorized(format!("the token is not valid: {why}"))
}

impl Tokens {
    pub fn new(settings: JwtSettings) -> Self {
        Tokens {
            settings,
            verified: Mutex::default(),
            jwks: tokio::sync::Mutex::default(),
            signing: tokio::sync::Mutex::default(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap_or_default(),
        }
    }

    pub fn settings(&self) -> &JwtSettings {
        &self.settings
    }

    /// The caller a token stands for, or 401.
    pub async fn verify<S: Store>(&self, store: &S, token: &str) -> ApiResult<Caller> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(refused("it is too long"));
        }
        let hash = hash_api_key(token);
        let now = now_secs();
        if let Some((caller, exp)) = self
            .verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&hash)
            && now < *exp
        {
            return Ok(caller.clone());
        }
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| refused("its header cannot be read (alg `none` is never taken)"))?;
        let (claims, minted) = match header.kid.as_deref() {
            Some(kid) if kid.starts_with(MINTED_KID_PREFIX) => {
                (self.verify_minted(store, token, &header, kid).await?, true)
            }
            _ => (self.verify_app(token, &header).await?, false),
        };
        let caller = self.caller_from(&claims, minted, now)?;
        let exp = claims.get("exp").and_then(Value::as_u64).unwrap_or(0);
        let mut verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        if verified.len() >= MAX_CACHED_TOKENS {
            verified.retain(|_, (_, e)| now < *e);
            if verified.len() >= MAX_CACHED_TOKENS {
                verified.clear();
            }
        }
        verified.insert(hash, (caller.clone(), exp));
        Ok(caller)
    }

    fn validation(&self, alg: Algorithm, minted: bool) -> Validation {
        let mut validation = Validation::new(alg);
        validation.leeway = LEEWAY_SECS;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "sub"]);
        if minted {
            validation.validate_aud = false;
            validation.set_issuer(&[MINTED_ISSUER]);
            return validation;
        }
        match &self.settings.audience {
            Some(audience) => validation.set_audience(&[audience]),
            None => validation.validate_aud = false,
        }
        if let Some(issuer) = &self.settings.issuer {
            validation.set_issuer(&[issuer]);
        }
        validation
    }

    fn decode(
        &self,
        token: &str,
        key: &DecodingKey,
        alg: Algorithm,
        minted: bool,
    ) -> ApiResult<Map<String, Value>> {
        use jsonwebtoken::errors::ErrorKind;
        let data =
            jsonwebtoken::decode::<Map<String, Value>>(token, key, &self.validation(alg, minted))
                .map_err(|e| {
                refused(match e.kind() {
                    ErrorKind::ExpiredSignature => "it has expired",
                    ErrorKind::ImmatureSignature => "it is not valid yet (nbf)",
                    ErrorKind::InvalidAudience => "its audience (aud) is not this server's",
                    ErrorKind::InvalidIssuer => "its issuer (iss) is not the one expected",
                    ErrorKind::MissingRequiredClaim(_) => "it lacks a required claim (exp, sub)",
                    ErrorKind::InvalidSignature => "its signature does not match",
                    ErrorKind::InvalidAlgorithm => "its algorithm is not the key's",
                    _ => "it cannot be verified",
                })
            })?;
        Ok(data.claims)
    }

    async fn verify_app(&self, token: &str, header: &Header) -> ApiResult<Map<String, Value>> {
        match header.alg {
            Algorithm::HS256 => {
                let secret =
                    self.settings.secret.as_ref().ok_or_else(|| {
                        refused("HS256 tokens are not taken here (no --jwt-secret)")
                    })?;
                self.decode(
                    token,
                    &DecodingKey::from_secret(secret.as_bytes()),
                    Algorithm::HS256,
                    false,
                )
            }
            Algorithm::RS256 | Algorithm::ES256 | Algorithm::EdDSA => {
                if self.settings.jwks.is_none() {
                    return Err(refused("no JWKS is configured (--jwt-jwks)"));
                }
                let key = self.jwk_for(header).await?;
                self.decode(token, &key, header.alg, false)
            }
            _ => Err(refused(
                "its algorithm is not one of HS256, RS256, ES256, EdDSA",
            )),
        }
    }

    /// The JWKS key for the token's `kid` (and algorithm); an unknown `kid` fetches the set
    /// again, at most once a minute.
    async fn jwk_for(&self, header: &Header) -> ApiResult<DecodingKey> {
        let mut cache = self.jwks.lock().await;
        let stale = cache.fetched.is_none_or(|at| at.elapsed() >= JWKS_REFETCH);
        if cache.keys.is_none() && stale {
            self.refresh_jwks(&mut cache).await;
        }
        if let Some(key) = cache.keys.as_ref().and_then(|set| pick_jwk(set, header)) {
            return key;
        }
        if stale && cache.fetched.is_some_and(|at| at.elapsed() >= JWKS_REFETCH) {
            self.refresh_jwks(&mut cache).await;
            if let Some(key) = cache.keys.as_ref().and_then(|set| pick_jwk(set, header)) {
                return key;
            }
        }
        Err(refused("its key (kid) is not in the JWKS"))
    }

    async fn refresh_jwks(&self, cache: &mut JwksCache) {
        let Some(source) = self.settings.jwks.as_deref() else {
            return;
        };
        cache.fetched = Some(Instant::now());
        match self.load_jwks(source).await {
            Ok(set) => cache.keys = Some(set),
            Err(why) => tracing::warn!(jwks = %source, "cannot load the JWKS: {why}"),
        }
    }

    async fn load_jwks(&self, source: &str) -> Result<JwkSet, String> {
        let bytes = if source.starts_with("https://") || source.starts_with("http://") {
            let response = self
                .http
                .get(source)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if !response.status().is_success() {
                return Err(format!("HTTP {}", response.status()));
            }
            response.bytes().await.map_err(|e| e.to_string())?.to_vec()
        } else {
            tokio::fs::read(source).await.map_err(|e| e.to_string())?
        };
        serde_json::from_slice(&bytes).map_err(|e| format!("not a JWKS: {e}"))
    }

    async fn verify_minted<S: Store>(
        &self,
        store: &S,
        token: &str,
        header: &Header,
        kid: &str,
    ) -> ApiResult<Map<String, Value>> {
        if header.alg != Algorithm::HS256 {
            return Err(refused("its algorithm is not the key's"));
        }
        let id = kid
            .strip_prefix(MINTED_KID_PREFIX)
            .and_then(stepwise_core::parse_id)
            .ok_or_else(|| refused("its key (kid) is unknown"))?;
        let secret = {
            let mut cache = self.signing.lock().await;
            let mut found = find_signing(&cache.keys, id);
            if found.is_none()
                && cache
                    .fetched
                    .is_none_or(|at| at.elapsed() >= SIGNING_REFETCH)
            {
                cache.keys = store.list_signing_keys().await?;
                cache.fetched = Some(Instant::now());
                found = find_signing(&cache.keys, id);
            }
            found.ok_or_else(|| refused("its key (kid) is unknown"))?
        };
        self.decode(
            token,
            &DecodingKey::from_secret(secret.as_bytes()),
            Algorithm::HS256,
            true,
        )
    }

    fn caller_from(
        &self,
        claims: &Map<String, Value>,
        minted: bool,
        now: u64,
    ) -> ApiResult<Caller> {
        // `jsonwebtoken` passes over an `nbf` or `iat` that is not a number, and an `aud` or
        // `iss` that is missing or not a string: each is refused here.
        for (claim, future) in [
            ("nbf", "it is not valid yet (nbf)"),
            ("iat", "it was issued in the future (iat)"),
        ] {
            match claims.get(claim) {
                None => {}
                Some(Value::Number(n)) => match n.as_f64() {
                    Some(t) if t.is_finite() && t <= (now + LEEWAY_SECS) as f64 => {}
                    _ => return Err(refused(future)),
                },
                Some(_) => {
                    return Err(refused(
                        "its nbf and iat must be numbers (seconds since 1970)",
                    ));
                }
            }
        }
        if !minted {
            if let Some(audience) = &self.settings.audience {
                let matches = match claims.get("aud") {
                    Some(Value::String(aud)) => aud == audience,
                    Some(Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(audience)),
                    _ => false,
                };
                if !matches {
                    return Err(refused("its audience (aud) is not this server's"));
                }
            }
            if let Some(issuer) = &self.settings.issuer
                && claims.get("iss").and_then(Value::as_str) != Some(issuer.as_str())
            {
                return Err(refused("its issuer (iss) is not the one expected"));
            }
        }
        let sub = claims
            .get("sub")
            .and_then(Value::as_str)
            .filter(|s| {
                !s.trim().is_empty()
                    && s.chars().count() <= MAX_SUBJECT_CHARS
                    && !s.chars().any(char::is_control)
            })
            .ok_or_else(|| refused("its subject (sub) must be a user id of 1 to 256 characters"))?;
        let tenant_claim = if minted {
            "tenant"
        } else {
            self.settings.tenant_claim.as_str()
        };
        let tenant = match claims.get(tenant_claim) {
            Some(Value::String(t)) => t.clone(),
            Some(_) => return Err(refused("its tenant claim is not a string")),
            None => self
                .settings
                .default_tenant
                .clone()
                .filter(|_| !minted)
                .ok_or_else(|| {
                    refused(&format!(
                        "it names no tenant (claim `{tenant_claim}`) and the server has no --jwt-default-tenant"
                    ))
                })?,
        };
        let tenant = Tenant::new(tenant).map_err(|_| refused("its tenant is not valid"))?;
        let role = match claims.get("stepwise_role") {
            None => AccessRole::User,
            Some(Value::String(r)) if r == "user" => AccessRole::User,
            Some(Value::String(r)) if r == "admin" && !minted => AccessRole::Admin,
            Some(_) => return Err(refused("its stepwise_role must be `user` or `admin`")),
        };
        Ok(Caller {
            tenant,
            user_id: sub.to_string(),
            key_id: None,
            role,
            credential: Credential::Token,
        })
    }

    /// Mints a `user` token for `user_id` of `tenant`, valid `ttl_s` seconds, signed with
    /// the deployment's newest signing key (made on first use).
    pub async fn mint<S: Store>(
        &self,
        store: &S,
        tenant: &Tenant,
        user_id: &str,
        ttl_s: u64,
    ) -> ApiResult<(String, Timestamp)> {
        let key = self.newest_signing_key(store).await?;
        let now = now_secs();
        let exp = now + ttl_s;
        let claims = json!({
            "sub": user_id,
            "tenant": tenant.as_str(),
            "stepwise_role": "user",
            "iss": MINTED_ISSUER,
            "iat": now,
            "exp": exp,
        });
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(format!("{MINTED_KID_PREFIX}{}", key.id));
        let token = jsonwebtoken::encode(
            &header,
            &claims,
            &EncodingKey::from_secret(key.secret.as_bytes()),
        )
        .map_err(|e| {
            ApiError::from(stepwise_store::StoreError::Backend(format!(
                "cannot sign a token: {e}"
            )))
        })?;
        let expires_at =
            Timestamp::from_micros(i64::try_from(exp).unwrap_or(i64::MAX / 1_000_000) * 1_000_000);
        Ok((token, expires_at))
    }

    async fn newest_signing_key<S: Store>(&self, store: &S) -> ApiResult<SigningKey> {
        let mut cache = self.signing.lock().await;
        if cache.keys.is_empty()
            || cache
                .fetched
                .is_none_or(|at| at.elapsed() >= SIGNING_MAX_AGE)
        {
            cache.keys = store.list_signing_keys().await?;
            cache.fetched = Some(Instant::now());
        }
        if cache.keys.is_empty() {
            let secret = generate_signing_secret().map_err(|e| {
                ApiError::from(stepwise_store::StoreError::Backend(format!(
                    "cannot get random bytes from the OS: {e}"
                )))
            })?;
            let key = store.add_signing_key(&secret).await?;
            tracing::info!(signing_key = %key.id, "made the first token signing key");
            cache.keys.push(key);
        }
        cache
            .keys
            .iter()
            .max_by_key(|k| (k.created_at, k.id))
            .cloned()
            .ok_or_else(|| {
                ApiError::from(stepwise_store::StoreError::Backend("no signing key".into()))
            })
    }
}

fn find_signing(keys: &[SigningKey], id: Id) -> Option<String> {
    keys.iter().find(|k| k.id == id).map(|k| k.secret.clone())
}

/// The JWK for a token: the one with its `kid`, or, for a token without a `kid`, the only
/// key of its algorithm. A key that names another algorithm is never used.
fn pick_jwk(set: &JwkSet, header: &Header) -> Option<ApiResult<DecodingKey>> {
    let fits = |jwk: &&jsonwebtoken::jwk::Jwk| {
        let alg_ok = match jwk.common.key_algorithm {
            None => true,
            Some(KeyAlgorithm::RS256) => header.alg == Algorithm::RS256,
            Some(KeyAlgorithm::ES256) => header.alg == Algorithm::ES256,
            Some(KeyAlgorithm::EdDSA) => header.alg == Algorithm::EdDSA,
            Some(_) => false,
        };
        let family_ok = matches!(
            (&jwk.algorithm, header.alg),
            (AlgorithmParameters::RSA(_), Algorithm::RS256)
                | (AlgorithmParameters::EllipticCurve(_), Algorithm::ES256)
                | (AlgorithmParameters::OctetKeyPair(_), Algorithm::EdDSA)
        );
        alg_ok && family_ok
    };
    let jwk = match header.kid.as_deref() {
        Some(kid) => set
            .keys
            .iter()
            .filter(fits)
            .find(|k| k.common.key_id.as_deref() == Some(kid))?,
        None => {
            let mut candidates = set.keys.iter().filter(fits);
            let only = candidates.next()?;
            if candidates.next().is_some() {
                return None;
            }
            only
        }
    };
    Some(DecodingKey::from_jwk(jwk).map_err(|_| refused("its JWKS key cannot be used")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jwts_and_keys_are_told_apart() {
        assert!(looks_like_jwt("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhIn0.sig-_"));
        assert!(!looks_like_jwt("sk_0123456789abcdef"));
        assert!(!looks_like_jwt("a.b"));
        assert!(!looks_like_jwt("a.b.c d"));
    }

    #[test]
    fn settings_are_checked() {
        let short = JwtSettings {
            secret: Some("too short".into()),
            tenant_claim: "tenant".into(),
            ..JwtSettings::default()
        };
        assert!(short.check().is_err());
        let http = JwtSettings {
            jwks: Some("http://example.invalid/jwks.json".into()),
            tenant_claim: "tenant".into(),
            ..JwtSettings::default()
        };
        assert!(http.check().is_err());
        let dir = tempfile::tempdir().expect("dir");
        let file = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write");
            path.display().to_string()
        };
        let with_jwks = |source: String| JwtSettings {
            secret: Some("x".repeat(32)),
            jwks: Some(source),
            tenant_claim: "tenant".into(),
            ..JwtSettings::default()
        };
        let key = r#"{"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "a", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#;
        assert!(with_jwks(file("good.json", key)).check().is_ok());
        let missing = dir.path().join("absent.json").display().to_string();
        for (why, source) in [
            ("missing", missing),
            ("not JSON", file("bad.json", "{not json")),
            ("no keys", file("empty.json", r#"{"keys": []}"#)),
        ] {
            let error = with_jwks(source).check().expect_err(why);
            assert!(error.starts_with("--jwt-jwks"), "{why}: {error}");
        }
        assert!(
            with_jwks("http://127.0.0.1:9/jwks.json".into())
                .check()
                .is_ok()
        );
    }
}
