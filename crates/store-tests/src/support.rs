//! Fixtures and small helpers the cases share.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use stepwise_core::{
    Event, EventType, Execution, ExecutionStatus, Id, ManualClock, Message, Role, Session,
    Snapshot, Step, StepBody, StepError, StepKind, Timestamp, TokenUsage, ToolCall,
};
use stepwise_store::{
    NewEvent, NewExecution, NewMessage, NewSession, NewSnapshot, NewStep, Result, StepAppend,
    Store, Tenant,
};

use crate::Harness;

/// 2026-01-01T00:00:00Z: where every manual clock starts.
pub const T0: Timestamp = Timestamp(1_767_225_600_000_000);

/// How long a case waits for something that should happen promptly (a live event). A
/// deadline so a broken store fails the case instead of hanging it, not a timing claim.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// A fresh store on a manual clock starting at [`T0`].
pub async fn manual_store<H: Harness>(harness: &H) -> (H::Store, Arc<ManualClock>) {
    let clock = ManualClock::new(T0);
    let store = harness.fresh(clock.clone()).await;
    (store, clock)
}

pub fn tenant(id: &str) -> Tenant {
    Tenant::new(id).unwrap_or_else(|e| panic!("`{id}` should be a valid tenant: {e}"))
}

/// Unwraps a store answer, naming the call when it failed.
#[track_caller]
pub fn ok<T, E: Debug>(result: std::result::Result<T, E>, what: &str) -> T {
    match result {
        Ok(value) => value,
        Err(e) => panic!("{what}: the store answered an error: {e:?}"),
    }
}

/// Unwraps an `Ok(Some(_))`, naming the call when it was not.
#[track_caller]
pub fn some<T, E: Debug>(result: std::result::Result<Option<T>, E>, what: &str) -> T {
    match result {
        Ok(Some(value)) => value,
        Ok(None) => panic!("{what}: expected a row, the store answered None"),
        Err(e) => panic!("{what}: the store answered an error: {e:?}"),
    }
}

/// Asserts that a store answer is the given error variant.
#[macro_export]
#[doc(hidden)]
macro_rules! assert_err {
    ($result:expr, $pattern:pat, $($what:tt)+) => {
        match $result {
            Err($pattern) => {}
            Err(other) => panic!("{}: expected {}, got the error {:?}", format!($($what)+), stringify!($pattern), other),
            Ok(value) => panic!("{}: expected {}, got Ok({:?})", format!($($what)+), stringify!($pattern), value),
        }
    };
}

pub fn new_session(user: &str, name: Option<&str>) -> NewSession {
    NewSession {
        user_id: user.to_string(),
        name: name.map(str::to_string),
        title: name.map(|n| format!("Title of {n}")),
        metadata: json!({}),
        ..NewSession::default()
    }
}

pub async fn create_session<S: Store>(store: &S, tenant: &Tenant, name: Option<&str>) -> Session {
    ok(
        store
            .create_session(tenant, new_session("user-1", name))
            .await,
        "create_session",
    )
}

pub fn new_execution(session_id: Option<Id>, status: ExecutionStatus) -> NewExecution {
    NewExecution {
        session_id,
        parent_execution_id: None,
        user_id: "user-1".to_string(),
        agent_type: "demo".to_string(),
        agent_config: json!({"temperature": 0}),
        input: json!({"message": "hello"}),
        metadata: json!({}),
        status,
        lease: None,
    }
}

pub async fn create_execution<S: Store>(
    store: &S,
    tenant: &Tenant,
    session_id: Option<Id>,
    status: ExecutionStatus,
) -> Execution {
    ok(
        store
            .create_execution(tenant, new_execution(session_id, status))
            .await,
        "create_execution",
    )
}

pub async fn append_message<S: Store>(
    store: &S,
    tenant: &Tenant,
    session_id: Id,
    role: Role,
    content: &str,
) -> Message {
    ok(
        store
            .append_message(tenant, NewMessage::new(session_id, role, content))
            .await,
        "append_message",
    )
}

