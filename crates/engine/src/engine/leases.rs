//! Executions run by worker processes — users' own agents behind the queue
//! (`docs/workers.md`): claims that hand out a lease token with what the agent needs to
//! continue, heartbeats, the lease check of every write a worker makes, live tokens, and
//! handing an execution back.
//!
//! A lease token is the claim's lease owner in the store, so every rule of the queue holds
//! for workers as for the server's own runners: one running execution per session, expired
//! leases taken over with the attempt counted, attempts capped. Each write of a worker
//! renews its lease before it writes: a lease that is no longer the execution's (expired
//! and taken over, cancelled, paused, finished, forged) writes nothing, and a renewed one
//! cannot expire during the write.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};
use stepwise_core::{
    Event, EventType, Execution, ExecutionStatus, Id, Memory, Session, Snapshot, Step, StepBody,
    StepKind, Timestamp,
};
use stepwise_store::rules::{FORGET_WORKERS_AFTER, lease_until};
use stepwise_store::{
    Claim, ClaimFilter, NewStep, Result, Store, StoreError, Tenant, WorkerSeen, session_with_memory,
};

use super::{EXTERNAL_AGENT, Engine};

/// How many claimed executions a claim prepares at once (each with its few reads).
const HAND_OUT_AT_ONCE: usize = 8;

/// A worker seen within this long counts as online (`GET /v1/agents`).
///
/// That is a worker's longest claim wait (25 s: an idle worker calls at least that often)
/// plus the [`RECORD_WORKER_EVERY`] its calls are written at and two seconds of slack: a
/// worker that stopped answering is offline once its last claim has run out. A worker
/// that stops cleanly says so (`DELETE /v1/workers/{id}`) and is offline at once.
pub const WORKER_ONLINE_WITHIN: Duration = Duration::from_secs(32);
/// A worker's calls are written to the store at most this often (the rest only renew).
const RECORD_WORKER_EVERY: Duration = Duration::from_secs(5);

/// An execution handed to a worker process, with everything its agent needs to continue.
#[derive(Debug, Clone)]
pub struct WorkerClaim {
    pub execution: Execution,
    pub session: Option<Session>,
    /// 1 for the first run; more after a lost worker (or a pause).
    pub attempt: u32,
    /// The lease token every write and heartbeat of this run carries.
    pub lease: String,
    pub lease_expires_at: Timestamp,
    /// The user's answer when this claim resumes a pause.
    pub resume_answer: Option<Value>,
    /// The steps this execution saved so far (the answer included, as a `user_input` step).
    pub steps: Vec<Step>,
    /// The session's agent memory, as `GET /v1/sessions/{id}/memory` restores it.
    pub memory: Option<Memory>,
    /// This execution's latest snapshot.
    pub snapshot: Option<Snapshot>,
}

/// What a heartbeat answers.
#[derive(Debug, Clone, PartialEq)]
pub struct Heartbeat {
    /// When the renewed lease runs out (`None` once cancelled).
    pub lease_expires_at: Option<Timestamp>,
    /// The execution was cancelled: the worker stops its agent and writes nothing more.
    pub cancel_requested: bool,
}

/// When each worker process was last written to the store, per tenant.
#[derive(Default)]
pub(super) struct Presence {
    written: Mutex<HashMap<(String, String), (Instant, Value)>>,
}

impl<S: Store> Engine<S> {
    /// Records that a worker process called, with the agent types it runs; written to the
    /// store when it is new, its agents changed, or its last write is a few seconds old.
    pub async fn note_worker(&self, tenant: &Tenant, worker_id: &str, agents: Option<&Value>) {
        let key = (tenant.as_str().to_string(), worker_id.to_string());
        let agents = {
            let mut written = self
                .inner
                .presence
                .written
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let due = match (written.get(&key), agents) {
                (None, None) => None,
                (None, Some(agents)) => Some(agents.clone()),
                (Some((at, known)), agents) => {
                    let agents = agents.unwrap_or(known);
                    (at.elapsed() >= RECORD_WORKER_EVERY || agents != known).then(|| agents.clone())
                }
            };
            if let Some(agents) = &due {
                if written.len() > 10_000 {
                    written.retain(|_, (at, _)| at.elapsed() < WORKER_ONLINE_WITHIN);
                }
                written.insert(key.clone(), (Instant::now(), agents.clone()));
            }
            due
        };
        let Some(agents) = agents else { return };
        let seen = WorkerSeen {
            worker_id: key.1,
            agents,
            last_seen_at: Timestamp::now(),
        };
        if let Err(e) = self.inner.store.record_worker(tenant, seen).await {
            tracing::warn!(worker = worker_id, error = %e, "could not record a worker's call");
        }
    }

