//! HTTP figures of the real server over loopback.
//!
//! [`run_http_bench`] measures three figures with server and clients in one process (the
//! ignored test `cargo test --release -p stepwise-bench --test bench_http -- --ignored
//! --nocapture` runs it on a fresh SQLite database):
//!
//! - messages accepted per second: `POST /v1/sessions/{id}/messages` from N concurrent
//!   clients (one session each) for a fixed time; the node's workers are not started, so the
//!   figure is the API and the store's write path, not the agents;
//! - step-to-browser latency: events are appended through the store (the step path) and
//!   timed from the moment their write is committed (the Ack resolves) to the moment each
//!   SSE subscriber has read the event off its HTTP connection; p50/p99 over all samples;
//! - resident memory with N idle SSE subscribers (one session each). Clients run in the
//!   same process, so the figure is an upper bound for the server alone.
//!
//! Against a server running in a process of its own: [`accept_messages`] is the load
//! generator of `stepwise bench http --url URL`, and [`idle_server_rss`] measures the
//! server's own memory with 1,000 idle subscribers (the ignored test
//! `idle_subscribers_rss_of_a_running_server`, given `STEPWISE_BENCH_URL` and
//! `STEPWISE_BENCH_PID`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde::Serialize;
use serde_json::json;
use stepwise_core::EventType;
use stepwise_engine::{AgentRegistry, DEMO_AGENT, DemoAgent};
use stepwise_server::{LOCAL_TENANT, LOCAL_USER, Node, NodeError, NodeSettings};
use stepwise_store::{NewEvent, NewSession, Store, StoreError, Tenant};
use tokio::sync::Mutex;

#[derive(Debug, Clone)]
pub struct HttpBenchOptions {
    pub clients: usize,
    pub accept_duration: Duration,
    pub subscriber_counts: Vec<usize>,
    pub latency_events: usize,
    pub event_interval: Duration,
    pub idle_subscribers: usize,
}

