//! What the benchmarks against a running server (`--url`) share: the HTTP clients and
//! creating a session to work in.

use anyhow::Context;
use serde_json::json;

fn auth(api_key: Option<&str>) -> anyhow::Result<reqwest::header::HeaderMap> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(key) = api_key {
        let value = reqwest::header::HeaderValue::from_str(&format!("Bearer {key}"))
            .context("the API key")?;
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    Ok(headers)
}

/// A client sending `api_key` (as `Authorization: Bearer`) when there is one.
pub(super) fn client(api_key: Option<&str>) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .default_headers(auth(api_key)?)
        .build()?)
}

/// A client of one connection (each viewer on a connection of its own, as browsers are).
pub(super) fn viewer_client(api_key: Option<&str>) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .default_headers(auth(api_key)?)
        .build()?)
}

/// Creates a session titled `title`; answers its id.
pub(super) async fn create_session(
    client: &reqwest::Client,
    base: &str,
    title: &str,
) -> anyhow::Result<String> {
    let created: serde_json::Value = client
        .post(format!("{base}/v1/sessions"))
        .json(&json!({ "title": title }))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    created["id"]
        .as_str()
        .map(str::to_string)
        .context("the new session's id")
}
