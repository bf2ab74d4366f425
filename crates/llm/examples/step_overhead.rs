//! The `tool-calling` agent's overhead per step, the model's own time excluded: a fake
//! model answers instantly (a calculator call per turn, then the answer), and each step
//! is timed from the moment the model's answer is in the agent's hands to the moment a
//! live subscriber receives the step's `step.completed` event (published once the step's
//! batch is committed to SQLite, so the step is durable by then).
//!
//! ```sh
//! cargo run --release -p stepwise-llm --example step_overhead [-- SESSIONS STEPS]
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stepwise_core::{EventType, ExecutionStatus};
use stepwise_engine::{
    AgentChoice, AgentRegistry, BoxFuture, Engine, EngineConfig, MessageInput, ToolSet,
};
use stepwise_llm::agent::{TOOL_CALLING_AGENT, ToolCallingAgent};
use stepwise_llm::client::{AssembledCall, ChatModel, ChatOutcome, EventSink, LlmError};
use stepwise_llm::config::AgentSettings;
use stepwise_llm::wire::{ChatRequest, Usage};
use stepwise_store::prelude::*;
use stepwise_store::{NewSession, Tenant};
use stepwise_store_sqlite::SqliteStore;
use tokio_util::sync::CancellationToken;

/// Answer times by (execution, step number).
type Answered = Arc<Mutex<HashMap<(String, u32), Instant>>>;

struct InstantModel {
    steps: u32,
    answered: Answered,
}

impl ChatModel for InstantModel {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
        _cancel: &'a CancellationToken,
        _on_event: EventSink<'a>,
    ) -> BoxFuture<'a, Result<ChatOutcome, LlmError>> {
        Box::pin(async move {
            let turn = request.messages.iter().filter(|m| m.role == "tool").count() as u32 + 1;
            // The task message says which execution this is.
            let task = request
                .messages
                .iter()
                .rfind(|m| m.role == "user")
                .and_then(|m| m.content.clone())
                .unwrap_or_default();
            let outcome = ChatOutcome {
                content: if turn < self.steps {
                    String::new()
                } else {
                    "done".into()
                },
                tool_calls: if turn < self.steps {
                    vec![AssembledCall {
                        id: Some(format!("call_{turn}")),
                        name: "calculator".into(),
                        arguments: json!({"expression": format!("{turn}*2")}).to_string(),
                    }]
                } else {
                    Vec::new()
                },
                usage: Some(Usage {
                    prompt_tokens: Some(100),
                    completion_tokens: Some(10),
                    total_tokens: Some(110),
                }),
                attempts: 1,
                ..ChatOutcome::default()
            };
            let key = task
                .split_whitespace()
                .last()
                .unwrap_or_default()
                .to_string();
            self.answered
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert((key, turn), Instant::now());
            Ok(outcome)
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<u32> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sessions = args.first().copied().unwrap_or(10);
    let steps = args.get(1).copied().unwrap_or(100);

    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open(&dir.path().join("overhead.db"))?;
    let answered: Answered = Arc::default();
    let agent = ToolCallingAgent::new(
        Arc::new(InstantModel {
            steps,
            answered: answered.clone(),
        }),
        AgentSettings {
            model: "instant".into(),
            max_steps: steps + 1,
            ..AgentSettings::default()
        },
    );
    let mut agents = AgentRegistry::new();
    agents.register(TOOL_CALLING_AGENT, agent);
    let engine = Engine::with_tools(
        store.clone(),
        agents,
        ToolSet::builtin(),
        EngineConfig {
            workers: 1,
            default_agent: TOOL_CALLING_AGENT.into(),
            ..EngineConfig::default()
        },
    );
    engine.spawn_runners();
    let tenant = Tenant::new("bench")?;

    let mut overheads: Vec<Duration> = Vec::new();
    for n in 0..sessions {
        let session = store
            .create_session(
                &tenant,
                NewSession {
                    user_id: "u".into(),
                    metadata: Value::Null,
                    ..NewSession::default()
                },
            )
            .await?;
        let mut events = store.subscribe(&tenant, session.id);
        let key = format!("s{n}");
        let execution = engine
            .submit_message(
                &tenant,
                "u",
                session.id,
                MessageInput {
                    content: format!("run {key}"),
                    agent: Some(AgentChoice {
                        agent_type: TOOL_CALLING_AGENT.into(),
                        config: json!({}),
                    }),
                    ..MessageInput::default()
                },
            )
            .await?
            .execution;
        let mut received: HashMap<u32, Instant> = HashMap::new();
        loop {
            match events.recv().await {
                Ok(event) => {
                    let now = Instant::now();
                    if event.event_type == EventType::StepCompleted
                        && let Some(step) = event.metadata["step_number"].as_u64()
                    {
                        received.insert(step as u32, now);
                    }
                    if event.event_type == EventType::ExecutionCompleted
                        || event.event_type == EventType::ExecutionFailed
                    {
                        break;
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    eprintln!("subscriber lagged by {n} events");
                }
                Err(e) => return Err(e.into()),
            }
        }
        let done = store.get_execution(&tenant, execution.id).await?;
        if done.as_ref().map(|e| e.status) != Some(ExecutionStatus::Completed) {
            return Err(format!("execution {} did not complete: {done:?}", execution.id).into());
        }
        let answered = answered.lock().unwrap_or_else(|e| e.into_inner());
        for (step, at) in &received {
            if let Some(start) = answered.get(&(key.clone(), *step)) {
                overheads.push(at.saturating_duration_since(*start));
            }
        }
    }

    overheads.sort();
    let pick = |q: f64| {
        let index = ((overheads.len() as f64 - 1.0) * q).round() as usize;
        overheads[index].as_secs_f64() * 1e6
    };
    println!(
        "{{\"samples\": {}, \"p50_us\": {:.0}, \"p90_us\": {:.0}, \"p99_us\": {:.0}, \"max_us\": {:.0}, \"goal_p99_us\": 2000}}",
        overheads.len(),
        pick(0.5),
        pick(0.9),
        pick(0.99),
        pick(1.0)
    );
    engine.shutdown(Duration::from_secs(2)).await;
    store.flush().await?;
    Ok(())
}
