//! The `tool-calling` agent driven by the real engine on a SQLite file, talking to a fake
//! OpenAI-compatible server over loopback HTTP.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use stepwise_core::{EventType, Execution, ExecutionStatus, Id, Step, StepKind};
use stepwise_engine::{AgentChoice, AgentRegistry, Engine, EngineConfig, MessageInput, ToolSet};
use stepwise_llm::agent::{StoreHistory, TOOL_CALLING_AGENT, ToolCallingAgent};
use stepwise_llm::client::{ChatClient, ClientSettings};
use stepwise_llm::config::AgentSettings;
use stepwise_store::prelude::*;
use stepwise_store::{NewSession, Tenant};
use stepwise_store_sqlite::SqliteStore;

const WAIT: Duration = Duration::from_secs(20);

fn tenant() -> Tenant {
    Tenant::new("t1").unwrap()
}

fn client_settings(base_url: &str) -> ClientSettings {
    ClientSettings {
        base_url: base_url.to_string(),
        backoff_initial: Duration::from_millis(1),
        backoff_max: Duration::from_millis(5),
        ..ClientSettings::default()
    }
}

fn start_engine(db: &Path, base_url: &str, tools: ToolSet, lease: Duration) -> Engine<SqliteStore> {
    start_engine_with(db, base_url, tools, lease, Duration::from_secs(300))
}

fn start_engine_with(
    db: &Path,
    base_url: &str,
    tools: ToolSet,
    lease: Duration,
    tool_timeout: Duration,
) -> Engine<SqliteStore> {
    let store = SqliteStore::open(db).unwrap();
    let client = ChatClient::new(client_settings(base_url)).unwrap();
    let agent = ToolCallingAgent::new(
        Arc::new(client),
        AgentSettings {
            model: "fake-model".into(),
            ..AgentSettings::default()
        },
    )
    .with_history(Arc::new(StoreHistory(store.clone())));
    let mut agents = AgentRegistry::new();
    agents.register(TOOL_CALLING_AGENT, agent);
    let engine = Engine::with_tools(
        store,
        agents,
        tools,
        EngineConfig {
            workers: 2,
            lease,
            poll_interval: Duration::from_millis(50),
            default_agent: TOOL_CALLING_AGENT.into(),
            tool_timeout,
            ..EngineConfig::default()
        },
    );
    engine.spawn_runners();
    engine
}

async fn new_session(engine: &Engine<SqliteStore>) -> Id {
    engine
        .store()
        .create_session(
            &tenant(),
            NewSession {
                user_id: "u1".into(),
                metadata: Value::Null,
                ..NewSession::default()
            },
        )
        .await
        .unwrap()
        .id
}

async fn send(engine: &Engine<SqliteStore>, session: Id, text: &str, config: Value) -> Id {
    let input = MessageInput {
        content: text.into(),
        agent: (!config.is_null()).then(|| AgentChoice {
            agent_type: TOOL_CALLING_AGENT.into(),
            config,
        }),
        ..MessageInput::default()
    };
    engine
        .submit_message(&tenant(), "u1", session, input)
        .await
        .unwrap()
        .execution
        .id
}

async fn wait_for(engine: &Engine<SqliteStore>, id: Id, status: ExecutionStatus) -> Execution {
    let store = engine.store().clone();
    let mut last = None;
    wait_until(&format!("the execution to be {status}"), WAIT, async || {
        last = store.get_execution(&tenant(), id).await.unwrap();
        last.as_ref().is_some_and(|e| e.status == status)
    })
    .await;
    last.unwrap()
}

async fn steps(engine: &Engine<SqliteStore>, id: Id) -> Vec<Step> {
    engine
        .store()
        .list_steps(&tenant(), id)
        .await
        .unwrap()
        .items
}

