//! Limits on what one caller may ask of the server, and the configurable checks of request
//! contents:
//!
//! - a token bucket per API key (per tenant when the server runs open) for every `/v1`
//!   route: over it, 429 `rate_limited` with `Retry-After`;
//! - open SSE streams per session and per tenant: over either, 429 `rate_limited`;
//! - the `related_type` allow-list and the context URL rules of seed 002 (http/https only,
//!   a host, at most 2048 characters, stored canonical);
//! - metadata size and nesting depth, and the text rules every endpoint shares (length, no
//!   control characters).
//!
//! Counters live in this process: with several nodes, each node enforces its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use stepwise_core::Id;
use stepwise_store::Store;

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::{AppState, ServerConfig};

/// Longest message `content` (and an external agent's final message or question), in characters.
pub const MAX_CONTENT_CHARS: usize = 100_000;
/// Tool calls one step may hold (`POST /v1/executions/{id}/steps`).
pub use stepwise_engine::MAX_TOOL_CALLS_PER_STEP;
/// Longest context URL accepted (before and after canonicalisation).
pub const MAX_URL_CHARS: usize = 2048;
/// Largest `metadata` object, serialized as JSON.
pub const MAX_METADATA_BYTES: usize = 16 * 1024;
/// Deepest nesting of arrays and objects in `metadata` (the object itself is level 1).
pub const MAX_METADATA_DEPTH: usize = 16;
/// Rate-limit buckets kept at most; idle (full) buckets are dropped first.
const MAX_BUCKETS: usize = 10_000;
/// What an over-the-limit SSE client is told to wait before trying again.
const SSE_RETRY_AFTER_SECS: u64 = 5;

/// The context URLs the server accepts, as a regular expression (the OpenAPI document
/// publishes the same one): http or https, a host name or an IPv4 address, an optional port,
/// then path, query and fragment made of URL characters. Nothing else (no user name or
/// password, no spaces, no IPv6 literals).
pub const URL_PATTERN: &str = concat!(
    r"^[Hh][Tt][Tt][Pp]([Ss])?://",
    r"(((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])",
    r"|([A-Za-z0-9][A-Za-z0-9-]{0,62}\.)*[A-Za-z][A-Za-z0-9-]{0,62})",
    r"(:[0-9]{1,4})?",
    r"(/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*)?",
    r"(\?[A-Za-z0-9._~!$&()*+,;=:@%/?-]*)?",
    r"(#[A-Za-z0-9._~!$&'()*+,;=:@%/?-]*)?$",
);

fn url_regex() -> Option<&'static regex::Regex> {
    static RE: OnceLock<Option<regex::Regex>> = OnceLock::new();
    RE.get_or_init(|| regex::Regex::new(URL_PATTERN).ok())
        .as_ref()
}

/// Checks a context URL and answers its canonical form: lower-case scheme and host, no
/// default port, dot segments resolved, a `/` path when there is none.
pub fn canonical_url(field: &str, text: &str) -> ApiResult<String> {
    if text.chars().count() > MAX_URL_CHARS {
        return Err(ApiError::invalid(
            field,
            format!("{field} is longer than {MAX_URL_CHARS} characters"),
        ));
    }
    let matches = url_regex().is_some_and(|re| re.is_match(text));
    if !matches {
        return Err(ApiError::invalid(
            field,
            format!(
                "{field} must be an http or https URL with a host (no spaces, user names or passwords)"
            ),
        ));
    }
    let url = url::Url::parse(text)
        .map_err(|e| ApiError::invalid(field, format!("{field} is not a valid URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        return Err(ApiError::invalid(
            field,
            format!("{field} must be an http or https URL with a host"),
        ));
    }
    let canonical = String::from(url);
    // Canonical form may add the `/` of an empty path; nothing it does grows a URL further.
    if canonical.chars().count() > MAX_URL_CHARS + 1 {
        return Err(ApiError::invalid(
            field,
            format!("{field} is longer than {MAX_URL_CHARS} characters once canonical"),
        ));
    }
    Ok(canonical)
}

/// [`canonical_url`] of an optional field.
pub fn canonical_url_opt(field: &str, value: Option<String>) -> ApiResult<Option<String>> {
    value.map(|text| canonical_url(field, &text)).transpose()
}

