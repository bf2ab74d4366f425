//! Rough figures for the files backend on this machine:
//! `cargo run --release -p stepwise-store-files --example burst [STEPS]`.
//! Prints JSON: fire-and-forget steps into one session then flush, awaited appends one at
//! a time, and reopening the folder.

use std::time::Instant;

use serde_json::json;
use stepwise_core::{ExecutionStatus, StepBody, StepKind};
use stepwise_store::prelude::*;
use stepwise_store::{NewExecution, NewSession, NewStep, Tenant};
use stepwise_store_files::FileStore;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let steps: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let dir = tempfile::tempdir()?;
    let tenant = Tenant::new("local")?;
    let store = FileStore::open(dir.path())?;
    let session = store
        .create_session(
            &tenant,
            NewSession {
                user_id: "u".into(),
                name: Some("bench".into()),
                ..NewSession::default()
            },
        )
        .await?;
    let execution = store
        .create_execution(
            &tenant,
            NewExecution {
                session_id: Some(session.id),
                parent_execution_id: None,
                user_id: "u".into(),
                agent_type: "demo".into(),
                agent_config: json!(null),
                input: json!("go"),
                metadata: json!({}),
                status: ExecutionStatus::Running,
                lease: None,
            },
        )
        .await?;
    let body = |n: u32| StepBody {
        model_output: Some(format!("thinking about step {n} ").repeat(10)),
        observations: Some(format!("{n}")),
        ..StepBody::default()
    };
    let started = Instant::now();
    for n in 1..=steps {
        let step = NewStep {
            execution_id: execution.id,
            step_number: n,
            kind: StepKind::Action,
            body: body(n),
        };
        drop(store.append_step(&tenant, step).await?);
    }
    let queued = started.elapsed();
    store.flush().await?;
    let fire_and_forget = started.elapsed();

    let awaited = 100;
    let started = Instant::now();
    for n in steps + 1..=steps + awaited {
        let step = NewStep {
            execution_id: execution.id,
            step_number: n,
            kind: StepKind::Action,
            body: body(n),
        };
        store.append_step(&tenant, step).await?.await?;
    }
    let awaited_each = started.elapsed() / awaited;
    let bytes = store.stats().await?.bytes;
    store.close().await?;

    let started = Instant::now();
    let reopened = FileStore::open(dir.path())?;
    let reopen = started.elapsed();
    let listed = reopened
        .list_steps(&tenant, execution.id)
        .await?
        .items
        .len();
    println!(
        "{}",
        json!({
            "steps": steps,
            "queue_all_ms": queued.as_secs_f64() * 1e3,
            "fire_and_forget_then_flush_ms": fire_and_forget.as_secs_f64() * 1e3,
            "fire_and_forget_steps_per_s": f64::from(steps) / fire_and_forget.as_secs_f64(),
            "awaited_append_ms_each_at_end": awaited_each.as_secs_f64() * 1e3,
            "session_file_bytes": bytes,
            "reopen_ms": reopen.as_secs_f64() * 1e3,
            "steps_after_reopen": listed,
        })
    );
    Ok(())
}