/// A step body that is a pure function of its number, so equal numbers give equal bodies.
pub fn step_body(n: u32) -> StepBody {
    let tool = if n.is_multiple_of(2) {
        "calculator"
    } else {
        "clock"
    };
    StepBody {
        model_output: Some(format!("Thinking about step {n}: ünïcödé ✓")),
        tool_calls: vec![ToolCall {
            id: format!("call_{n}"),
            name: tool.to_string(),
            arguments: json!({"expression": format!("{n}+{n}"), "nested": {"n": n}}),
        }],
        code: n.is_multiple_of(3).then(|| format!("print({n})")),
        observations: Some(format!("{}", 2 * n)),
        error: n.is_multiple_of(5).then(|| StepError {
            kind: "tool_error".into(),
            message: format!("failed at {n}"),
        }),
        output: if n.is_multiple_of(4) {
            json!({"answer": n})
        } else {
            Value::Null
        },
        token_usage: TokenUsage::new(u64::from(n) * 10, u64::from(n)),
        started_at: Some(Timestamp(T0.0 + i64::from(n) * 1_000_000)),
        ended_at: Some(Timestamp(T0.0 + i64::from(n) * 1_000_000 + 250_000)),
    }
}

/// A body big enough to be compressed by any reasonable threshold.
pub fn large_step_body(n: u32) -> StepBody {
    StepBody {
        model_output: Some(format!("step {n} ").repeat(4000)),
        observations: Some("x".repeat(20_000)),
        ..step_body(n)
    }
}

pub fn new_step(execution_id: Id, step_number: u32) -> NewStep {
    NewStep {
        execution_id,
        step_number,
        kind: StepKind::Action,
        body: step_body(step_number),
    }
}

/// Appends a step and waits until it is durable; an error from the call or from the
/// acknowledgement comes back the same way.
pub async fn append_step<S: Store>(store: &S, tenant: &Tenant, new: NewStep) -> Result<StepAppend> {
    store.append_step(tenant, new).await?.await
}

/// Appends step `n` of an execution with [`step_body`] and expects it to be new.
pub async fn add_step<S: Store>(store: &S, tenant: &Tenant, execution_id: Id, n: u32) -> Step {
    let appended = ok(
        append_step(store, tenant, new_step(execution_id, n)).await,
        "append_step",
    );
    assert!(
        appended.created,
        "step {n} was appended for the first time, so `created` must be true"
    );
    appended.step
}

pub fn new_event(session_id: Id, event_type: EventType, content: &str) -> NewEvent {
    NewEvent {
        session_id,
        message_id: None,
        execution_id: None,
        event_type,
        content: content.to_string(),
        metadata: json!({"content": content}),
    }
}

pub async fn append_event_durable<S: Store>(
    store: &S,
    tenant: &Tenant,
    new: NewEvent,
) -> Result<Event> {
    store.append_event(tenant, new).await?.await
}

pub async fn add_event<S: Store>(
    store: &S,
    tenant: &Tenant,
    session_id: Id,
    content: &str,
) -> Event {
    ok(
        append_event_durable(
            store,
            tenant,
            new_event(session_id, EventType::StepCompleted, content),
        )
        .await,
        "append_event",
    )
}

pub fn new_snapshot(execution_id: Id, step_number: u32, parent: Option<Id>) -> NewSnapshot {
    NewSnapshot {
        execution_id,
        parent_snapshot_id: parent,
        agent_id: Some(format!("agent-{step_number}")),
        agent_name: Some("demo".to_string()),
        step_number,
        is_final: false,
        debug_mode: step_number % 2 == 1,
        state: json!({"step": step_number, "memory": ["a", "b"], "vars": {"x": step_number}}),
        replace: false,
    }
}

pub async fn save_snapshot_durable<S: Store>(
    store: &S,
    tenant: &Tenant,
    new: NewSnapshot,
) -> Result<Snapshot> {
    store.save_snapshot(tenant, new).await?.await
}

pub async fn add_snapshot<S: Store>(
    store: &S,
    tenant: &Tenant,
    execution_id: Id,
    step_number: u32,
    parent: Option<Id>,
) -> Snapshot {
    ok(
        save_snapshot_durable(
            store,
            tenant,
            new_snapshot(execution_id, step_number, parent),
        )
        .await,
        "save_snapshot",
    )
}

/// A small deterministic generator (xorshift64*), so a randomized case can print the
/// seed that failed and be replayed exactly.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// The checkpoint store of a backend the checkpoint cases run on (the files backend keeps
/// none and skips them).
pub fn checkpoints<S: Store>(store: &S) -> &S::Checkpoints {
    store
        .checkpoints()
        .expect("the checkpoint cases run on backends that keep checkpoints")
}