impl Default for HttpBenchOptions {
    fn default() -> Self {
        HttpBenchOptions {
            clients: 64,
            accept_duration: Duration::from_secs(5),
            subscriber_counts: vec![1, 100, 1000],
            latency_events: 200,
            event_interval: Duration::from_millis(10),
            idle_subscribers: 1000,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct AcceptFigure {
    pub clients: usize,
    pub accepted: u64,
    pub errors: u64,
    pub seconds: f64,
    pub per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct LatencyFigure {
    pub subscribers: usize,
    pub events: usize,
    pub samples: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct IdleFigure {
    pub subscribers: usize,
    pub rss_before_mb: f64,
    pub rss_with_subscribers_mb: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct HttpBenchReport {
    pub messages: AcceptFigure,
    pub latency: Vec<LatencyFigure>,
    pub idle: IdleFigure,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("http: {0}")]
    Http(String),
    #[error(transparent)]
    Node(#[from] NodeError),
}

fn http(e: impl std::fmt::Display) -> BenchError {
    BenchError::Http(e.to_string())
}

/// Runs the three measurements against a server on `store` (use a fresh database).
pub async fn run_http_bench<S: Store>(
    store: S,
    options: &HttpBenchOptions,
) -> Result<HttpBenchReport, BenchError> {
    let mut agents = AgentRegistry::new();
    agents.register(DEMO_AGENT, DemoAgent::default());
    let node = Node::start(
        NodeSettings {
            run_workers: false,
            ..NodeSettings::new(agents)
        },
        store.clone(),
    )
    .await?;
    let base = node.base_url();
    let tenant = Tenant::new(LOCAL_TENANT)?;

    let messages = accept_messages(&base, options.clients, options.accept_duration, None).await?;
    let mut latency = Vec::new();
    for &subscribers in &options.subscriber_counts {
        latency.push(step_latency(&store, &tenant, &base, subscribers, options).await?);
    }
    let idle = idle_memory(&store, &tenant, &base, options.idle_subscribers).await?;

    node.shutdown(Duration::from_secs(5)).await;
    store.flush().await?;
    Ok(HttpBenchReport {
        messages,
        latency,
        idle,
    })
}

/// Messages accepted per second by the server at `base`: `clients` concurrent clients, one
/// session each, each posting `POST /v1/sessions/{id}/messages` back to back for `duration`
/// (a 202 counts; anything else is an error). With `api_key`, requests carry it as a
/// bearer token. `stepwise bench http --url` runs this from a process of its own.
pub async fn accept_messages(
    base: &str,
    clients: usize,
    duration: Duration,
    api_key: Option<&str>,
) -> Result<AcceptFigure, BenchError> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(key) = api_key {
        let value = reqwest::header::HeaderValue::from_str(&format!("Bearer {key}"))
            .map_err(|e| BenchError::Http(format!("the API key: {e}")))?;
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(clients * 2)
        .default_headers(headers)
        .build()
        .map_err(http)?;
    let base = base.trim_end_matches('/');
    let mut sessions = Vec::new();
    for n in 0..clients {
        let response = client
            .post(format!("{base}/v1/sessions"))
            .json(&json!({"title": format!("bench {n}")}))
            .send()
            .await
            .map_err(http)?;
        let status = response.status();
        let body: serde_json::Value = response.json().await.map_err(http)?;
        match body["id"].as_str() {
            Some(id) if status.is_success() => sessions.push(id.to_string()),
            _ => {
                return Err(BenchError::Http(format!(
                    "creating a session: {status} {body}"
                )));
            }
        }
    }
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for session in sessions {
        let client = client.clone();
        let url = format!("{base}/v1/sessions/{session}/messages");
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut errors = 0u64;
            while Instant::now() < deadline {
                let sent = Instant::now();
                match client
                    .post(&url)
                    .json(&json!({"content": "hello"}))
                    .send()
                    .await
                {
                    Ok(response) if response.status().as_u16() == 202 => {
                        let _ = response.bytes().await;
                        latencies.push(sent.elapsed());
                    }
                    _ => errors += 1,
                }
            }
            (latencies, errors)
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = 0;
    for task in tasks {
        let (mut l, e) = task.await.map_err(http)?;
        latencies.append(&mut l);
        errors += e;
    }
    let seconds = start.elapsed().as_secs_f64();
    let accepted = latencies.len() as u64;
    let (p50_ms, p99_ms) = percentiles(&mut latencies);
    Ok(AcceptFigure {
        clients,
        accepted,
        errors,
        seconds,
        per_sec: accepted as f64 / seconds,
        p50_ms,
        p99_ms,
    })
}

type Arrivals = Arc<Mutex<Vec<(i64, Instant)>>>;

/// Opens an SSE connection and records when each event id arrives, until `count` arrived.
async fn subscribe(
    client: &reqwest::Client,
    url: String,
    count: usize,
    arrivals: Arrivals,
) -> Result<tokio::task::JoinHandle<()>, BenchError> {
    let response = client.get(url).send().await.map_err(http)?;
    if response.status().as_u16() != 200 {
        return Err(BenchError::Http(format!(
            "events answered {}",
            response.status()
        )));
    }
    Ok(tokio::spawn(async move {
        let mut events = response.bytes_stream().eventsource();
        let mut seen = Vec::with_capacity(count);
        while seen.len() < count {
            let Some(Ok(event)) = events.next().await else {
                break;
            };
            if let Ok(id) = event.id.trim().parse::<i64>() {
                seen.push((id, Instant::now()));
            }
        }
        arrivals.lock().await.extend(seen);
    }))
}

async fn step_latency<S: Store>(
    store: &S,
    tenant: &Tenant,
    base: &str,
    subscribers: usize,
    options: &HttpBenchOptions,
) -> Result<LatencyFigure, BenchError> {
    let session = store
        .create_session(
            tenant,
            NewSession {
                user_id: LOCAL_USER.into(),
                title: Some(format!("latency {subscribers}")),
                ..NewSession::default()
            },
        )
        .await?;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .map_err(http)?;
    let arrivals: Arrivals = Arc::default();
    let url = format!("{base}/v1/sessions/{}/events", session.id);
    let mut readers = Vec::new();
    for _ in 0..subscribers {
        readers.push(
            subscribe(
                &client,
                url.clone(),
                options.latency_events,
                arrivals.clone(),
            )
            .await?,
        );
    }
    let mut committed: HashMap<i64, Instant> = HashMap::new();
    for n in 0..options.latency_events {
        let ack = store
            .append_event(
                tenant,
                NewEvent {
                    session_id: session.id,
                    message_id: None,
                    execution_id: None,
                    event_type: EventType::StepCompleted,
                    content: format!("Completed step {}", n + 1),
                    metadata: json!({"step_number": n + 1}),
                },
            )
            .await?;
        let event = ack.await?;
        committed.insert(event.id, Instant::now());
        tokio::time::sleep(options.event_interval).await;
    }
    for reader in readers {
        let _ = tokio::time::timeout(Duration::from_secs(30), reader).await;
    }
    let arrivals = arrivals.lock().await;
    let mut samples: Vec<Duration> = arrivals
        .iter()
        .filter_map(|(id, at)| committed.get(id).map(|c| at.saturating_duration_since(*c)))
        .collect();
    let count = samples.len();
    let (p50_ms, p99_ms) = percentiles(&mut samples);
    Ok(LatencyFigure {
        subscribers,
        events: options.latency_events,
        samples: count,
        p50_ms,
        p99_ms,
    })
}

async fn idle_memory<S: Store>(
    store: &S,
    tenant: &Tenant,
    base: &str,
    subscribers: usize,
) -> Result<IdleFigure, BenchError> {
    let rss_before_mb = rss_mb();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .map_err(http)?;
    let mut responses = Vec::new();
    for n in 0..subscribers {
        let session = store
            .create_session(
                tenant,
                NewSession {
                    user_id: LOCAL_USER.into(),
                    title: Some(format!("idle {n}")),
                    ..NewSession::default()
                },
            )
            .await?;
        let response = client
            .get(format!("{base}/v1/sessions/{}/events", session.id))
            .send()
            .await
            .map_err(http)?;
        responses.push(response);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_with_subscribers_mb = rss_mb();
    drop(responses);
    Ok(IdleFigure {
        subscribers,
        rss_before_mb,
        rss_with_subscribers_mb,
    })
}

/// Resident memory of this process in MB (Linux; 0 elsewhere).
pub fn rss_mb() -> f64 {
    read_rss("/proc/self/status")
}

fn percentiles(samples: &mut [Duration]) -> (f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0);
    }
    samples.sort();
    let at = |q: f64| {
        let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[index.min(samples.len() - 1)].as_secs_f64() * 1000.0
    };
    (at(0.50), at(0.99))
}

/// Resident memory of a server running in another process (`pid`, at `base`) before and
/// with `subscribers` idle SSE subscribers, one session each: the server's own figure,
/// without the clients' memory.
pub async fn idle_server_rss(
    base: &str,
    pid: u32,
    subscribers: usize,
) -> Result<IdleFigure, BenchError> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .map_err(http)?;
    let mut sessions = Vec::with_capacity(subscribers);
    for n in 0..subscribers {
        let response = client
            .post(format!("{base}/v1/sessions"))
            .json(&json!({"title": format!("idle {n}")}))
            .send()
            .await
            .map_err(http)?;
        let body: serde_json::Value = response.json().await.map_err(http)?;
        sessions.push(body["id"].as_str().unwrap_or_default().to_string());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before_mb = process_rss_mb(pid);
    let mut responses = Vec::with_capacity(subscribers);
    for session in &sessions {
        responses.push(
            client
                .get(format!("{base}/v1/sessions/{session}/events"))
                .send()
                .await
                .map_err(http)?,
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_with_subscribers_mb = process_rss_mb(pid);
    drop(responses);
    Ok(IdleFigure {
        subscribers,
        rss_before_mb,
        rss_with_subscribers_mb,
    })
}

/// Resident memory of a process in MB (Linux; 0 elsewhere).
pub fn process_rss_mb(pid: u32) -> f64 {
    read_rss(&format!("/proc/{pid}/status"))
}

fn read_rss(path: &str) -> f64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}
