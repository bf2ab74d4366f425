//! Times the pieces of a 1,000-step restore: the query, the decode, the whole call.
//! `cargo run --release -p stepwise-store-sqlite --example restore_profile`

use std::time::Instant;

use serde_json::json;
use stepwise_core::{ExecutionStatus, StepBody, StepKind, TokenUsage, ToolCall};
use stepwise_store::prelude::*;
use stepwise_store::{NewExecution, NewSession, NewStep, Tenant};
use stepwise_store_sqlite::SqliteStore;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("stepwise-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let store = SqliteStore::open(&dir.join("p.db"))?;
    let tenant = Tenant::new("t")?;
    let session = store
        .create_session(
            &tenant,
            NewSession {
                user_id: "u".into(),
                ..Default::default()
            },
        )
        .await?;
    let exec = store
        .create_execution(
            &tenant,
            NewExecution {
                session_id: Some(session.id),
                parent_execution_id: None,
                user_id: "u".into(),
                agent_type: "x".into(),
                agent_config: json!(null),
                input: json!(null),
                metadata: json!(null),
                status: ExecutionStatus::Running,
                lease: None,
            },
        )
        .await?;
    let words = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor ";
    let t = Instant::now();
    for i in 1..=1000u32 {
        let body = StepBody {
            model_output: Some(words.repeat(4)),
            tool_calls: vec![ToolCall {
                id: format!("c{i}"),
                name: "search".into(),
                arguments: json!({"query": words.repeat(4)}),
            }],
            observations: Some(words.repeat(18)),
            token_usage: TokenUsage::new(700, 200),
            ..StepBody::default()
        };
        store
            .append_step(
                &tenant,
                NewStep {
                    execution_id: exec.id,
                    step_number: i,
                    kind: StepKind::Action,
                    body,
                },
            )
            .await?
            .await?;
    }
    println!("append 1000 durable: {:?}", t.elapsed());
    for _ in 0..3 {
        let t = Instant::now();
        let steps = store.list_steps(&tenant, exec.id).await?;
        let a = t.elapsed();
        let t = Instant::now();
        let s2 = store.list_session_steps(&tenant, session.id).await?;
        let b = t.elapsed();
        let t = Instant::now();
        let m = stepwise_store::restore_memory(&store, &tenant, session.id).await?;
        println!(
            "list_steps {a:?} ({}), list_session_steps {b:?} ({}), restore {:?} ({:?})",
            steps.items.len(),
            s2.items.len(),
            t.elapsed(),
            m.map(|m| m.steps.len())
        );
    }
    let payload = stepwise_core::codec::encode_step(
        &store.list_steps(&tenant, exec.id).await?.items[0].body(),
        1024,
    );
    let t = Instant::now();
    for _ in 0..1000 {
        let _ = stepwise_core::codec::decode_step(&payload)?;
    }
    println!(
        "decode x1000 of a {}-byte payload: {:?}",
        payload.len(),
        t.elapsed()
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
