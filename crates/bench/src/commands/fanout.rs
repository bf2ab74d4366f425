//! `stepwise bench fanout --url URL`: live fan-out of a running server, measured from this
//! separate process (client and server share neither a runtime nor an allocator).
//!
//! - step -> viewer latency: `--viewers` SSE connections watch one session; the bench then
//!   writes `--steps` items adds to it (`POST /v1/sessions/{id}/items`, each one step whose
//!   `step.completed` event reaches every viewer) one at a time, `--interval-ms` apart, and
//!   times each viewer's receipt of each step's event from the moment its POST was sent
//!   (the commit, the fan-out and the HTTP write are all inside); p50, p99 and max over
//!   every (step, viewer) pair;
//! - idle memory: with `--server-pid`, the server's resident memory before and with
//!   `--idle-viewers` idle SSE connections (one session each), read from `/proc`.
//!
//! Start the server with `--rate-limit-per-sec 0` and no SSE limits (the defaults), e.g.
//! `stepwise serve --workers 0 --rate-limit-per-sec 0`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::json;
use tokio::sync::Mutex;

use super::remote::{client, create_session, viewer_client};
use stepwise_cli_support::sse::EventStream;

#[derive(Args, Debug, Clone)]
pub struct FanoutArgs {
    /// The server's base URL, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    pub url: String,
    /// SSE connections watching the one session the steps are written to.
    #[arg(long, default_value_t = 1000)]
    pub viewers: usize,
    /// Steps written (one items add each) while the viewers watch.
    #[arg(long, default_value_t = 200)]
    pub steps: usize,
    /// Pause between two steps, in milliseconds.
    #[arg(long, default_value_t = 10)]
    pub interval_ms: u64,
    /// The server's process id (same machine): also measure its resident memory with
    /// `--idle-viewers` idle SSE connections.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Idle SSE connections (one session each) for the memory figure.
    #[arg(long, default_value_t = 1000)]
    pub idle_viewers: usize,
    /// An API key (sent as `Authorization: Bearer`), when the server requires one.
    #[arg(long, env = "STEPWISE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

pub async fn run(args: FanoutArgs) -> anyhow::Result<()> {
    if args.viewers == 0 || args.steps == 0 {
        bail!("--viewers and --steps must be at least 1");
    }
    let base = args.url.trim_end_matches('/').to_string();
    let client = client(args.api_key.as_deref())?;
    let latency = step_latency(&client, &base, &args).await?;
    let mut report = json!({
        "benchmark": "fanout",
        "url": base,
        "client_process": std::process::id(),
        "latency": latency,
    });
    if let Some(pid) = args.server_pid {
        let idle = crate::http_figures::idle_server_rss(&base, pid, args.idle_viewers)
            .await
            .context("measuring idle memory")?;
        let per_viewer_kb = (idle.rss_with_subscribers_mb - idle.rss_before_mb) * 1024.0
            / idle.subscribers.max(1) as f64;
        report["idle"] = json!({
            "viewers": idle.subscribers,
            "server_pid": pid,
            "rss_before_mb": round(idle.rss_before_mb),
            "rss_with_viewers_mb": round(idle.rss_with_subscribers_mb),
            "per_viewer_kb": round(per_viewer_kb),
        });
    }
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// When each viewer read each event id.
type Arrivals = Arc<Mutex<Vec<(i64, Instant)>>>;

async fn step_latency(
    client: &reqwest::Client,
    base: &str,
    args: &FanoutArgs,
) -> anyhow::Result<serde_json::Value> {
    let session = create_session(client, base, "fanout bench").await?;
    let events_url = format!("{base}/v1/sessions/{session}/events");
    let arrivals: Arrivals = Arc::default();
    let mut readers = Vec::with_capacity(args.viewers);
    for _ in 0..args.viewers {
        let viewer = viewer_client(args.api_key.as_deref())?;
        let response = viewer.get(&events_url).send().await?;
        if response.status().as_u16() != 200 {
            bail!("the event stream answered {}", response.status());
        }
        readers.push(tokio::spawn(read_events(
            response,
            args.steps,
            arrivals.clone(),
        )));
    }
    let items_url = format!("{base}/v1/sessions/{session}/items");
    let mut sent: HashMap<u64, Instant> = HashMap::new();
    for n in 0..args.steps {
        // A tool result item: the step mirrors no message, so its only event is
        // `step.completed`.
        let body = json!({"items": [{"type": "function_call_output", "call_id": format!("c{n}"), "output": "ok"}]});
        let at = Instant::now();
        let response = client.post(&items_url).json(&body).send().await?;
        if !response.status().is_success() {
            bail!("an items add answered {}", response.status());
        }
        let added: serde_json::Value = response.json().await?;
        let version = added["version"].as_u64().context("the add's version")?;
        sent.insert(version, at);
        tokio::time::sleep(Duration::from_millis(args.interval_ms)).await;
    }
    for reader in readers {
        let _ = tokio::time::timeout(Duration::from_secs(30), reader).await;
    }
    let arrivals = arrivals.lock().await;
    // The session's events are the adds' `step.completed` events, in order: event id n
    // is step n (the conversation's first write also announces the conversation).
    let mut by_step: Vec<(i64, Instant)> = arrivals.clone();
    by_step.sort_by_key(|(id, _)| *id);
    let first_id = by_step.first().map_or(1, |(id, _)| *id);
    let mut samples: Vec<Duration> = arrivals
        .iter()
        .filter_map(|(id, at)| {
            let step = u64::try_from(id - first_id + 1).ok()?;
            sent.get(&step).map(|s| at.saturating_duration_since(*s))
        })
        .collect();
    samples.sort();
    let ms = |q: f64| -> f64 {
        if samples.is_empty() {
            return 0.0;
        }
        let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
        round(samples[index.min(samples.len() - 1)].as_secs_f64() * 1000.0)
    };
    Ok(json!({
        "viewers": args.viewers,
        "steps": args.steps,
        "samples": samples.len(),
        "expected_samples": args.viewers * args.steps,
        "p50_ms": ms(0.50),
        "p99_ms": ms(0.99),
        "max_ms": ms(1.0),
    }))
}

/// Reads one event stream and notes when each `step.completed` event id arrived, until
/// `count` of them did (or the stream ends).
async fn read_events(response: reqwest::Response, count: usize, arrivals: Arrivals) {
    let base = response.url().origin().ascii_serialization();
    let mut events = EventStream::new(response.bytes_stream(), &base);
    let mut seen = Vec::with_capacity(count);
    while seen.len() < count {
        let Ok(Some(event)) = events.next().await else {
            break;
        };
        let now = Instant::now();
        if event.event != "step.completed" {
            continue;
        }
        if let Ok(id) = event.id.trim().parse::<i64>() {
            seen.push((id, now));
        }
    }
    arrivals.lock().await.extend(seen);
}