/// Refuses a `related_type` outside the configured allow-list (any passes without one).
pub fn check_related_type(
    config: &ServerConfig,
    field: &str,
    value: &Option<String>,
) -> ApiResult<()> {
    if let (Some(allowed), Some(value)) = (&config.related_types, value)
        && !allowed.iter().any(|a| a == value)
    {
        return Err(ApiError::invalid(
            field,
            format!(
                "{field} '{}' is not one this server accepts ({})",
                crate::error::cut(value, 64),
                allowed.join(", ")
            ),
        ));
    }
    Ok(())
}

/// Refuses text longer than `max_chars` characters or holding control characters other
/// than tab, newline and carriage return (absent passes).
pub fn check_text(field: &str, value: &Option<String>, max_chars: usize) -> ApiResult<()> {
    if let Some(text) = value {
        if text.chars().count() > max_chars {
            return Err(ApiError::invalid(
                field,
                format!("{field} is longer than {max_chars} characters"),
            ));
        }
        if text
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t' && c != '\r')
        {
            return Err(ApiError::invalid(
                field,
                format!("{field} contains control characters"),
            ));
        }
    }
    Ok(())
}

/// Reads a `metadata` field: absent or `null` is `null`, an object within the limits
/// ([`check_metadata_limits`]) is itself, anything else is refused.
pub fn check_metadata(field: &str, value: &Option<Value>) -> ApiResult<Value> {
    match value {
        None | Some(Value::Null) => Ok(Value::Null),
        Some(object @ Value::Object(_)) => {
            check_metadata_limits(field, object)?;
            Ok(object.clone())
        }
        Some(_) => Err(ApiError::invalid(
            field,
            format!("{field} must be a JSON object"),
        )),
    }
}

/// Refuses metadata larger than [`MAX_METADATA_BYTES`] or nested deeper than
/// [`MAX_METADATA_DEPTH`].
pub fn check_metadata_limits(field: &str, value: &Value) -> ApiResult<()> {
    if depth(value) > MAX_METADATA_DEPTH {
        return Err(ApiError::invalid(
            field,
            format!("{field} nests arrays and objects deeper than {MAX_METADATA_DEPTH} levels"),
        ));
    }
    let size = serde_json::to_vec(value).map_or(usize::MAX, |b| b.len());
    if size > MAX_METADATA_BYTES {
        return Err(ApiError::invalid(
            field,
            format!("{field} is {size} bytes of JSON; the limit is {MAX_METADATA_BYTES}"),
        ));
    }
    Ok(())
}

/// Nesting depth of arrays and objects (a scalar is 0), without recursion.
fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack: Vec<(&Value, usize)> = vec![(value, 1)];
    while let Some((value, level)) = stack.pop() {
        match value {
            Value::Array(items) => {
                deepest = deepest.max(level);
                stack.extend(items.iter().map(|v| (v, level + 1)));
            }
            Value::Object(map) => {
                deepest = deepest.max(level);
                stack.extend(map.values().map(|v| (v, level + 1)));
            }
            _ => {}
        }
    }
    deepest
}

// --- rate limit ---------------------------------------------------------------------------

/// Token buckets, one per caller: `burst` tokens, refilled at `per_sec`; a request takes one.
pub struct RateLimiter {
    per_sec: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

impl RateLimiter {
    /// `None` when the rate is 0 (no limit). A burst of 0 means one second's worth.
    pub fn new(per_sec: f64, burst: u32) -> Option<Self> {
        if !per_sec.is_finite() || per_sec <= 0.0 {
            return None;
        }
        let burst = if burst == 0 {
            per_sec.ceil().max(1.0)
        } else {
            f64::from(burst)
        };
        Some(RateLimiter {
            per_sec,
            burst,
            buckets: Mutex::new(HashMap::new()),
        })
    }

    /// Takes a token of `key`'s bucket, or answers the whole seconds until one is there.
    pub fn take(&self, key: &str) -> Result<(), u64> {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(key) {
            self.evict(&mut buckets, now);
        }
        let bucket = buckets.entry(key.to_string()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.per_sec).min(self.burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            let wait = ((1.0 - bucket.tokens) / self.per_sec).ceil();
            Err(if wait.is_finite() {
                (wait as u64).clamp(1, 86_400)
            } else {
                86_400
            })
        }
    }

