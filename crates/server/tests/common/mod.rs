//! A real node on a loopback port over a SQLite file in a tempdir, and an SSE reader.
#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::Value;
use stepwise_core::apikey::{generate_api_key, hash_api_key};
use stepwise_engine::{AgentRegistry, DEMO_AGENT, DemoAgent, Engine, EngineConfig};
use stepwise_server::{Metered, Node, NodeSettings, ServerConfig};
use stepwise_store::prelude::*;
use stepwise_store::{AccessRole, Tenant};
use stepwise_store_sqlite::SqliteStore;

pub const DEADLINE: Duration = Duration::from_secs(30);

/// A node over a [`Metered`] SQLite store, as `stepwise serve` runs it (so `/metrics` has the
/// store's counters): the demo agent taking `step_delay` a step, `workers` workers and the
/// queue's fallback poll every `poll_interval`.
pub async fn start_metered(
    store: Metered<SqliteStore>,
    workers: usize,
    step_delay: Duration,
    poll_interval: Duration,
) -> Node<Metered<SqliteStore>> {
    let mut agents = AgentRegistry::new();
    agents.register(DEMO_AGENT, DemoAgent::with_step_delay(step_delay));
    let settings = NodeSettings {
        engine: EngineConfig {
            workers,
            poll_interval,
            ..EngineConfig::default()
        },
        ..NodeSettings::new(agents)
    };
    stepwise_protocols::start_node(settings, store)
        .await
        .expect("node")
}

/// The `/metrics` text of the node at `base`.
pub async fn metrics_text(client: &reqwest::Client, base: &str) -> String {
    client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text")
}

/// The value of an unlabelled series in `/metrics` text.
#[track_caller]
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

pub struct TestServer {
    pub base: String,
    pub store: SqliteStore,
    pub engine: Engine<SqliteStore>,
    pub client: reqwest::Client,
    pub token: Option<String>,
    node: Node<SqliteStore>,
    _dir: tempfile::TempDir,
}

pub type Register = Box<dyn FnOnce(&mut AgentRegistry)>;