    /// Whether a worker process running this agent type was seen lately.
    pub async fn worker_online(&self, tenant: &Tenant, agent_type: &str) -> Result<bool> {
        let since = Timestamp(Timestamp::now().0 - WORKER_ONLINE_WITHIN.as_micros() as i64);
        let workers = self.inner.store.list_workers(tenant, since).await?;
        Ok(workers.iter().any(|w| serves(w, agent_type)))
    }

    /// Whether a message may name this agent type without `agent.wait`: built in, or
    /// announced by a worker process of this tenant in the last day
    /// ([`FORGET_WORKERS_AFTER`]). `None` when it may; otherwise the known agent types
    /// closest to the name (up to three, closest first; all of them, up to ten, when none
    /// is close), for a "did you mean" answer.
    pub async fn unknown_agent(
        &self,
        tenant: &Tenant,
        agent_type: &str,
    ) -> Result<Option<UnknownAgent>> {
        if self.can_run(agent_type) {
            return Ok(None);
        }
        let since = Timestamp(Timestamp::now().0 - FORGET_WORKERS_AFTER.as_micros() as i64);
        let workers = self.inner.store.list_workers(tenant, since).await?;
        if workers.iter().any(|w| serves(w, agent_type)) {
            return Ok(None);
        }
        let mut known: Vec<String> = self
            .inner
            .agents
            .names()
            .into_iter()
            .filter(|name| name != EXTERNAL_AGENT)
            .collect();
        for worker in &workers {
            for agent in worker.agents.as_array().into_iter().flatten() {
                if let Some(name) = agent.get("type").and_then(Value::as_str)
                    && !known.iter().any(|k| k == name)
                {
                    known.push(name.to_string());
                }
            }
        }
        Ok(Some(UnknownAgent::new(agent_type, known)))
    }

