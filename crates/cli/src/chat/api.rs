//! The chat's HTTP client: the `/v1` API of api.md and nothing else, so the chat behaves
//! the same against a remote server and the in-process one. Every failure becomes one
//! clear sentence (server down, 401, 404 ...), never a panic.

use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::sse::EventStream;

/// Requests other than the event stream give up after this long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest page the API serves.
const PAGE: u32 = 500;

#[derive(Debug, Clone, Deserialize)]
pub struct Session {
    pub id: String,
    pub name: Option<String>,
    pub status: String,
    pub message_count: u64,
    pub updated_at: String,
    pub last_execution_id: Option<String>,
}

impl Session {
    /// The name people use, else the id.
    pub fn label(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.id)
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct Message {
    pub id: String,
    pub role: String,
    pub content: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Execution {
    pub id: String,
    pub status: String,
}

/// An agent type of `GET /v1/agents`.
#[derive(Debug, Clone, Deserialize)]
pub struct AgentInfo {
    #[serde(rename = "type")]
    pub agent_type: String,
    #[serde(default)]
    pub description: String,
    pub builtin: bool,
    pub workers_online: Option<u32>,
    pub last_seen_at: Option<String>,
}

impl AgentInfo {
    /// "built-in", "2 workers online", "no worker online (last seen ...)".
    pub fn availability(&self) -> String {
        match (self.builtin, self.workers_online.unwrap_or(0)) {
            (true, _) => "built-in".to_string(),
            (false, 0) => format!(
                "no worker online (last seen {})",
                self.last_seen_at.as_deref().unwrap_or("never")
            ),
            (false, 1) => "1 worker online".to_string(),
            (false, n) => format!("{n} workers online"),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
struct AgentList {
    items: Vec<AgentInfo>,
}

/// The 202 answer of `POST /v1/sessions/{id}/messages`.
#[derive(Debug, Clone, Deserialize)]
pub struct Posted {
    pub message: Message,
    pub execution: Execution,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Memory {
    pub restored: String,
    pub steps: Vec<Value>,
}

#[derive(Debug, Deserialize)]
struct Page<T> {
    items: Vec<T>,
    next_cursor: Option<String>,
}

/// The `data:` of an event.
#[derive(Debug, Clone, Deserialize)]
pub struct EventData {
    pub message_id: Option<String>,
    pub execution_id: Option<String>,
    pub event_type: String,
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub metadata: Value,
}

#[derive(Debug, Deserialize)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Debug, Deserialize)]
struct ErrorDetail {
    code: String,
    message: String,
}

#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    /// What requests are sent to: the server's URL, or `http://localhost` over a Unix socket.
    url: String,
    /// The server as given (`http://HOST:PORT` or `unix:PATH`), for messages.
    base: String,
    key: Option<String>,
}

impl Api {
    /// `base` is the server's root URL (`http://127.0.0.1:7777`; a trailing `/v1` is fine)
    /// or `unix:PATH`, a server's Unix socket (`stepwise serve --listen unix:PATH`).
    pub fn new(base: &str, key: Option<String>) -> anyhow::Result<Self> {
        let mut builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(10));
        let (base, url) = match base.trim().strip_prefix("unix:") {
            Some(path) => {
                if path.is_empty() {
                    bail!(
                        "the server `unix:` needs the socket's path (unix:/path/to/stepwise.sock)"
                    );
                }
                builder = unix_socket(builder, path)?;
                (format!("unix:{path}"), "http://localhost".to_string())
            }
            None => {
                let mut base = base.trim().trim_end_matches('/').to_string();
                if let Some(stripped) = base.strip_suffix("/v1") {
                    base = stripped.to_string();
                }
                if !base.starts_with("http://") && !base.starts_with("https://") {
                    bail!(
                        "the server URL `{base}` must start with http:// or https:// (or be unix:PATH)"
                    );
                }
                (base.clone(), base)
            }
        };
        let http = builder.build().context("cannot set up the HTTP client")?;
        Ok(Api {
            http,
            url,
            base,
            key: key.filter(|k| !k.trim().is_empty()),
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let builder = self.http.request(method, format!("{}/v1{path}", self.url));
        match &self.key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }

    /// Sends and turns every failure into one sentence.
    async fn send(&self, builder: RequestBuilder) -> anyhow::Result<reqwest::Response> {
        let response = builder.send().await.map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = response.text().await.unwrap_or_default();
        let detail = serde_json::from_str::<ErrorBody>(&body)
            .ok()
            .map(|b| b.error);
        let message = detail
            .as_ref()
            .map(|d| format!("{} ({})", d.message, d.code))
            .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_string());
        Err(match status {
            StatusCode::UNAUTHORIZED => anyhow!(
                "the server refused the request (401): {message}; set STEPWISE_API_KEY to a key from `stepwise keys create`"
            ),
            _ => anyhow!("the server answered {}: {message}", status.as_u16()),
        })
    }

    fn transport_error(&self, e: &reqwest::Error) -> anyhow::Error {
        if e.is_connect() {
            anyhow!(
                "cannot reach the Stepwise server at {} (is `stepwise serve` running?)",
                self.base
            )
        } else if e.is_timeout() {
            anyhow!(
                "the Stepwise server at {} did not answer in time",
                self.base
            )
        } else {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(cause) = source {
                text = format!("{text}: {cause}");
                source = cause.source();
            }
            anyhow!("request to {} failed: {text}", self.base)
        }
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let response = self
            .send(self.request(Method::GET, path).timeout(REQUEST_TIMEOUT))
            .await?;
        response
            .json()
            .await
            .with_context(|| format!("the server's answer to GET {path} could not be read"))
    }

    pub async fn post<T: DeserializeOwned>(&self, path: &str, body: &Value) -> anyhow::Result<T> {
        let response = self
            .send(
                self.request(Method::POST, path)
                    .timeout(REQUEST_TIMEOUT)
                    .json(body),
            )
            .await?;
        response
            .json()
            .await
            .with_context(|| format!("the server's answer to POST {path} could not be read"))
    }

    pub async fn delete(&self, path: &str) -> anyhow::Result<()> {
        self.send(self.request(Method::DELETE, path).timeout(REQUEST_TIMEOUT))
            .await?;
        Ok(())
    }

    /// Every item of a list endpoint, following `next_cursor`.
    async fn all<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<Vec<T>> {
        let join = if path.contains('?') { '&' } else { '?' };
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut url = format!("{path}{join}limit={PAGE}");
            if let Some(cursor) = &cursor {
                url.push_str("&cursor=");
                url.push_str(&encode(cursor));
            }
            let page: Page<T> = self.get(&url).await?;
            items.extend(page.items);
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(items),
            }
        }
    }

    /// Sessions (not deleted ones), most recently updated first.
    pub async fn sessions(&self) -> anyhow::Result<Vec<Session>> {
        self.all("/sessions").await
    }

    /// A session by id or name; `None` when there is none.
    pub async fn find_session(&self, id_or_name: &str) -> anyhow::Result<Option<Session>> {
        let sessions = self.sessions().await?;
        if let Some(found) = sessions
            .iter()
            .find(|s| s.name.as_deref() == Some(id_or_name))
            .or_else(|| sessions.iter().find(|s| s.id == id_or_name))
        {
            return Ok(Some(found.clone()));
        }
        Ok(None)
    }

    /// A new session; with an agent, that agent is its default.
    pub async fn create_session(&self, name: &str, agent: Option<&str>) -> anyhow::Result<Session> {
        let mut body = serde_json::json!({ "name": name });
        if let Some(agent) = agent {
            body["agent"] = serde_json::json!({ "type": agent });
        }
        self.post("/sessions", &body).await
    }

    /// The agent types the server's tenant can use (`GET /v1/agents`).
    pub async fn agents(&self) -> anyhow::Result<Vec<AgentInfo>> {
        let list: AgentList = self.get("/agents").await?;
        Ok(list.items)
    }

    /// The user's and the assistant's messages, oldest first.
    pub async fn conversation(&self, session_id: &str) -> anyhow::Result<Vec<Message>> {
        self.all(&format!(
            "/sessions/{session_id}/messages?roles=user,assistant"
        ))
        .await
    }

    pub async fn memory(&self, session_id: &str) -> anyhow::Result<Memory> {
        self.get(&format!("/sessions/{session_id}/memory")).await
    }

    pub async fn execution(&self, id: &str) -> anyhow::Result<Execution> {
        self.get(&format!("/executions/{id}")).await
    }

    /// Sends a message; with an agent, that agent answers it.
    pub async fn send_message(
        &self,
        session_id: &str,
        content: &str,
        agent: Option<&str>,
    ) -> anyhow::Result<Posted> {
        let mut body = serde_json::json!({ "content": content });
        if let Some(agent) = agent {
            body["agent"] = serde_json::json!({ "type": agent });
        }
        self.post(&format!("/sessions/{session_id}/messages"), &body)
            .await
    }

    /// Asks the server to cancel; `false` when the execution had already finished (409).
    pub async fn cancel(&self, execution_id: &str) -> anyhow::Result<bool> {
        let response = self
            .request(Method::POST, &format!("/executions/{execution_id}/cancel"))
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await
            .map_err(|e| self.transport_error(&e))?;
        if response.status() == StatusCode::CONFLICT {
            return Ok(false);
        }
        if response.status().is_success() {
            return Ok(true);
        }
        // Reuse the error wording of every other request.
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        let message = serde_json::from_str::<ErrorBody>(&body)
            .map(|b| b.error.message)
            .unwrap_or_else(|_| status.to_string());
        bail!("cancel failed ({}): {message}", status.as_u16())
    }

    pub async fn export(&self, session_id: &str) -> anyhow::Result<Value> {
        self.get(&format!("/sessions/{session_id}/export")).await
    }

    pub async fn delete_session(&self, session_id: &str) -> anyhow::Result<()> {
        self.delete(&format!("/sessions/{session_id}")).await
    }

    /// The session's event stream from after event `after` (0: from the first).
    pub async fn events(&self, session_id: &str, after: i64) -> anyhow::Result<EventStream> {
        let mut builder = self
            .request(Method::GET, &format!("/sessions/{session_id}/events"))
            .header("accept", "text/event-stream");
        if after > 0 {
            builder = builder.header("last-event-id", after.to_string());
        }
        let response = self.send(builder).await?;
        Ok(EventStream::new(response.bytes_stream(), &self.base))
    }
}

/// Percent-encodes a query value (cursors are opaque and may hold `+`, `/`, `=`).
#[cfg(unix)]
fn unix_socket(
    builder: reqwest::ClientBuilder,
    path: &str,
) -> anyhow::Result<reqwest::ClientBuilder> {
    Ok(builder.unix_socket(path.to_string()))
}

#[cfg(not(unix))]
fn unix_socket(_: reqwest::ClientBuilder, path: &str) -> anyhow::Result<reqwest::ClientBuilder> {
    bail!("unix:{path}: Unix sockets need a Unix system")
}

fn encode(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_encoded_and_urls_normalised() {
        assert_eq!(encode("a+b/c="), "a%2Bb%2Fc%3D");
        let api = Api::new("http://127.0.0.1:7777/v1/", None).unwrap();
        assert_eq!(api.base(), "http://127.0.0.1:7777");
        assert!(Api::new("127.0.0.1:7777", None).is_err());
        let api = Api::new("unix:/tmp/stepwise.sock", None).unwrap();
        assert_eq!(api.base(), "unix:/tmp/stepwise.sock");
        assert_eq!(api.url, "http://localhost");
        assert!(Api::new("unix:", None).is_err());
    }
}
