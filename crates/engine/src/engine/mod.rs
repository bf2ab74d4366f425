//! The engine: its configuration, its shared state and the types the jobs below share.
//!
//! Each job lives in its own file: [`submit`] (a user message queues or resumes an
//! execution), [`cancel`], [`worker`] (the claimer loop, claims, heartbeats), [`step_loop`]
//! (driving a built-in agent one step at a time), [`decisions`] (carrying out what
//! the agent decided), [`steps`] (saving a step),
//! [`tools_run`] (a step's tool calls and subagents), [`external`] (executions driven over
//! HTTP by an agent outside the server), [`finish`] (the one way an execution ends, whoever
//! drives it), [`snapshots`] and [`publish`] (messages and events).

mod busy;
mod cancel;
mod decisions;
mod external;
mod finish;
mod intake;
mod leases;
mod publish;
mod runner;
mod snapshots;
mod step_loop;
mod steps;
mod submit;
mod tools_run;

#[cfg(test)]
mod late_steps;
#[cfg(test)]
mod testing;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use stepwise_core::{EventType, Execution, Id, Message, Role, StepError};
use stepwise_store::{Ack, ClaimFilter, StepAppend, Store, Tenant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agent::{AgentContext, AgentRegistry};
use crate::tools::ToolSet;

pub use external::{ExternalSnapshot, ExternalStep, OpenExternal, OpenedExternal};
pub use leases::{Heartbeat, UnknownAgent, WORKER_ONLINE_WITHIN, WorkerClaim};
pub use publish::{MessageNote, Publisher};
pub use submit::latest_root_execution;

/// Executions of this type are driven over HTTP by an agent outside the server; workers
/// never run them.
pub const EXTERNAL_AGENT: &str = "external";

/// How deep subagents may nest (a subagent delegating to a subagent...).
const MAX_SUBAGENT_DEPTH: u32 = 4;
pub use stepwise_core::model::MAX_TOOL_CALLS_PER_STEP;

/// How the engine runs executions.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Worker tasks; each runs one execution at a time.
    pub workers: usize,
    /// How long a claim holds an execution without a heartbeat.
    pub lease: Duration,
    /// Claims after which an execution that keeps losing its worker fails.
    pub max_attempts: u32,
    /// The fallback poll: idle workers look for work the doorbell did not announce (leases
    /// of crashed workers, lost notifications) after between one and two of these.
    pub poll_interval: Duration,
    /// The agent type of a message that names none.
    pub default_agent: String,
    /// How long one tool call may run before it counts as failed ("timed out"); the agent
    /// sees that error as the call's result and goes on. Subagents are not limited by it.
    pub tool_timeout: Duration,
    /// Messages this node queues at once while its runs work (0: measured, see
    /// [`intake`]).
    pub intake_concurrency: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            workers: 8,
            lease: Duration::from_secs(15),
            max_attempts: 5,
            poll_interval: Duration::from_secs(5),
            default_agent: crate::demo::DEMO_AGENT.to_string(),
            tool_timeout: Duration::from_secs(300),
            intake_concurrency: 0,
        }
    }
}

/// The agent a message asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentChoice {
    pub agent_type: String,
    pub config: Value,
}

/// A user message to a session.
#[derive(Debug, Clone, Default)]
pub struct MessageInput {
    pub content: String,
    pub related_type: Option<String>,
    pub related_id: Option<String>,
    pub context_url: Option<String>,
    pub metadata: Value,
    pub agent: Option<AgentChoice>,
    /// What a front-end protocol adds to the execution's input beside `message`, under its
    /// own key (a LangGraph run's body under `langgraph`).
    pub extra_input: Option<(&'static str, Value)>,
    /// The answer a paused execution resumes with when it is not the message's text (a
    /// LangGraph `Command(resume=...)` holds any JSON).
    pub answer: Option<Value>,
}

/// What submitting a message did: the stored message and the execution that will answer
/// it (a new pending one, or the paused one it resumed).
#[derive(Debug, Clone)]
pub struct Submitted {
    pub session_id: Id,
    pub message: Message,
    pub execution: Execution,
}

/// How one run of an execution ended.
#[derive(Debug, Clone, PartialEq)]
enum RunEnd {
    Completed(String),
    Failed(String),
    Paused,
    Cancelled,
    /// Given back to the queue (shutdown) or left for the lease to expire (store trouble).
    Released,
    /// Another worker or a cancel elsewhere took it; this run writes nothing more.
    Lost,
}

/// The controls of one running execution.
#[derive(Clone)]
struct RunControl {
    cancel: CancellationToken,
    lost: Arc<AtomicBool>,
    worker: String,
    depth: u32,
}

impl RunControl {
    fn new(worker: &str, depth: u32) -> Self {
        RunControl {
            cancel: CancellationToken::new(),
            lost: Arc::new(AtomicBool::new(false)),
            worker: worker.to_string(),
            depth,
        }
    }

    fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }
}

/// One run of an execution: the agent's context and what the loop keeps between steps.
struct Run {
    ctx: AgentContext,
    /// The acks of the steps the run queued since it last waited for them: all awaited
    /// before the execution's status changes (a store need not commit one execution's
    /// steps in the order queued, so the last one's ack alone would not do).
    step_acks: Vec<Ack<StepAppend>>,
    /// The last line the run queued (the started line, a step's info line): awaited with
    /// the steps before the execution's status changes.
    last_line: Option<Ack<Message>>,
    parent_snapshot_id: Option<Id>,
    latest_snapshot_id: Option<Id>,
}

struct Inner<S: Store> {
    store: S,
    publisher: Publisher<S>,
    agents: AgentRegistry,
    tools: Arc<ToolSet>,
    config: EngineConfig,
    doorbell: Notify,
    /// Rung with every doorbell ring and queue signal: wakes every waiting claim of the
    /// worker processes (`POST /v1/workers/claim`), not just one.
    worker_bell: Notify,
    /// When each worker process was last recorded in the store.
    presence: leases::Presence,
    /// Messages being queued at once on this node while runs are working (see [`intake`]).
    intake: intake::Intake,
    /// Runs of this node, and how many of them are waiting for their agent's decision.
    runs: AtomicUsize,
    thinking: AtomicUsize,
    running: Mutex<HashMap<Id, RunControl>>,
    /// The lease tokens of the leased external executions this node opened, to renew them
    /// on their recorders' writes that come without the `Stepwise-Lease` header (clients
    /// from before recorder leases); at most [`MAX_REMEMBERED_RECORDERS`].
    recorders: Mutex<HashMap<Id, String>>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

/// Most recorder leases a node remembers for writes without the header (see
/// `Inner::recorders`); past it, such writes are accepted without renewing.
const MAX_REMEMBERED_RECORDERS: usize = 65_536;

/// The execution engine. Cheap to clone; every clone is the same engine.
pub struct Engine<S: Store> {
    inner: Arc<Inner<S>>,
}

impl<S: Store> Clone for Engine<S> {
    fn clone(&self) -> Self {
        Engine {
            inner: self.inner.clone(),
        }
    }
}

impl<S: Store> Engine<S> {
    /// An engine with the built-in tools.
    pub fn new(store: S, agents: AgentRegistry, config: EngineConfig) -> Self {
        Self::with_tools(store, agents, ToolSet::builtin(), config)
    }

    /// An engine whose agents call these tools.
    pub fn with_tools(
        store: S,
        agents: AgentRegistry,
        tools: ToolSet,
        config: EngineConfig,
    ) -> Self {
        Engine {
            inner: Arc::new(Inner {
                publisher: Publisher::new(store.clone()),
                store,
                agents,
                tools: Arc::new(tools),
                intake: intake::Intake::new(config.intake_concurrency, config.workers),
                runs: AtomicUsize::new(0),
                thinking: AtomicUsize::new(0),
                config,
                doorbell: Notify::new(),
                worker_bell: Notify::new(),
                presence: leases::Presence::default(),
                running: Mutex::new(HashMap::new()),
                recorders: Mutex::new(HashMap::new()),
                shutdown: CancellationToken::new(),
                tracker: TaskTracker::new(),
            }),
        }
    }

    /// The store the engine writes to.
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// Stores messages and queues events for the sessions' subscribers.
    pub fn publisher(&self) -> &Publisher<S> {
        &self.inner.publisher
    }

    /// The configuration the engine was built with.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// The agent types this engine runs.
    pub fn agents(&self) -> &AgentRegistry {
        &self.inner.agents
    }

    /// Whether this server runs this agent type itself (a built-in agent).
    pub fn can_run(&self, agent_type: &str) -> bool {
        self.inner.agents.contains(agent_type)
    }

    /// Whether executions of this agent type are run by worker processes: any agent
    /// type name ([`stepwise_core::name::is_agent_type`]) neither built in nor `external`.
    pub fn is_worker_agent(&self, agent_type: &str) -> bool {
        agent_type != EXTERNAL_AGENT
            && !self.can_run(agent_type)
            && stepwise_core::name::is_agent_type(agent_type)
    }

