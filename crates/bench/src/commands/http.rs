//! `stepwise bench http --url URL`: a load generator in a process of its own (client and
//! server do not share a runtime or cores' scheduler), measuring messages accepted per
//! second by a running server: N clients, one session each, posting messages back to back.
//! Start the server with `--rate-limit-per-sec 0` (the per-key limit would refuse most).
//! `serve` always runs at least one worker, and the demo agent answers these messages at once,
//! so the workers run what was accepted as it comes; a node holds intake to a few messages at
//! a time while its runs work, so `serve --intake-concurrency 64` measures intake alone (the
//! API and the store's write path) and the default measures it beside busy workers.

use std::time::Duration;

use clap::Args;
use serde_json::json;

#[derive(Args, Debug, Clone)]
pub struct HttpArgs {
    /// The server's base URL, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    pub url: String,
    /// Concurrent clients, one session each.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// How long the clients post.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// An API key or an end-user token (JWT), sent as `Authorization: Bearer`, when the
    /// server requires one (`--token` is the same flag).
    #[arg(
        long,
        alias = "token",
        env = "STEPWISE_API_KEY",
        hide_env_values = true
    )]
    pub api_key: Option<String>,
}

pub async fn run(args: HttpArgs) -> anyhow::Result<()> {
    if args.clients == 0 || args.seconds == 0 {
        anyhow::bail!("--clients and --seconds must be at least 1");
    }
    let figure = crate::http_figures::accept_messages(
        &args.url,
        args.clients,
        Duration::from_secs(args.seconds),
        args.api_key.as_deref(),
    )
    .await?;
    let report = json!({
        "benchmark": "http",
        "url": args.url,
        "client_process": std::process::id(),
        "messages": {
            "clients": figure.clients,
            "accepted": figure.accepted,
            "errors": figure.errors,
            "seconds": (figure.seconds * 1000.0).round() / 1000.0,
            "per_sec": figure.per_sec.round(),
            "p50_ms": figure.p50_ms,
            "p99_ms": figure.p99_ms,
        },
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