fn has_tools(request: &Value) -> bool {
    request["tools"].as_array().is_some_and(|t| !t.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_tool_calls_run_and_their_results_go_back_by_call_id() {
    let model = FakeModel::start(|request, _| {
        if tool_results(request).is_empty() {
            stream_tool_calls(&[
                (
                    "call_a",
                    "calculator",
                    json!({"expression": "6*7"}).to_string(),
                ),
                ("call_b", "clock", "{}".into()),
            ])
        } else {
            stream_answer("The answer is 42.")
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let engine = start_engine(
        &dir.path().join("s.db"),
        &model.base_url,
        ToolSet::builtin(),
        Duration::from_secs(15),
    );
    let session = new_session(&engine).await;
    let mut events = engine.store().subscribe(&tenant(), session);
    let id = send(
        &engine,
        session,
        "What is 6*7, and what time is it?",
        Value::Null,
    )
    .await;
    let done = wait_for(&engine, id, ExecutionStatus::Completed).await;
    assert_eq!(done.output, json!("The answer is 42."));

    let saved = steps(&engine, id).await;
    assert_eq!(saved.len(), 2);
    assert_eq!(saved[0].kind, StepKind::Action);
    let names: Vec<&str> = saved[0]
        .tool_calls
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["calculator", "clock"]);
    assert_eq!(
        saved[0].tool_calls[0].arguments,
        json!({"expression": "6*7"})
    );
    assert_eq!(saved[1].kind, StepKind::FinalAnswer);
    assert_eq!(
        saved[1].token_usage.input, 10,
        "the server's usage is recorded"
    );

    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let tool_names: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    for name in ["calculator", "clock", "user_input", "subagent"] {
        assert!(tool_names.contains(&name), "{name} listed");
    }
    assert_eq!(
        requests[0]["tools"][0]["function"]["parameters"]["type"],
        "object"
    );
    let results = tool_results(&requests[1]);
    assert_eq!(results[0], ("call_a".to_string(), "42".to_string()));
    assert_eq!(results[1].0, "call_b");
    assert!(results[1].1.contains('T'), "a timestamp: {}", results[1].1);

    // The answer streamed as message.delta events while the step ran.
    let mut deltas = String::new();
    while let Ok(event) = events.try_recv() {
        if event.event_type == EventType::MessageDelta {
            deltas.push_str(&event.content);
        }
    }
    assert_eq!(deltas, "The answer is 42.");
}

/// A tool whose calls each wait until `parties` calls are inside it at the same time: the
/// calls of one step only get through when the engine runs them concurrently (run one
/// after another, the first would wait for the others forever, so it gives up after a
/// while and says so).
struct Rendezvous {
    barrier: Arc<tokio::sync::Barrier>,
}

impl stepwise_engine::tools::Tool for Rendezvous {
    fn spec(&self) -> stepwise_engine::tools::ToolSpec {
        stepwise_engine::tools::ToolSpec {
            name: "rendezvous".into(),
            description: "Meets the other calls of its step.".into(),
            parameters: json!({"type": "object", "properties": {"who": {"type": "string"}}}),
        }
    }

    fn call<'a>(
        &'a self,
        arguments: &'a Value,
    ) -> stepwise_engine::BoxFuture<'a, Result<String, stepwise_engine::tools::ToolError>> {
        Box::pin(async move {
            let who = arguments["who"].as_str().unwrap_or("?").to_string();
            match tokio::time::timeout(WAIT, self.barrier.wait()).await {
                Ok(_) => Ok(format!("{who} met the others")),
                Err(_) => Err(stepwise_engine::tools::ToolError::new(format!(
                    "{who} waited alone: the calls did not run at the same time"
                ))),
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steps_tool_calls_run_concurrently_and_each_keeps_its_own_result() {
    let model = FakeModel::start(|request, _| {
        if tool_results(request).is_empty() {
            stream_tool_calls(&[
                ("r1", "rendezvous", json!({"who": "first"}).to_string()),
                (
                    "bad",
                    "calculator",
                    json!({"expression": "1/0"}).to_string(),
                ),
                ("r2", "rendezvous", json!({"who": "second"}).to_string()),
                ("r3", "rendezvous", json!({"who": "third"}).to_string()),
            ])
        } else {
            stream_answer("All met.")
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut tools = ToolSet::builtin();
    tools.register(Rendezvous {
        barrier: Arc::new(tokio::sync::Barrier::new(3)),
    });
    let engine = start_engine(
        &dir.path().join("s.db"),
        &model.base_url,
        tools,
        Duration::from_secs(15),
    );
    let session = new_session(&engine).await;
    let mut events = engine.store().subscribe(&tenant(), session);
    let id = send(&engine, session, "meet", Value::Null).await;
    wait_for(&engine, id, ExecutionStatus::Completed).await;

    let saved = steps(&engine, id).await;
    assert_eq!(saved[0].kind, StepKind::Action);
    assert_eq!(
        saved[0].error.as_ref().unwrap().kind,
        "tool_error",
        "the failed call is the step's error"
    );
    assert_eq!(
        saved[0].observations.as_deref(),
        Some("first met the others\nsecond met the others\nthird met the others"),
        "the calls after the failed one ran too, at the same time"
    );
    let recorded = saved[0].output["tool_results"].as_array().unwrap();
    let ids: Vec<&str> = recorded.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["r1", "bad", "r2", "r3"]);
    assert!(recorded[1]["observation"].is_null());
    assert!(recorded[1]["error"]["message"].is_string());

    // Each result goes back to the model with its own call.
    let results = tool_results(&model.requests()[1]);
    assert_eq!(results[0], ("r1".into(), "first met the others".into()));
    assert_eq!(results[1].0, "bad");
    assert!(results[1].1.starts_with("Error: "), "{results:?}");
    assert_eq!(results[2], ("r2".into(), "second met the others".into()));
    assert_eq!(results[3], ("r3".into(), "third met the others".into()));

    // Events: every tool.called first, then every tool.completed, both in call order.
    let mut tool_events = Vec::new();
    while let Ok(event) = events.try_recv() {
        if matches!(
            event.event_type,
            EventType::ToolCalled | EventType::ToolCompleted
        ) {
            let tool = event.metadata["tool"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            tool_events.push(format!("{} {tool}", event.event_type.as_str()));
        }
    }
    assert_eq!(
        tool_events,
        [
            "tool.called rendezvous",
            "tool.called calculator",
            "tool.called rendezvous",
            "tool.called rendezvous",
            "tool.completed rendezvous",
            "tool.completed calculator",
            "tool.completed rendezvous",
            "tool.completed rendezvous",
        ]
    );
}

/// A tool that never answers.
struct Stuck;

impl stepwise_engine::tools::Tool for Stuck {
    fn spec(&self) -> stepwise_engine::tools::ToolSpec {
        stepwise_engine::tools::ToolSpec {
            name: "stuck".into(),
            description: "Never returns.".into(),
            parameters: json!({"type": "object"}),
        }
    }

    fn call<'a>(
        &'a self,
        _arguments: &'a Value,
    ) -> stepwise_engine::BoxFuture<'a, Result<String, stepwise_engine::tools::ToolError>> {
        Box::pin(std::future::pending())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_times_out_is_an_error_observation_and_the_agent_goes_on() {
    let model = FakeModel::start(|request, _| {
        if tool_results(request).is_empty() {
            stream_tool_calls(&[
                ("s1", "stuck", "{}".into()),
                ("c1", "calculator", json!({"expression": "2+3"}).to_string()),
            ])
        } else {
            stream_answer("The stuck tool timed out; 2+3 is 5.")
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut tools = ToolSet::builtin();
    tools.register(Stuck);
    let engine = start_engine_with(
        &dir.path().join("s.db"),
        &model.base_url,
        tools,
        Duration::from_secs(15),
        Duration::from_millis(200),
    );
    let session = new_session(&engine).await;
    let id = send(&engine, session, "try the stuck tool", Value::Null).await;
    let done = wait_for(&engine, id, ExecutionStatus::Completed).await;
    assert_eq!(done.output, json!("The stuck tool timed out; 2+3 is 5."));
    let saved = steps(&engine, id).await;
    let error = saved[0].error.as_ref().unwrap();
    assert!(error.message.contains("timed out"), "{error:?}");
    let results = tool_results(&model.requests()[1]);
    assert!(
        results[0].1.starts_with("Error: ") && results[0].1.contains("timed out"),
        "{results:?}"
    );
    assert_eq!(results[1], ("c1".into(), "5".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_beyond_the_per_step_limit_get_an_error_and_the_rest_run() {
    let limit = stepwise_engine::MAX_TOOL_CALLS_PER_STEP;
    let model = FakeModel::start(move |request, _| {
        if tool_results(request).is_empty() {
            let calls: Vec<(String, String)> = (1..=limit + 2)
                .map(|k| {
                    (
                        format!("c{k}"),
                        json!({"expression": format!("{k}*1")}).to_string(),
                    )
                })
                .collect();
            let calls: Vec<(&str, &str, String)> = calls
                .iter()
                .map(|(id, args)| (id.as_str(), "calculator", args.clone()))
                .collect();
            stream_tool_calls(&calls)
        } else {
            stream_answer("Enough.")
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let engine = start_engine(
        &dir.path().join("s.db"),
        &model.base_url,
        ToolSet::builtin(),
        Duration::from_secs(15),
    );
    let session = new_session(&engine).await;
    let id = send(&engine, session, "count a lot", Value::Null).await;
    wait_for(&engine, id, ExecutionStatus::Completed).await;
    let results = tool_results(&model.requests()[1]);
    assert_eq!(results.len(), limit + 2, "every call has its result");
    assert_eq!(results[limit - 1], (format!("c{limit}"), limit.to_string()));
    for (id, text) in &results[limit..] {
        assert!(text.contains("not run: at most"), "{id}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_error_is_an_observation_and_the_agent_goes_on() {
    let model = FakeModel::start(|request, _| {
        if tool_results(request).is_empty() {
            stream_tool_calls(&[("c1", "calculator", json!({"expression": "1/0"}).to_string())])
        } else {
            stream_answer("It cannot be divided by zero.")
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let engine = start_engine(
        &dir.path().join("s.db"),
        &model.base_url,
        ToolSet::builtin(),
        Duration::from_secs(15),
    );
    let session = new_session(&engine).await;
    let id = send(&engine, session, "1/0?", Value::Null).await;
    wait_for(&engine, id, ExecutionStatus::Completed).await;
    let saved = steps(&engine, id).await;
    assert_eq!(saved[0].error.as_ref().unwrap().kind, "tool_error");
    let results = tool_results(&model.requests()[1]);
    assert!(results[0].1.starts_with("Error: "), "{results:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_failing_three_times_is_a_failed_step() {
    let model = FakeModel::start(|_, _| {
        Reply::Status(
            500,
            Vec::new(),
            json!({"error": {"message": "overloaded"}}).to_string(),
        )
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let engine = start_engine(
        &dir.path().join("s.db"),
        &model.base_url,
        ToolSet::builtin(),
        Duration::from_secs(15),
    );
    let session = new_session(&engine).await;
    let id = send(&engine, session, "hello", Value::Null).await;
    let failed = wait_for(&engine, id, ExecutionStatus::Failed).await;
    assert_eq!(model.request_count(), 3);
    let message = failed.error_message.unwrap();
    assert!(
        message.contains("500: overloaded") && message.contains("3 attempts"),
        "{message}"
    );
    let saved = steps(&engine, id).await;
    assert_eq!(saved.len(), 1);
    let error = saved[0].error.as_ref().unwrap();
    assert_eq!(error.kind, "model_http_error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_input_pauses_and_the_answer_resumes_the_run() {
    let model = FakeModel::start(|request, _| {
        let results = tool_results(request);
        match results.first() {
            None => stream_tool_calls(&[(
                "ask_1",
                "user_input",
                json!({"question": "Which city?"}).to_string(),
            )]),
            Some((_, answer)) => stream_answer(&format!("Sunny in {answer}.")),
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let engine = start_engine(
        &dir.path().join("s.db"),
        &model.base_url,
        ToolSet::builtin(),
        Duration::from_secs(15),
    );
    let session = new_session(&engine).await;
    let id = send(&engine, session, "What is the weather?", Value::Null).await;
    let paused = wait_for(&engine, id, ExecutionStatus::Paused).await;
    assert_eq!(paused.id, id);
    let resumed = send(&engine, session, "Paris", Value::Null).await;
    assert_eq!(resumed, id, "the answer resumes the paused execution");
    let done = wait_for(&engine, id, ExecutionStatus::Completed).await;
    assert_eq!(done.output, json!("Sunny in Paris."));
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        tool_results(&requests[1]),
        vec![("ask_1".to_string(), "Paris".to_string())]
    );
    let kinds: Vec<StepKind> = steps(&engine, id).await.iter().map(|s| s.kind).collect();
    assert_eq!(
        kinds,
        [StepKind::Action, StepKind::UserInput, StepKind::FinalAnswer]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_mid_stream_drops_the_model_request() {
    let model = FakeModel::start(|_, _| {
        Reply::StreamThenHang(vec![chunk(json!({"content": "Thinking about it"}), None)])
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let engine = start_engine(
        &dir.path().join("s.db"),
        &model.base_url,
        ToolSet::builtin(),
        Duration::from_secs(15),
    );
    let session = new_session(&engine).await;
    let id = send(&engine, session, "a long question", Value::Null).await;
    wait_until("the model request", WAIT, async || {
        model.request_count() == 1
    })
    .await;
    engine.cancel(&tenant(), id).await.unwrap();
    wait_for(&engine, id, ExecutionStatus::Cancelled).await;
    wait_until("the server to see the stream dropped", WAIT, async || {
        model.dropped_streams() == 1
    })
    .await;
    assert_eq!(model.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_steps_ends_in_a_clear_failure() {
    let model = FakeModel::start(|request, _| {
        let n = tool_results(request).len();
        stream_tool_calls(&[(
            &format!("c{n}"),
            "calculator",
            json!({"expression": "1+1"}).to_string(),
        )])
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let engine = start_engine(
        &dir.path().join("s.db"),
        &model.base_url,
        ToolSet::builtin(),
        Duration::from_secs(15),
    );
    let session = new_session(&engine).await;
    let id = send(&engine, session, "loop forever", json!({"max_steps": 3})).await;
    let failed = wait_for(&engine, id, ExecutionStatus::Failed).await;
    assert_eq!(
        failed.error_message.as_deref(),
        Some("the agent took 3 steps (max_steps) without reaching a final answer")
    );
    assert_eq!(model.request_count(), 3);
    assert_eq!(steps(&engine, id).await.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planning_steps_come_every_n_steps_when_asked() {
    let model = FakeModel::start(|request, _| {
        if !has_tools(request) {
            return stream_answer("1. compute 2. answer");
        }
        if tool_results(request).len() < 3 {
            let n = tool_results(request).len();
            stream_tool_calls(&[(
                &format!("c{n}"),
                "calculator",
                json!({"expression": "2+2"}).to_string(),
            )])
        } else {
            stream_answer("4")
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let engine = start_engine(
        &dir.path().join("s.db"),
        &model.base_url,
        ToolSet::builtin(),
        Duration::from_secs(15),
    );
    let session = new_session(&engine).await;
    let id = send(
        &engine,
        session,
        "2+2, three times",
        json!({"planning_interval": 2}),
    )
    .await;
    wait_for(&engine, id, ExecutionStatus::Completed).await;
    let saved = steps(&engine, id).await;
    let plan = |s: &Step| s.kind == StepKind::Planning;
    let shape: Vec<&str> = saved
        .iter()
        .map(|s| {
            if plan(s) {
                "plan"
            } else if s.kind == StepKind::FinalAnswer {
                "answer"
            } else {
                "act"
            }
        })
        .collect();
    assert_eq!(shape, ["plan", "act", "act", "plan", "act", "answer"]);
    assert!(
        saved[0]
            .model_output
            .as_deref()
            .unwrap()
            .starts_with("1. compute")
    );
    assert!(
        saved
            .iter()
            .all(|s| s.kind != StepKind::Action || !s.tool_calls.is_empty()),
        "a plan is a planning step, never an action"
    );
    let planning_request = &model.requests()[0];
    let last = planning_request["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap();
    assert!(last["content"].as_str().unwrap().contains("plan"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_task_in_a_session_sees_the_earlier_ones() {
    let model = FakeModel::start(|request, _| {
        let messages = request["messages"].as_array().unwrap();
        if messages.len() <= 2 {
            stream_answer("Hello Ada.")
        } else {
            stream_answer("Your name is Ada.")
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let engine = start_engine(
        &dir.path().join("s.db"),
        &model.base_url,
        ToolSet::builtin(),
        Duration::from_secs(15),
    );
    let session = new_session(&engine).await;
    let first = send(&engine, session, "My name is Ada.", Value::Null).await;
    wait_for(&engine, first, ExecutionStatus::Completed).await;
    let second = send(&engine, session, "What is my name?", Value::Null).await;
    wait_for(&engine, second, ExecutionStatus::Completed).await;
    let requests = model.requests();
    let conversation: Vec<(String, String)> = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .skip(1)
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let expected = [
        ("user", "My name is Ada."),
        ("assistant", "Hello Ada."),
        ("user", "What is my name?"),
    ];
    assert_eq!(
        conversation,
        expected
            .map(|(r, c)| (r.to_string(), c.to_string()))
            .to_vec()
    );
}

/// A model that takes six turns: five calculator calls, then the answer. Its turn is
/// read from the request (how many tool results it holds), as a real model's would be.
fn six_turns(request: &Value) -> (usize, Reply) {
    let turn = tool_results(request).len() + 1;
    let reply = if turn < 6 {
        stream_tool_calls(&[(
            &format!("call_{turn}"),
            "calculator",
            json!({"expression": format!("{turn}*10")}).to_string(),
        )])
    } else {
        stream_answer("done after 6 steps")
    };
    (turn, reply)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_step_3_of_6_asks_the_model_for_steps_4_to_6_only() {
    let crashed = Arc::new(AtomicBool::new(false));
    let turns: Arc<Mutex<Vec<(bool, usize)>>> = Arc::default();
    let model = {
        let (crashed, turns) = (crashed.clone(), turns.clone());
        FakeModel::start(move |request, _| {
            let (turn, reply) = six_turns(request);
            let after_crash = crashed.load(Ordering::SeqCst);
            turns.lock().unwrap().push((after_crash, turn));
            // Before the crash the model never answers turn 4: the process dies meanwhile.
            if turn == 4 && !after_crash {
                Reply::Hang
            } else {
                reply
            }
        })
        .await
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db");

    // The first server: its own runtime, stopped dead (no graceful release) once step 3
    // is durable and the model has been asked for step 4.
    let (id, session) = {
        let (db, base_url) = (db.clone(), model.base_url.clone());
        let turns = turns.clone();
        tokio::task::spawn_blocking(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            let ids = runtime.block_on(async {
                let engine = start_engine(
                    &db,
                    &base_url,
                    ToolSet::builtin(),
                    Duration::from_millis(500),
                );
                let session = new_session(&engine).await;
                let id = send(&engine, session, "count to six", Value::Null).await;
                wait_until("step 3 durable and turn 4 asked", WAIT, async || {
                    let asked = turns.lock().unwrap().contains(&(false, 4));
                    asked && steps(&engine, id).await.len() == 3
                })
                .await;
                (id, session)
            });
            runtime.shutdown_background();
            ids
        })
        .await
        .unwrap()
    };
    crashed.store(true, Ordering::SeqCst);

    // The second server on the same file takes the execution over when its lease runs out.
    let engine = start_engine(
        &db,
        &model.base_url,
        ToolSet::builtin(),
        Duration::from_secs(15),
    );
    let done = wait_for(&engine, id, ExecutionStatus::Completed).await;
    assert_eq!(done.output, json!("done after 6 steps"));
    assert_eq!(done.session_id, Some(session));
    let after: Vec<usize> = turns
        .lock()
        .unwrap()
        .iter()
        .filter(|(after, _)| *after)
        .map(|(_, turn)| *turn)
        .collect();
    assert_eq!(
        after,
        [4, 5, 6],
        "only the unrecorded turns are asked again"
    );
    let saved = steps(&engine, id).await;
    assert_eq!(saved.len(), 6);
    assert_eq!(saved[2].tool_calls[0].id, "call_3");
    assert_eq!(saved[5].kind, StepKind::FinalAnswer);
    // The recorded tool calls were not run again: one step per number.
    let numbers: Vec<u32> = saved.iter().map(|s| s.step_number).collect();
    assert_eq!(numbers, [1, 2, 3, 4, 5, 6]);
}