    /// Marks a worker process offline at once (it stopped cleanly): it no longer counts in
    /// `workers_online`, while its agent types stay known for a day.
    pub async fn worker_stopped(&self, tenant: &Tenant, worker_id: &str) -> Result<bool> {
        self.inner
            .presence
            .written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(tenant.as_str().to_string(), worker_id.to_string()));
        let offline_at =
            Timestamp(Timestamp::now().0 - WORKER_ONLINE_WITHIN.as_micros() as i64 - 1);
        let known = self
            .inner
            .store
            .worker_offline(tenant, worker_id, offline_at)
            .await?;
        if known {
            tracing::info!(
                worker = worker_id,
                tenant = tenant.as_str(),
                "worker stopped: offline"
            );
        }
        Ok(known)
    }

    /// Claims up to `slots` executions of these agent types for a worker process of this
    /// tenant, waiting up to `wait` for one to become runnable (woken at once by a message
    /// queued on any node). Each claim is announced (`execution.started`) before it is
    /// handed out.
    pub async fn claim_for_worker(
        &self,
        tenant: &Tenant,
        agent_types: Vec<String>,
        slots: usize,
        wait: Duration,
    ) -> Result<Vec<WorkerClaim>> {
        if slots == 0 {
            return Ok(Vec::new());
        }
        let filter = ClaimFilter {
            agent_types: Some(agent_types),
            tenant: Some(tenant.as_str().to_string()),
        };
        let deadline = Instant::now() + wait;
        let poll = self
            .inner
            .config
            .poll_interval
            .max(Duration::from_millis(100));
        loop {
            // Listening before looking: a message queued during the claim still wakes us.
            let bell = self.inner.worker_bell.notified();
            tokio::pin!(bell);
            bell.as_mut().enable();
            let claims = self.claim_leases(tenant, &filter, slots).await?;
            let now = Instant::now();
            if !claims.is_empty() || now >= deadline {
                return Ok(claims);
            }
            // Also look again now and then: leases of lost workers expire unannounced.
            let nap = (deadline - now).min(poll);
            tokio::select! {
                _ = &mut bell => {}
                _ = tokio::time::sleep(nap) => {}
                _ = self.inner.shutdown.cancelled() => return Ok(Vec::new()),
            }
        }
    }

    async fn claim_leases(
        &self,
        tenant: &Tenant,
        filter: &ClaimFilter,
        slots: usize,
    ) -> Result<Vec<WorkerClaim>> {
        let config = &self.inner.config;
        let mut tokens = Vec::with_capacity(slots);
        for _ in 0..slots {
            tokens.push(stepwise_core::apikey::generate_lease_token().map_err(|e| {
                StoreError::Backend(format!("no randomness for a lease token: {e}"))
            })?);
        }
        let claims = self
            .inner
            .store
            .claim_matching(filter, &tokens, config.lease, config.max_attempts)
            .await?;
        // Each claim's reads are its own: they run together, not one claim after another
        // (a worker that claims eight at once waited for eight rounds of reads), up to
        // HAND_OUT_AT_ONCE at a time so that a claim of many slots leaves the store's
        // connections to the writes waiting for them. The answer keeps the claim's order.
        let handed: Vec<Result<WorkerClaim>> = futures_util::stream::iter(
            claims
                .into_iter()
                .zip(tokens)
                .map(|(claim, token)| self.hand_out(tenant, claim, token)),
        )
        .buffered(HAND_OUT_AT_ONCE)
        .collect()
        .await;
        Ok(handed
            .into_iter()
            .filter_map(|handed| {
                handed
                    // Its lease runs out and the execution is claimed again.
                    .inspect_err(
                        |e| tracing::warn!(error = %e, "could not prepare a worker's claim"),
                    )
                    .ok()
            })
            .collect())
    }

    /// Loads what the claim's agent needs, records the user's answer as a step, and
    /// announces the run.
    async fn hand_out(&self, tenant: &Tenant, claim: Claim, lease: String) -> Result<WorkerClaim> {
        let store = &self.inner.store;
        let Claim {
            execution,
            resume_answer,
            ..
        } = claim;
        let lease_expires_at = lease_until(Timestamp::now(), self.inner.config.lease);
        // What the agent needs, read together: the session with its memory (the steps of
        // its executions, this one's among them) and the last snapshot.
        let session = async {
            match execution.session_id {
                Some(id) => session_with_memory(store, tenant, id).await,
                None => Ok(None),
            }
        };
        let snapshot = async {
            match execution.last_snapshot_id {
                Some(id) => store.get_snapshot(tenant, id).await,
                None => Ok(None),
            }
        };
        let (session, snapshot) = tokio::try_join!(session, snapshot)?;
        // Its own saved steps go as `steps`, the memory holds those before it.
        let (session, memory, mut steps) = match session {
            Some((session, mut memory)) => {
                let (own, before): (Vec<Step>, Vec<Step>) = std::mem::take(&mut memory.steps)
                    .into_iter()
                    .partition(|s| s.execution_id == execution.id);
                memory.steps = before;
                (Some(session), Some(memory), own)
            }
            // No session (or it is gone): the execution's steps alone.
            None => (
                None,
                None,
                store.list_steps(tenant, execution.id).await?.items,
            ),
        };
        if let Some(answer) = &resume_answer
            && steps.last().is_none_or(|s| s.kind != StepKind::UserInput)
        {
            let step_number = steps.last().map_or(1, |s| s.step_number + 1);
            let text = match answer {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let appended = store
                .append_step(
                    tenant,
                    NewStep {
                        execution_id: execution.id,
                        step_number,
                        kind: StepKind::UserInput,
                        body: StepBody {
                            observations: Some(text),
                            ..StepBody::default()
                        },
                    },
                )
                .await?
                .await?;
            if appended.created {
                self.announce_step(tenant, &execution, &appended.step).await;
            }
            steps.push(appended.step);
        }

        if execution.attempts > 1 && resume_answer.is_none() {
            tracing::warn!(
                execution = %execution.id,
                attempt = execution.attempts,
                agent = %execution.agent_type,
                saved_steps = steps.len(),
                "a worker takes the execution over: its previous lease expired (or its worker asked for a retry)"
            );
        }
        let text = match (steps.last(), &resume_answer) {
            (None, _) => "Execution started".to_string(),
            (Some(_), Some(_)) => "Execution resumed".to_string(),
            (Some(last), None) if execution.attempts > 1 => format!(
                "Worker lost: resuming from step {}, attempt {}",
                last.step_number + 1,
                execution.attempts
            ),
            (Some(_), None) => "Execution resumed".to_string(),
        };
        // A resumed pause said "Execution resumed" when the answer came.
        if execution.parent_execution_id.is_none()
            && resume_answer.is_none()
            && let Some(session_id) = execution.session_id
        {
            if !steps.is_empty() {
                // A take-over's or a hand-back's line is there when the claim is answered.
                self.say_status(tenant, session_id, execution.id, &text)
                    .await;
            } else {
                // Queued: it commits with the worker's first write (or the writer's next
                // batch), not as a wait of its own before the claim is answered.
                self.post_status(tenant, session_id, execution.id, &text)
                    .await;
            }
        }
        self.inner
            .publisher
            .emit(
                tenant,
                execution.session_id,
                Some(execution.id),
                EventType::ExecutionStarted,
                &text,
                json!({"attempt": execution.attempts, "lease_owner": "worker"}),
            )
            .await;
        Ok(WorkerClaim {
            attempt: execution.attempts.max(1),
            execution,
            session,
            lease,
            lease_expires_at,
            resume_answer,
            steps,
            memory,
            snapshot,
        })
    }

    /// Renews a worker's lease on an execution, or says the execution was cancelled; a
    /// lease that is no longer current is `LeaseLost`.
    pub async fn worker_heartbeat(
        &self,
        tenant: &Tenant,
        id: Id,
        lease: &str,
    ) -> Result<Heartbeat> {
        let execution = self.load_execution(tenant, id).await?;
        match self.renew(tenant, &execution, lease).await {
            Ok(lease_expires_at) => Ok(Heartbeat {
                lease_expires_at: Some(lease_expires_at),
                cancel_requested: false,
            }),
            Err(StoreError::LeaseLost(_))
                if self.load_execution(tenant, id).await?.status == ExecutionStatus::Cancelled =>
            {
                Ok(Heartbeat {
                    lease_expires_at: None,
                    cancel_requested: true,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// An execution an agent outside the server drives, checked for this write: `NotFound`
    /// when there is none; `InvalidState` when one of the server's agents runs it;
    /// `LeaseLost` when a worker's execution comes without its current lease (renewed
    /// here: it cannot run out during the write). An `external` execution needs no lease
    /// (a leased one is renewed by its write too, on the node that opened it).
    pub async fn driven_execution(
        &self,
        tenant: &Tenant,
        id: Id,
        lease: Option<&str>,
    ) -> Result<Execution> {
        let execution = self.load_execution(tenant, id).await?;
        if self.can_run(&execution.agent_type) {
            return Err(StoreError::InvalidState(format!(
                "this execution is run by the server's '{}' agent; only external and worker executions take steps over HTTP",
                execution.agent_type
            )));
        }
        match lease {
            Some(lease) => {
                self.keep_lease(tenant, &execution, lease).await?;
            }
            None if execution.agent_type == EXTERNAL_AGENT => {
                // A recorder from before leases: its write renews the lease this node
                // handed out, when it remembers it.
                let remembered = self.recorders().get(&execution.id).cloned();
                if let Some(token) = remembered
                    && execution.status == ExecutionStatus::Running
                {
                    self.keep_lease(tenant, &execution, &token).await?;
                }
            }
            None => {
                return Err(StoreError::LeaseLost(format!(
                    "this execution is run by a worker of agent '{}': send the lease of its claim in the Stepwise-Lease header",
                    execution.agent_type
                )));
            }
        }
        Ok(execution)
    }

    /// Live tokens of a worker's (or an external agent's) run: `message.delta` to the
    /// session's subscribers, never stored.
    pub fn publish_delta(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        text: &str,
        metadata: Value,
    ) {
        let Some(session_id) = execution.session_id else {
            return;
        };
        self.inner.store.publish_live(
            tenant,
            Event {
                id: 0,
                session_id,
                message_id: None,
                execution_id: Some(execution.id),
                event_type: EventType::MessageDelta,
                content: text.to_string(),
                metadata,
                timestamp: Timestamp::now(),
            },
        );
    }

    /// Hands a worker's execution back to the queue at once, without spending an attempt
    /// (the worker is shutting down); the next claim continues it from its saved steps.
    pub async fn release_for_worker(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        lease: &str,
    ) -> Result<Execution> {
        self.inner.store.release(lease, execution.id).await?;
        self.back_in_queue(
            tenant,
            execution,
            lease,
            "Worker stopped: the execution waits for the next worker",
            "Execution handed back to the queue",
        )
        .await
    }

    /// The agent of a worker's execution failed and asks for another try: back to the
    /// queue with this attempt counted (the next claim continues from its saved steps),
    /// or failed when the attempts are used up.
    pub async fn retry_for_worker(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        lease: &str,
        reason: String,
    ) -> Result<Execution> {
        let max = self.inner.config.max_attempts;
        if execution.attempts >= max {
            let reason = format!(
                "{reason} (attempt {} of {max}: no retries left)",
                execution.attempts
            );
            return self.fail_external(tenant, execution, reason).await;
        }
        self.inner.store.requeue(lease, execution.id).await?;
        let line = format!(
            "Agent error on attempt {}: {}; trying again",
            execution.attempts,
            stepwise_core::summary::cut_chars(&reason, 500)
        );
        self.back_in_queue(
            tenant,
            execution,
            lease,
            &line,
            "Execution queued again after an agent error",
        )
        .await
    }

    /// After a release or a requeue: the execution as it is now (`LeaseLost` when the
    /// lease was not current, so nothing moved), the session's line, the event and the
    /// doorbell. The move happened when the execution is pending, or running under another
    /// lease: a worker waiting for work claimed it at once. (The caller found `lease`
    /// current with most of it to run just before the move, so no take-over came between.)
    async fn back_in_queue(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        lease: &str,
        line: &str,
        event: &str,
    ) -> Result<Execution> {
        let now = self.load_execution(tenant, execution.id).await?;
        let moved = match now.status {
            ExecutionStatus::Pending => true,
            ExecutionStatus::Running => self
                .inner
                .store
                .lease_expiry(lease, now.id)
                .await?
                .is_none(),
            _ => false,
        };
        if !moved {
            return Err(StoreError::LeaseLost(lost_reason(&now)));
        }
        if let Some(session_id) = now.session_id
            && now.parent_execution_id.is_none()
        {
            self.say_status(tenant, session_id, now.id, line).await;
        }
        self.inner
            .publisher
            .emit(
                tenant,
                now.session_id,
                Some(now.id),
                EventType::ExecutionQueued,
                event,
                json!({"attempt": now.attempts}),
            )
            .await;
        self.ring();
        Ok(now)
    }

    async fn load_execution(&self, tenant: &Tenant, id: Id) -> Result<Execution> {
        self.inner
            .store
            .get_execution(tenant, id)
            .await?
            .ok_or(StoreError::NotFound("execution"))
    }

    /// Checks that `lease` is the execution's current one for a write carrying it
    /// (`LeaseLost` with the reason when not), renewing it only once a third of it has run
    /// since its last renewal (as often as a heartbeat renews it): an agent writing steps
    /// back to back commits a renewal now and then, not one per write. The check is a read;
    /// a lease it finds current has at least two thirds of its length to run, so it cannot
    /// run out during the write.
    async fn keep_lease(&self, tenant: &Tenant, execution: &Execution, lease: &str) -> Result<()> {
        let length = self.inner.config.lease;
        let fresh_until = lease_until(Timestamp::now(), length * 2 / 3);
        let expiry = self.inner.store.lease_expiry(lease, execution.id).await?;
        if expiry.is_some_and(|until| until.0 >= fresh_until.0) {
            return Ok(());
        }
        self.renew(tenant, execution, lease).await.map(|_| ())
    }

    /// Renews `lease` on the execution; `LeaseLost` with the reason when it is not current.
    async fn renew(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        lease: &str,
    ) -> Result<Timestamp> {
        let lease_s = self.inner.config.lease;
        let until = lease_until(Timestamp::now(), lease_s);
        let lost = self
            .inner
            .store
            .renew_leases(lease, vec![execution.id], lease_s)
            .await?;
        if lost.is_empty() {
            return Ok(until);
        }
        let now = self.load_execution(tenant, execution.id).await?;
        Err(StoreError::LeaseLost(lost_reason(&now)))
    }
}

/// Why a lease is not current, from the execution as it is now.
fn lost_reason(execution: &Execution) -> String {
    match execution.status {
        ExecutionStatus::Cancelled => "the execution was cancelled: stop its agent".into(),
        ExecutionStatus::Paused => {
            "the execution is paused for the user's answer: its next claim continues it".into()
        }
        ExecutionStatus::Pending => {
            "the execution went back to the queue: its next claim continues it".into()
        }
        ExecutionStatus::Running => format!(
            "this is not the execution's current lease (attempt {} holds it: the lease expired and was taken over, or it was never this execution's)",
            execution.attempts
        ),
        status => format!("the execution is already {status}"),
    }
}

/// An agent type no one runs, and the names a user may have meant.
#[derive(Debug, Clone, PartialEq)]
pub struct UnknownAgent {
    /// The known agent types closest to the name, closest first (empty: none is close).
    pub closest: Vec<String>,
    /// Every known agent type (built-in ones and those announced in the last day), sorted.
    pub known: Vec<String>,
}

impl UnknownAgent {
    /// The known agent types close to `name`: a small edit away, or one a prefix of the other.
    pub fn new(name: &str, mut known: Vec<String>) -> Self {
        known.sort();
        let lower = name.to_lowercase();
        let mut scored: Vec<(usize, &String)> = known
            .iter()
            .filter_map(|k| {
                let distance = edit_distance(&lower, &k.to_lowercase());
                let close = distance <= (name.chars().count() / 3).max(2)
                    || k.to_lowercase().starts_with(&lower)
                    || lower.starts_with(&k.to_lowercase());
                close.then_some((distance, k))
            })
            .collect();
        scored.sort();
        let closest = scored.into_iter().take(3).map(|(_, k)| k.clone()).collect();
        UnknownAgent { closest, known }
    }
}

/// The Levenshtein distance of two names (at most 64 characters each).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Whether a worker announced this agent type.
fn serves(worker: &WorkerSeen, agent_type: &str) -> bool {
    worker.agents.as_array().is_some_and(|agents| {
        agents
            .iter()
            .any(|a| a.get("type").and_then(Value::as_str) == Some(agent_type))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_misspelled_agent_type_suggests_the_closest_known_names() {
        let known = names(&["demo", "greeter", "planner", "researcher"]);
        let unknown = UnknownAgent::new("greeterr", known.clone());
        assert_eq!(unknown.closest, names(&["greeter"]));
        assert_eq!(
            UnknownAgent::new("Planer", known.clone()).closest,
            names(&["planner"])
        );
        assert_eq!(
            UnknownAgent::new("research", known.clone()).closest,
            names(&["researcher"])
        );
        let far = UnknownAgent::new("accountant", known);
        assert!(far.closest.is_empty(), "{:?}", far.closest);
        assert_eq!(
            far.known,
            names(&["demo", "greeter", "planner", "researcher"])
        );
    }

    #[test]
    fn edit_distance_counts_insertions_deletions_and_substitutions() {
        assert_eq!(edit_distance("greeter", "greeter"), 0);
        assert_eq!(edit_distance("greeterr", "greeter"), 1);
        assert_eq!(edit_distance("gretter", "greeter"), 1);
        assert_eq!(edit_distance("grteeer", "greeter"), 2);
        assert_eq!(edit_distance("", "demo"), 4);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