    /// Drops the buckets that have refilled (a full bucket is the same as none); when all
    /// are busy, drops them all rather than grow.
    fn evict(&self, buckets: &mut HashMap<String, Bucket>, now: Instant) {
        buckets.retain(|_, b| {
            let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
            b.tokens + elapsed * self.per_sec < self.burst
        });
        if buckets.len() >= MAX_BUCKETS {
            buckets.clear();
        }
    }

    /// Buckets held now (for tests).
    pub fn len(&self) -> usize {
        self.buckets.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The bucket of a caller: its API key's; for an end-user token its user's (every token of
/// one user shares it); its tenant's on an open server.
fn bucket_key(caller: &Caller) -> String {
    match (&caller.key_id, caller.credential) {
        (Some(id), _) => format!("key:{id}"),
        (None, crate::auth::Credential::Token) => format!(
            "user:{}:{}:{}",
            caller.tenant.as_str().len(),
            caller.tenant.as_str(),
            caller.user_id
        ),
        (None, _) => format!("tenant:{}", caller.tenant.as_str()),
    }
}

/// Middleware for `/v1`, inside auth: one token per request, or 429 with `Retry-After`.
pub async fn rate_limit<S: Store>(
    State(state): State<AppState<S>>,
    request: Request,
    next: Next,
) -> Response {
    if let (Some(limiter), Some(caller)) = (
        state.limits.rate.as_ref(),
        request.extensions().get::<Caller>(),
    ) && let Err(retry_after) = limiter.take(&bucket_key(caller))
    {
        let whose = match caller.credential {
            crate::auth::Credential::Token => "this user",
            _ => "this API key",
        };
        return ApiError::rate_limited(
            retry_after,
            format!("too many requests for {whose}; retry in {retry_after} s"),
        )
        .into_response();
    }
    next.run(request).await
}

// --- SSE subscribers ----------------------------------------------------------------------

/// Open event streams per session and per tenant (0 = no limit).
pub struct Subscribers {
    per_session: usize,
    per_tenant: usize,
    counts: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    sessions: HashMap<(String, Id), usize>,
    tenants: HashMap<String, usize>,
}

/// A stream's place; given back when dropped.
pub struct SubscriberSlot {
    owner: Arc<Subscribers>,
    tenant: String,
    session: Id,
}

impl Subscribers {
    pub fn new(per_session: usize, per_tenant: usize) -> Self {
        Subscribers {
            per_session,
            per_tenant,
            counts: Mutex::new(Counts::default()),
        }
    }

    /// A place for one more stream of `session`, or 429 when the session or the tenant
    /// has its limit open already.
    pub fn acquire(self: &Arc<Self>, tenant: &str, session: Id) -> ApiResult<SubscriberSlot> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let key = (tenant.to_string(), session);
        let on_session = counts.sessions.get(&key).copied().unwrap_or(0);
        if self.per_session > 0 && on_session >= self.per_session {
            return Err(ApiError::rate_limited(
                SSE_RETRY_AFTER_SECS,
                format!(
                    "this session has {} event streams open already (the limit)",
                    self.per_session
                ),
            ));
        }
        let on_tenant = counts.tenants.get(tenant).copied().unwrap_or(0);
        if self.per_tenant > 0 && on_tenant >= self.per_tenant {
            return Err(ApiError::rate_limited(
                SSE_RETRY_AFTER_SECS,
                format!(
                    "this tenant has {} event streams open already (the limit)",
                    self.per_tenant
                ),
            ));
        }
        counts.sessions.insert(key, on_session + 1);
        counts.tenants.insert(tenant.to_string(), on_tenant + 1);
        Ok(SubscriberSlot {
            owner: self.clone(),
            tenant: tenant.to_string(),
            session,
        })
    }

    /// Streams open now for a session (for tests).
    pub fn open_for(&self, tenant: &str, session: Id) -> usize {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts
            .sessions
            .get(&(tenant.to_string(), session))
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for SubscriberSlot {
    fn drop(&mut self) {
        let mut counts = self.owner.counts.lock().unwrap_or_else(|e| e.into_inner());
        let key = (std::mem::take(&mut self.tenant), self.session);
        if let Some(n) = counts.sessions.get_mut(&key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.sessions.remove(&key);
            }
        }
        if let Some(n) = counts.tenants.get_mut(&key.0) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.tenants.remove(&key.0);
            }
        }
    }
}

/// The limiters of one server.
pub struct Limits {
    pub rate: Option<RateLimiter>,
    pub subscribers: Arc<Subscribers>,
}

impl Limits {
    pub fn new(config: &ServerConfig) -> Self {
        Limits {
            rate: RateLimiter::new(config.rate_limit_per_sec, config.rate_limit_burst),
            subscribers: Arc::new(Subscribers::new(
                config.max_sse_per_session,
                config.max_sse_per_tenant,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_urls() {
        for (given, canonical) in [
            (
                "HTTP://Example.COM:80/a/../b?x=1#f",
                "http://example.com/b?x=1#f",
            ),
            ("https://example.com:443", "https://example.com/"),
            ("https://example.com:8443/p", "https://example.com:8443/p"),
            ("http://127.0.0.1:7777/x", "http://127.0.0.1:7777/x"),
            ("http://localhost", "http://localhost/"),
        ] {
            assert_eq!(
                canonical_url("u", given).as_deref(),
                Ok(canonical),
                "{given}"
            );
        }
        for bad in [
            "javascript:alert(1)",
            "ftp://example.com/",
            "http://",
            "http:///path",
            "http://user:pw@example.com/",
            "http://exa mple.com/",
            "http://example.com/a b",
            "http://1.2.3.999/",
            "//example.com/",
            "",
            "http://example.com\n",
        ] {
            assert!(canonical_url("u", bad).is_err(), "{bad:?}");
        }
        let long = format!("http://example.com/{}", "a".repeat(MAX_URL_CHARS));
        assert!(canonical_url("u", &long).is_err());
    }

    #[test]
    fn metadata_depth_and_size() {
        let mut deep = serde_json::json!(1);
        for _ in 0..MAX_METADATA_DEPTH {
            deep = serde_json::json!({ "a": deep });
        }
        assert!(check_metadata_limits("m", &deep).is_ok());
        let deeper = serde_json::json!({ "a": deep });
        assert!(check_metadata_limits("m", &deeper).is_err());
        let big = serde_json::json!({ "a": "x".repeat(MAX_METADATA_BYTES) });
        assert!(check_metadata_limits("m", &big).is_err());
    }

    #[test]
    fn buckets_refill_and_stay_bounded() {
        let limiter = RateLimiter::new(0.001, 2).expect("on");
        assert_eq!(limiter.take("a"), Ok(()));
        assert_eq!(limiter.take("a"), Ok(()));
        let wait = limiter.take("a").expect_err("over the burst");
        assert!(wait >= 1, "{wait}");
        assert_eq!(limiter.take("b"), Ok(()), "another key has its own bucket");
        assert!(RateLimiter::new(0.0, 10).is_none());
        let many = RateLimiter::new(1000.0, 1).expect("on");
        for n in 0..(MAX_BUCKETS + 10) {
            let _ = many.take(&n.to_string());
        }
        assert!(many.len() <= MAX_BUCKETS);
    }

    #[test]
    fn subscriber_slots_are_given_back() {
        let subscribers = Arc::new(Subscribers::new(2, 3));
        let s1 = Id::now_v7();
        let s2 = Id::now_v7();
        let a = subscribers.acquire("t", s1).expect("1");
        let _b = subscribers.acquire("t", s1).expect("2");
        assert!(subscribers.acquire("t", s1).is_err(), "per session");
        let _c = subscribers.acquire("t", s2).expect("3");
        assert!(subscribers.acquire("t", s2).is_err(), "per tenant");
        assert!(subscribers.acquire("u", s2).is_ok(), "another tenant");
        drop(a);
        assert_eq!(subscribers.open_for("t", s1), 1);
        assert!(subscribers.acquire("t", s2).is_ok());
    }
}
