//! The steps of recently followed sessions, shared by every viewer of a run: the session's
//! event stream (`?include=step`) and the front-end protocols' streams each need a step once
//! per step, not once per viewer. The first to ask reads the session's new step rows; a step
//! the store just acknowledged is remembered here ([`remember_step`]) so its viewers need
//! not read it back at all.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};

use serde_json::Value;
use stepwise_core::{Event, Id, Step};
use stepwise_store::{Store, Tenant};

/// Step `n` of an execution of the session, as stored: from the steps of the session
/// recently read or acknowledged ([`STEPS`]), else read once for every viewer of the session
/// (only the rows past those already read).
pub async fn stored_step<S: Store>(
    store: &S,
    tenant: &Tenant,
    session_id: Id,
    execution_id: Id,
    n: u32,
) -> Option<Arc<Step>> {
    let key = (execution_id, n);
    let entry = steps_of(tenant, session_id);
    if let Some(step) = entry.get(key) {
        return Some(step);
    }
    // One read for every viewer of the session: the others wait here, then find it.
    let _loading = entry.loading.lock().await;
    if let Some(step) = entry.get(key) {
        return Some(step);
    }
    let after = *entry.position.read().unwrap_or_else(|e| e.into_inner());
    let started = std::time::Instant::now();
    match store
        .list_session_steps_after(tenant, session_id, after)
        .await
    {
        Ok(read) => {
            tracing::debug!(session = %session_id, rows = read.rows.len(), whole = read.whole,
                elapsed_us = started.elapsed().as_micros() as u64, "front-end streams read new steps");
            entry.add(read)
        }
        Err(e) => {
            tracing::warn!(session = %session_id, error = %e, "could not read the steps");
            return None;
        }
    }
    entry.get(key)
}

/// The step number an event names (`metadata.step_number`).
pub fn step_number(event: &Event) -> Option<u32> {
    event
        .metadata
        .get("step_number")
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
}

/// How many sessions keep their steps in [`STEPS`].
const RECENT_SESSIONS: usize = 16;

/// The steps of a session read so far, by execution and step number, and where the next
/// read of new rows starts.
#[derive(Default)]
struct SessionSteps {
    steps: RwLock<HashMap<(Id, u32), Arc<Step>>>,
    position: RwLock<i64>,
    /// Held while reading the store: one read at a time per session.
    loading: tokio::sync::Mutex<()>,
}

impl SessionSteps {
    fn new() -> Self {
        SessionSteps {
            position: RwLock::new(stepwise_store::START_POSITION),
            ..SessionSteps::default()
        }
    }

    fn get(&self, key: (Id, u32)) -> Option<Arc<Step>> {
        self.steps
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned()
    }

    /// The rows of a read past the position: new steps are added, the position moves on.
    fn add(&self, read: stepwise_store::StepsAfter) {
        let mut steps = self.steps.write().unwrap_or_else(|e| e.into_inner());
        if read.whole {
            steps.clear();
        }
        let mut position = self.position.write().unwrap_or_else(|e| e.into_inner());
        let highest = read.rows.iter().map(|r| r.position).max();
        for row in read.rows {
            let step = row.item;
            steps
                .entry((step.execution_id, step.step_number))
                .or_insert_with(|| Arc::new(step));
        }
        if !read.whole {
            *position = read
                .next_position
                .or(highest)
                .map_or(*position, |p| p.max(*position));
        }
    }
}

/// The steps of recently followed sessions: every viewer of a run needs each step once, so
/// the first to ask reads the session's new step rows and the others find them here.
static STEPS: Mutex<VecDeque<(SessionKey, Arc<SessionSteps>)>> = Mutex::new(VecDeque::new());

/// A session of a tenant.
type SessionKey = (String, Id);

/// A step the store just acknowledged: when its session is followed, its viewers find it
/// here instead of reading it back (they read it when it comes after its event).
pub fn remember_step(tenant: &Tenant, step: &Step) {
    let Some(session_id) = step.session_id else {
        return;
    };
    let entry = {
        let list = STEPS.lock().unwrap_or_else(|e| e.into_inner());
        list.iter()
            .find(|((t, id), _)| *id == session_id && t == tenant.as_str())
            .map(|(_, entry)| entry.clone())
    };
    if let Some(entry) = entry {
        entry
            .steps
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry((step.execution_id, step.step_number))
            .or_insert_with(|| Arc::new(step.clone()));
    }
}

/// The cache entry of a session (a new, empty one when it has none).
fn steps_of(tenant: &Tenant, session_id: Id) -> Arc<SessionSteps> {
    let mut list = STEPS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, entry)) = list
        .iter()
        .find(|((t, id), _)| *id == session_id && t == tenant.as_str())
    {
        return entry.clone();
    }
    let key = (tenant.as_str().to_string(), session_id);
    if list.len() >= RECENT_SESSIONS {
        list.pop_front();
    }
    let entry = Arc::new(SessionSteps::new());
    list.push_back((key, entry.clone()));
    entry
}

#[cfg(test)]
mod tests {
    use super::*;
    use stepwise_core::StepKind;

    fn step(session_id: Id, execution_id: Id, n: u32) -> Step {
        Step {
            id: stepwise_core::new_id(),
            execution_id,
            session_id: Some(session_id),
            step_number: n,
            kind: StepKind::Action,
            model_output: Some(format!("step {n}")),
            tool_calls: Vec::new(),
            code: None,
            observations: None,
            error: None,
            output: Value::Null,
            token_usage: Default::default(),
            started_at: None,
            ended_at: None,
            created_at: stepwise_core::Timestamp(0),
        }
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_stored_step_reaches_the_followers_of_its_session_only() {
        let tenant = Tenant::new("t1").unwrap();
        let (followed, other, execution) = (
            stepwise_core::new_id(),
            stepwise_core::new_id(),
            stepwise_core::new_id(),
        );
        let entry = steps_of(&tenant, followed);
        remember_step(&tenant, &step(followed, execution, 1));
        assert_eq!(
            entry.get((execution, 1)).map(|s| s.step_number),
            Some(1),
            "a followed session's step is there without a read"
        );
        // Another tenant's session of the same id, and a session nobody follows: nothing.
        remember_step(&Tenant::new("t2").unwrap(), &step(followed, execution, 2));
        assert!(entry.get((execution, 2)).is_none());
        remember_step(&tenant, &step(other, execution, 1));
        let list = STEPS.lock().unwrap_or_else(|e| e.into_inner());
        assert!(
            !list.iter().any(|((_, id), _)| *id == other),
            "no entry made for it"
        );
    }
}