pub struct Options {
    pub step_ms: u64,
    pub server: ServerConfig,
    pub register: Option<Register>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            step_ms: 5,
            server: ServerConfig::default(),
            register: None,
        }
    }
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(Options::default()).await
    }

    pub async fn start_with(options: Options) -> TestServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(&dir.path().join("stepwise.db")).expect("open store");
        let mut agents = AgentRegistry::new();
        agents.register(
            DEMO_AGENT,
            DemoAgent::with_step_delay(Duration::from_millis(options.step_ms)),
        );
        if let Some(register) = options.register {
            register(&mut agents);
        }
        let settings = NodeSettings {
            engine: EngineConfig {
                workers: 4,
                lease: Duration::from_secs(5),
                poll_interval: Duration::from_millis(100),
                ..EngineConfig::default()
            },
            server: options.server,
            ..NodeSettings::new(agents)
        };
        let node = stepwise_protocols::start_node(settings, store.clone())
            .await
            .expect("node");
        TestServer {
            base: node.base_url(),
            store,
            engine: node.engine().clone(),
            client: reqwest::Client::new(),
            token: None,
            node,
            _dir: dir,
        }
    }

    /// A new API key of `tenant` for `user` with `role`, stored directly; answers its secret.
    pub async fn api_key(&self, tenant: &str, user: &str, role: AccessRole) -> String {
        let secret = generate_api_key().expect("key");
        self.store
            .create_api_key(
                &Tenant::new(tenant).expect("tenant"),
                user,
                role,
                None,
                &hash_api_key(&secret),
            )
            .await
            .expect("create key");
        secret
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    fn auth(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let response = self
            .auth(self.client.get(self.url(path)))
            .send()
            .await
            .expect("request");
        read(response).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self
            .auth(self.client.post(self.url(path)).json(&body))
            .send()
            .await
            .expect("request");
        read(response).await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        let response = self
            .auth(self.client.delete(self.url(path)))
            .send()
            .await
            .expect("request");
        read(response).await
    }

    pub async fn send(&self, request: reqwest::RequestBuilder) -> (u16, Value) {
        read(self.auth(request).send().await.expect("request")).await
    }

    /// Posts a message to a new session; answers (session id, execution id).
    pub async fn message(&self, content: &str) -> (String, String) {
        let (status, body) = self
            .post("/v1/messages", serde_json::json!({"content": content}))
            .await;
        assert_eq!(status, 202, "{body}");
        (
            body["session_id"].as_str().unwrap_or_default().to_string(),
            body["execution"]["id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    }

    pub async fn message_to(&self, session: &str, content: &str) -> Value {
        let (status, body) = self
            .post(
                &format!("/v1/sessions/{session}/messages"),
                serde_json::json!({"content": content}),
            )
            .await;
        assert_eq!(status, 202, "{body}");
        body
    }

    pub async fn execution(&self, id: &str) -> Value {
        let (status, body) = self.get(&format!("/v1/executions/{id}")).await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Polls the execution until its status is one of `statuses`.
    pub async fn wait_status(&self, id: &str, statuses: &[&str]) -> Value {
        wait_for(|| async {
            let execution = self.execution(id).await;
            statuses
                .contains(&execution["status"].as_str().unwrap_or_default())
                .then_some(execution)
        })
        .await
    }

    pub async fn messages(&self, session: &str) -> Vec<Value> {
        let (status, body) = self
            .get(&format!("/v1/sessions/{session}/messages?limit=500"))
            .await;
        assert_eq!(status, 200, "{body}");
        body["items"].as_array().cloned().unwrap_or_default()
    }

    pub async fn events(&self, session: &str, last_event_id: Option<i64>) -> SseReader {
        let mut request = self
            .client
            .get(self.url(&format!("/v1/sessions/{session}/events")));
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id.to_string());
        }
        let response = self.auth(request).send().await.expect("events request");
        assert_eq!(response.status().as_u16(), 200);
        SseReader::new(response)
    }

    pub async fn stop(self) {
        self.node.shutdown(Duration::from_secs(5)).await;
    }
}

pub async fn read(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, body)
}

/// Polls `check` until it answers `Some`, failing the test after the deadline.
pub async fn wait_for<T, F, Fut>(mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "condition not met within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    /// The stream's last event id (a live-only event keeps the one before it).
    pub id: Option<i64>,
    pub event: String,
    pub data: Value,
}

pub struct SseReader {
    events: std::pin::Pin<
        Box<
            dyn futures_util::Stream<
                    Item = Result<
                        eventsource_stream::Event,
                        eventsource_stream::EventStreamError<reqwest::Error>,
                    >,
                > + Send,
        >,
    >,
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> Self {
        SseReader {
            events: Box::pin(response.bytes_stream().eventsource()),
        }
    }

    /// The next event (its data parsed as JSON when it is JSON), or `None` when the stream
    /// ends, breaks, or sends nothing for [`DEADLINE`].
    pub async fn next(&mut self) -> Option<SseEvent> {
        let event = match tokio::time::timeout(DEADLINE, self.events.next()).await {
            Ok(Some(Ok(event))) => event,
            _ => return None,
        };
        Some(SseEvent {
            id: event.id.parse().ok(),
            event: event.event,
            data: serde_json::from_str(&event.data).unwrap_or(Value::String(event.data)),
        })
    }

    /// Events up to and including the first of type `until` (for `execution_id` if given).
    pub async fn until(&mut self, until: &str) -> Vec<SseEvent> {
        let mut events = Vec::new();
        while let Some(event) = self.next().await {
            let done = event.event == until;
            events.push(event);
            if done {
                return events;
            }
        }
        panic!("the stream ended before {until}: {events:?}");
    }
}

/// An error answer: its status, its code, and the error shape of api.md.
pub fn assert_error(status: u16, body: &Value, expected_status: u16, code: &str, what: &str) {
    assert_eq!(status, expected_status, "{what}: {body}");
    assert_eq!(
        body["error"]["code"],
        serde_json::json!(code),
        "{what}: {body}"
    );
    assert!(body["error"]["message"].is_string(), "{what}: {body}");
    assert!(
        body["error"].get("field").is_some(),
        "{what}: field is always present: {body}"
    );
}