    /// What this server's own workers claim: the built-in agents' executions (and paused
    /// external ones the user resumed), of every tenant.
    fn builtin_claims(&self) -> ClaimFilter {
        let mut agent_types = self.inner.agents.names();
        agent_types.push(EXTERNAL_AGENT.to_string());
        ClaimFilter {
            agent_types: Some(agent_types),
            tenant: None,
        }
    }

    /// Wakes an idle worker, and every worker process waiting in a claim: there is work.
    pub fn ring(&self) {
        self.inner.doorbell.notify_one();
        self.inner.worker_bell.notify_waiters();
    }

    /// How many executions this process is running now.
    pub fn running_count(&self) -> usize {
        self.running_map().len()
    }

    /// Messages this node queues at once while its runs work now (measured unless
    /// `--intake-concurrency` fixes it; see [`intake`]).
    pub fn intake_limit(&self) -> usize {
        self.inner.intake.limit()
    }

    /// Messages that waited for their turn to be queued since this node started.
    pub fn intake_waited(&self) -> u64 {
        self.inner.intake.waited()
    }

    fn running_map(&self) -> std::sync::MutexGuard<'_, HashMap<Id, RunControl>> {
        self.inner.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a run of this node until dropped.
    fn working(&self) -> Counted<'_> {
        Counted::new(&self.inner.runs)
    }

    /// Counts a run as waiting for its agent's decision until dropped.
    fn thinking(&self) -> Counted<'_> {
        Counted::new(&self.inner.thinking)
    }

    /// Whether some run of this node is doing its own work right now (saving, publishing,
    /// running tools), not waiting for its agent: then the cores and the store are the
    /// runs' to share, and intake takes its turn (see [`intake`]).
    fn runs_working(&self) -> bool {
        self.inner.runs.load(Ordering::Relaxed) > self.inner.thinking.load(Ordering::Relaxed)
    }
}

/// An atomic count held up by one while this lives.
struct Counted<'a>(&'a AtomicUsize);

impl<'a> Counted<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Counted(count)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl<S: Store> Engine<S> {
    /// Stores a lifecycle line ("Execution started"...) with `{"kind": "status"}`.
    /// [`Self::say_status`] queued, not awaited (see [`Publisher::note_queued`]).
    async fn queue_status(
        &self,
        tenant: &Tenant,
        session_id: Id,
        execution_id: Id,
        text: &str,
    ) -> Option<Ack<Message>> {
        self.inner
            .publisher
            .note_queued(
                tenant,
                session_id,
                execution_id,
                Role::Info,
                text,
                &MessageNote::kind("status"),
            )
            .await
    }

    /// [`Self::queue_status`] for a line no one waits on (a worker's or an external
    /// agent's run: its end flushes every queued write before the status moves, see
    /// `finish`). The line commits with the writer's next batch; a failure is logged.
    async fn post_status(&self, tenant: &Tenant, session_id: Id, execution_id: Id, text: &str) {
        if let Some(ack) = self
            .queue_status(tenant, session_id, execution_id, text)
            .await
        {
            log_if_lost(session_id, ack);
        }
    }

    /// [`Self::queue_status`], waiting until the line is durable.
    async fn say_status(&self, tenant: &Tenant, session_id: Id, execution_id: Id, text: &str) {
        if let Some(ack) = self
            .queue_status(tenant, session_id, execution_id, text)
            .await
            && let Err(e) = ack.await
        {
            tracing::warn!(session = %session_id, error = %e, "could not store a message");
        }
    }

    /// Queues an event about one of a run's steps.
    async fn run_event(
        &self,
        tenant: &Tenant,
        run: &Run,
        event_type: EventType,
        step_number: u32,
        content: &str,
        tool: Option<&str>,
    ) {
        let execution = &run.ctx.execution;
        self.inner
            .publisher
            .step_event(
                tenant,
                execution.session_id,
                execution.id,
                event_type,
                step_number,
                content,
                tool,
            )
            .await;
    }
}

/// Whether the execution's agent config asks for debug snapshots after every step.
fn is_debug(execution: &Execution) -> bool {
    execution
        .agent_config
        .get("debug")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn cancelled_error() -> StepError {
    StepError {
        kind: "cancelled".into(),
        message: "the execution was cancelled".into(),
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "unknown panic".to_string()
    }
}

fn cut(text: &str, max: usize) -> String {
    stepwise_core::summary::cut_chars(text, max)
}

/// Logs a queued line's write if it fails; no request waits on it.
pub(super) fn log_if_lost(session_id: Id, ack: Ack<Message>) {
    tokio::spawn(async move {
        if let Err(e) = ack.await {
            tracing::warn!(session = %session_id, error = %e, "could not store a message");
        }
    });
}
