//! `stepwise bench idle --url URL --server-pid PID`: what an idle node costs, measured from
//! this separate process.
//!
//! - idle: over `--seconds` with no traffic, the claim queries the server's workers sent
//!   (`stepwise_claim_queries_total` on `/metrics`) and the CPU time its process used
//!   (`/proc/PID/stat`, user + system);
//! - wake-up: then, for each of `--starts` messages, the time from sending
//!   `POST /v1/sessions/{id}/messages` to the execution's `execution.started` event on the
//!   session's stream, `--pause-ms` after the previous run (the workers are asleep on
//!   their doorbell: this is how long a user waits for an idle node to start).
//!
//! Start a fresh server with the demo agent and short demo steps, so each run ends before
//! the next message: `STEPWISE_DEMO_STEP_MS=1 stepwise serve --rate-limit-per-sec 0`.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::json;

use super::remote::{client, create_session};
use super::{percentile_ms, round};
use stepwise_cli_support::sse::EventStream;

#[derive(Args, Debug, Clone)]
pub struct IdleArgs {
    /// The server's base URL, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    pub url: String,
    /// The server's process id (same machine), for its CPU time.
    #[arg(long)]
    pub server_pid: u32,
    /// How long the node is watched with no traffic.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Messages sent after the idle period, one at a time, for the wake-up figure.
    #[arg(long, default_value_t = 10)]
    pub starts: usize,
    /// The pause before each of those messages, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub pause_ms: u64,
    /// An API key (sent as `Authorization: Bearer`), when the server requires one.
    #[arg(long, env = "STEPWISE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

/// Linux reports process times in clock ticks of `USER_HZ`, 100 a second on every
/// architecture Linux exposes to user space.
const TICKS_PER_SECOND: f64 = 100.0;

pub async fn run(args: IdleArgs) -> anyhow::Result<()> {
    if args.seconds == 0 {
        bail!("--seconds must be at least 1");
    }
    let base = args.url.trim_end_matches('/').to_string();
    let client = client(args.api_key.as_deref())?;

    let claims_before = claim_queries(&client, &base).await?;
    let ticks_before = cpu_ticks(args.server_pid)?;
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    let claims = claim_queries(&client, &base).await? - claims_before;
    let cpu_seconds = (cpu_ticks(args.server_pid)? - ticks_before) as f64 / TICKS_PER_SECOND;
    let seconds = args.seconds as f64;

    let mut starts = Vec::with_capacity(args.starts);
    for _ in 0..args.starts {
        starts.push(start_latency(&client, &base, Duration::from_millis(args.pause_ms)).await?);
    }
    let ms = |p: f64| round(percentile_ms(&starts, p), 3);
    let report = json!({
        "benchmark": "idle",
        "url": base,
        "server_pid": args.server_pid,
        "client_process": std::process::id(),
        "idle": {
            "seconds": args.seconds,
            "claim_queries": claims,
            "claim_queries_per_s": round(claims / seconds, 3),
            "cpu_seconds": round(cpu_seconds, 3),
            "cpu_percent_of_a_core": round(cpu_seconds / seconds * 100.0, 3),
        },
        "start": {
            "executions": starts.len(),
            "pause_ms": args.pause_ms,
            "p50_ms": ms(50.0),
            "max_ms": ms(100.0),
        },
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

/// The server's `stepwise_claim_queries_total`.
async fn claim_queries(client: &reqwest::Client, base: &str) -> anyhow::Result<f64> {
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await?
        .error_for_status()
        .context("reading /metrics")?
        .text()
        .await?;
    text.lines()
        .find_map(|line| line.strip_prefix("stepwise_claim_queries_total "))
        .and_then(|value| value.trim().parse().ok())
        .context("no stepwise_claim_queries_total on /metrics")
}

/// User plus system CPU time of process `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat (is the server on this machine?)"))?;
    parse_cpu_ticks(&stat).with_context(|| format!("an unexpected /proc/{pid}/stat"))
}

/// Fields 14 and 15 of a `/proc/PID/stat` line (utime, stime). The command name (field 2)
/// may hold spaces and parentheses, so fields are counted from its closing parenthesis.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Waits `pause`, sends a message to a fresh session and times it to `execution.started`.
async fn start_latency(
    client: &reqwest::Client,
    base: &str,
    pause: Duration,
) -> anyhow::Result<Duration> {
    let session = create_session(client, base, "idle bench").await?;
    let response = client
        .get(format!("{base}/v1/sessions/{session}/events"))
        .send()
        .await?
        .error_for_status()
        .context("opening the session's event stream")?;
    let mut events = EventStream::new(response.bytes_stream(), base);
    tokio::time::sleep(pause).await;
    let sent = Instant::now();
    client
        .post(format!("{base}/v1/sessions/{session}/messages"))
        .json(&json!({"content": "hello"}))
        .send()
        .await?
        .error_for_status()
        .context("posting a message")?;
    let started = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(event) = events.next().await? {
            if event.event == "execution.started" {
                return Ok(sent.elapsed());
            }
        }
        bail!("the event stream ended before the execution started")
    })
    .await
    .context("no execution.started within 30 s")??;
    Ok(started)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_read_after_the_command_name() {
        // A command name with spaces and a parenthesis must not shift the fields.
        let stat = "4242 (stepwise (x) y) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 9 0 100 0 0";
        assert_eq!(parse_cpu_ticks(stat), Some(325));
        assert_eq!(parse_cpu_ticks("garbage"), None);
    }
}
