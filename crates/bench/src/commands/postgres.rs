//! `stepwise bench steps --database postgres://...`: the same workload through the
//! PostgreSQL store. W4 is the size of the store's tables (`pg_total_relation_size`, so
//! indexes and TOAST included) after W1, on the database as W1 left it. There is no raw
//! yardstick run here (it measures SQLite).

use std::time::Instant;

use anyhow::Context;
use serde_json::json;
use stepwise_store::Tenant;
use stepwise_store_postgres::PgStore;

use super::{
    Corpus, Progress, StepsArgs, ms, per_s, percentile_ms, restore_w1, round, run_w1, run_w2,
    run_w2c,
};
use stepwise_cli_support::db::DatabaseUrl;
use stepwise_store::prelude::*;

async fn open(url: &str) -> anyhow::Result<PgStore> {
    PgStore::connect(url)
        .await
        .context("cannot open the PostgreSQL database")
}

async fn close(store: PgStore) -> anyhow::Result<()> {
    store.close().await.context("flushing the PostgreSQL store")
}

pub(super) async fn run_steps(
    args: &StepsArgs,
    url: &str,
    corpus: &Corpus,
    progress: &Progress,
) -> anyhow::Result<()> {
    let shown = DatabaseUrl::Postgres(url.to_string()).to_string();
    // A tenant of its own, so a run against an existing database touches nothing else.
    let tenant = Tenant::new(format!("bench-{}", stepwise_core::new_id().simple()))?;
    progress.stage(&format!(
        "stepwise bench steps: {} steps from {} into {shown}",
        corpus.bodies.len(),
        corpus.path.display(),
    ));

    progress.stage(&format!(
        "W1: one session, {} durable appends",
        args.w1_steps
    ));
    let store = open(url).await?;
    let fresh = store.stats().await?.bytes == 0 || {
        // Empty tables still take a few pages: call it fresh when nothing but us wrote.
        store
            .list_api_keys()
            .await
            .map(|k| k.is_empty())
            .unwrap_or(false)
    };
    let before = store.stats().await?.bytes;
    let w1 = run_w1(&store, &tenant, corpus, args.w1_steps, progress).await?;
    store.flush().await?;
    let after = store.stats().await?.bytes;
    close(store).await?;

    let store = open(url).await?;
    progress.stage(&format!(
        "W2: {} sessions x {} steps, round-robin, each durable",
        args.sessions, args.steps_per_session
    ));
    let w2_total = run_w2(
        &store,
        &tenant,
        corpus,
        args.sessions,
        args.steps_per_session,
        progress,
    )
    .await?;
    progress.stage(&format!(
        "W2c: {} sessions writing concurrently",
        args.sessions
    ));
    let (w2c_total, w2c_latencies) = run_w2c(
        &store,
        &tenant,
        corpus,
        args.sessions,
        args.steps_per_session,
        progress,
    )
    .await?;
    super::messages::add(&store, &tenant, w1.session_id, corpus, args.w1_steps).await?;
    close(store).await?;

    progress.stage(&format!(
        "W3: restoring the {}-step W1 session, cold then {} warm",
        args.w1_steps, args.warm_loads
    ));
    let opened = Instant::now();
    let store = open(url).await?;
    let cold_open = opened.elapsed();
    let cold = restore_w1(&store, &tenant, w1.session_id, args.w1_steps).await?;
    let mut warm = Vec::with_capacity(args.warm_loads as usize);
    for _ in 0..args.warm_loads {
        warm.push(restore_w1(&store, &tenant, w1.session_id, args.w1_steps).await?);
    }
    let listings = super::messages::Listings::run(
        &store,
        &tenant,
        w1.session_id,
        args.w1_steps,
        args.warm_loads,
    )
    .await?;
    close(store).await?;

    let w1_steps = u64::from(args.w1_steps);
    let w2_steps = u64::from(args.sessions) * u64::from(args.steps_per_session);
    let n = w1.latencies.len();
    let window = |from: usize, to: usize| {
        let slice = w1
            .latencies
            .get(from.saturating_sub(1)..to.min(n))
            .unwrap_or(&[]);
        (percentile_ms(slice, 50.0), percentile_ms(slice, 99.0))
    };
    let windows = [
        (1, 10.min(n)),
        ((n / 2).saturating_sub(9).max(1), n / 2),
        (n.saturating_sub(9).max(1), n),
    ];
    let mut windows_json = serde_json::Map::new();
    let mut p99s = Vec::new();
    for (a, b) in windows {
        let (p50, p99) = window(a, b);
        p99s.push(p99);
        windows_json.insert(
            format!("{a}-{b}"),
            json!({ "p50_ms": round(p50, 4), "p99_ms": round(p99, 4) }),
        );
    }
    let first_p99 = p99s.first().copied().unwrap_or(0.0);
    let last_p99 = p99s.last().copied().unwrap_or(0.0);
    let p99_ratio = if first_p99 > 0.0 {
        last_p99 / first_p99
    } else {
        0.0
    };
    let w4_bytes = after.saturating_sub(before);
    let report = json!({
        "backend": "postgres",
        "version": env!("CARGO_PKG_VERSION"),
        "w1": {
            "n": w1_steps,
            "total_s": round(w1.total.as_secs_f64(), 4),
            "steps_per_s": round(per_s(w1_steps, w1.total), 1),
            "windows": windows_json,
            "p50_ms": round(percentile_ms(&w1.latencies, 50.0), 4),
            "p99_ms": round(percentile_ms(&w1.latencies, 99.0), 4),
        },
        "w2": {
            "sessions": args.sessions,
            "steps_per_session": args.steps_per_session,
            "total_s": round(w2_total.as_secs_f64(), 4),
            "steps_per_s": round(per_s(w2_steps, w2_total), 1),
        },
        "w2c": {
            "sessions": args.sessions,
            "steps_per_session": args.steps_per_session,
            "total_s": round(w2c_total.as_secs_f64(), 4),
            "steps_per_s": round(per_s(w2_steps, w2c_total), 1),
            "p50_ms": round(percentile_ms(&w2c_latencies, 50.0), 4),
            "p99_ms": round(percentile_ms(&w2c_latencies, 99.0), 4),
        },
        "w3": {
            "steps_loaded": w1_steps,
            "cold_ms": round(ms(cold), 4),
            "warm_ms_median": round(percentile_ms(&warm, 50.0), 4),
            "warm_loads": args.warm_loads,
            "cold_open_ms": round(ms(cold_open), 4),
        },
        "w3m": listings.json(),
        "w4": {
            "bytes": w4_bytes,
            "bytes_per_step": round(w4_bytes as f64 / w1_steps as f64, 1),
            "table_bytes_before_w1": before,
            "table_bytes_after_w1": after,
            "fresh_database": fresh,
        },
        "w1_p99_ratio": round(p99_ratio, 3),
        "corpus": {
            "path": corpus.path.display().to_string(),
            "steps": corpus.bodies.len(),
        },
    });
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}
