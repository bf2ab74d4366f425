//! Test support for the engine's unit tests: a scripted agent and an engine over a real
//! SQLite store in a temporary directory, driven one claim at a time (no workers, no
//! timing).

use std::time::Duration;

use serde_json::{Value, json};
use stepwise_core::{Event, Execution, Id, Message, Snapshot, Step, StepKind, ToolCall};
use stepwise_store::{MessageQuery, NewSession, Tenant};
use stepwise_store_sqlite::SqliteStore;
use tempfile::TempDir;

use super::{Engine, EngineConfig, MessageInput};
use crate::BoxFuture;
use crate::agent::{Agent, AgentContext, AgentError, AgentRegistry, Decision};
use stepwise_store::prelude::*;

/// The agent type the harness registers.
pub(super) const SCRIPTED: &str = "scripted";

/// An agent that answers from a fixed script: its n-th decision is the script's n-th
/// entry, n counting the steps so far that are not the user's answers (so it is
/// resumable, as the engine requires). Past the end of the script it gives up.
pub(super) struct ScriptedAgent {
    script: Vec<Result<Decision, AgentError>>,
}

impl Agent for ScriptedAgent {
    fn next_step<'a>(
        &'a self,
        ctx: &'a AgentContext,
    ) -> BoxFuture<'a, Result<Decision, AgentError>> {
        let next = ctx
            .steps
            .iter()
            .filter(|s| s.kind != StepKind::UserInput)
            .count();
        let decision = self.script.get(next).cloned().unwrap_or(Ok(Decision::Fail {
            error_message: "the script ended".into(),
        }));
        Box::pin(async move { decision })
    }

    fn needs_session_memory(&self) -> bool {
        false
    }
}

/// A tool call of a script.
pub(super) fn call(name: &str, arguments: Value) -> ToolCall {
    ToolCall {
        id: format!("call-{name}"),
        name: name.to_string(),
        arguments,
    }
}

/// An engine running the scripted agent over a fresh SQLite store (or a wrapper of it),
/// with one session.
pub(super) struct Harness<S: Store = SqliteStore> {
    pub engine: Engine<S>,
    pub tenant: Tenant,
    pub session_id: Id,
    _dir: TempDir,
}

impl Harness {
    pub async fn new(script: Vec<Result<Decision, AgentError>>) -> Harness {
        Harness::over(script, |store| store).await
    }
}

impl<S: Store> Harness<S> {
    /// [`Harness::new`] over `wrap` of the SQLite store.
    pub async fn over(
        script: Vec<Result<Decision, AgentError>>,
        wrap: impl FnOnce(SqliteStore) -> S,
    ) -> Harness<S> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = SqliteStore::open(&dir.path().join("engine.db")).expect("a SQLite store");
        let store = wrap(store);
        let mut agents = AgentRegistry::new();
        agents.register(SCRIPTED, ScriptedAgent { script });
        let config = EngineConfig {
            default_agent: SCRIPTED.to_string(),
            ..EngineConfig::default()
        };
        let engine = Engine::new(store, agents, config);
        let tenant = Tenant::new("test").expect("a tenant");
        let session = engine
            .store()
            .create_session(
                &tenant,
                NewSession {
                    user_id: "user".into(),
                    ..NewSession::default()
                },
            )
            .await
            .expect("a session");
        Harness {
            engine,
            tenant,
            session_id: session.id,
            _dir: dir,
        }
    }

    /// Posts a user message; the id of the execution that answers it.
    pub async fn say(&self, text: &str) -> Id {
        let submitted = self
            .engine
            .submit_message(
                &self.tenant,
                "user",
                self.session_id,
                MessageInput {
                    content: text.to_string(),
                    ..MessageInput::default()
                },
            )
            .await
            .expect("the message is accepted");
        submitted.execution.id
    }

    /// Claims the next queued execution and runs it as a worker would.
    pub async fn run_next(&self) {
        let claim = self
            .engine
            .store()
            .claim_next("test-worker", Duration::from_secs(60), 5)
            .await
            .expect("claiming works")
            .expect("an execution is queued");
        self.engine.run_claim("test-worker", claim).await;
    }

    pub async fn execution(&self, id: Id) -> Execution {
        self.engine
            .store()
            .get_execution(&self.tenant, id)
            .await
            .expect("reading works")
            .expect("the execution exists")
    }

    pub async fn steps(&self, id: Id) -> Vec<Step> {
        self.engine
            .store()
            .list_steps(&self.tenant, id)
            .await
            .expect("reading works")
            .items
    }

    /// The execution's snapshots, each with its state.
    pub async fn snapshots(&self, id: Id) -> Vec<Snapshot> {
        let store = self.engine.store();
        let mut full = Vec::new();
        for listed in store
            .list_snapshots(&self.tenant, id)
            .await
            .expect("reading works")
        {
            let snapshot = store
                .get_snapshot(&self.tenant, listed.id)
                .await
                .expect("reading works")
                .expect("the snapshot exists");
            full.push(snapshot);
        }
        full
    }

    pub async fn messages(&self) -> Vec<Message> {
        self.engine.store().flush().await.expect("flushing works");
        self.engine
            .store()
            .list_messages(&self.tenant, self.session_id, MessageQuery::default())
            .await
            .expect("reading works")
    }

    /// The session's events so far, in order.
    pub async fn events(&self) -> Vec<Event> {
        self.engine.store().flush().await.expect("flushing works");
        self.engine
            .store()
            .list_events(&self.tenant, self.session_id, 0, 10_000)
            .await
            .expect("reading works")
    }

    /// The types of the session's events so far, in order.
    pub async fn event_types(&self) -> Vec<String> {
        self.events()
            .await
            .iter()
            .map(|e| e.event_type.as_str().to_string())
            .collect()
    }
}

/// A message's content and metadata, the way the tests compare them.
pub(super) fn line(message: &Message) -> (String, String, Value) {
    (
        message.role.as_str().to_string(),
        message.content.clone(),
        message.metadata.clone(),
    )
}

/// An info line with its metadata.
pub(super) fn info(content: &str, metadata: Value) -> (String, String, Value) {
    ("info".to_string(), content.to_string(), metadata)
}

/// A lifecycle line ("Execution started"...).
pub(super) fn status(content: &str) -> (String, String, Value) {
    info(content, json!({"kind": "status"}))
}
