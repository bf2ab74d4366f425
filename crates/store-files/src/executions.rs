//! Executions in the files backend, with the queue the workers claim them from: create,
//! read, transition, and claim / renew / release leases.

use std::time::Duration;

use stepwise_core::{Execution, ExecutionStatus, Id, Timestamp};
use stepwise_store::rules::{
    attempts_exhausted, check_transition, gave_up_message, lease_expired, lease_until,
};
use stepwise_store::{Claim, ClaimFilter, NewExecution, Result, StoreError, Tenant, Transition};

use crate::state::{ExecEntry, Key, Lease};
use crate::{FileStore, check_depth, tenant_state};
use stepwise_core::Message;
use stepwise_store::NewEvent;
use stepwise_store::NewMessage;
use stepwise_store::WorkerSeen;

impl FileStore {
    pub(crate) async fn queue_claim_next(
        &self,
        filter: &ClaimFilter,
        worker: &str,
        lease: Duration,
        max_attempts: u32,
    ) -> Result<Option<Claim>> {
        let now = self.now();
        let until = lease_until(now, lease);
        let ack = {
            let mut state = self.lock();
            // Running executions whose worker stopped renewing its lease, oldest first.
            let mut stale: Vec<(Timestamp, Id, Key)> = state
                .all_executions()
                .filter(|(k, e)| {
                    e.execution.status == ExecutionStatus::Running
                        && filter.allows(&k.tenant, &e.execution.agent_type)
                        && e.lease
                            .as_ref()
                            .is_some_and(|l| lease_expired(l.expires_at, now))
                })
                .map(|(k, e)| (e.execution.created_at, e.execution.id, k.clone()))
                .collect();
            stale.sort_by_key(|x| (x.0, x.1));
            let mut claimed: Option<Claim> = None;
            for (_, id, key) in stale {
                let Some((_, entry)) = state.exec_mut(&key.tenant, id) else {
                    continue;
                };
                let e = &mut entry.execution;
                entry.lease = None;
                e.lease_expires_at = None;
                if attempts_exhausted(e.attempts, max_attempts) {
                    tracing::warn!(execution = %id, attempts = e.attempts, "failing an execution whose workers kept stopping");
                    e.status = ExecutionStatus::Failed;
                    e.error_message = Some(gave_up_message(e.attempts));
                    e.completed_at = Some(now);
                    e.updated_at = now;
                    state.touch(&key, false);
                    continue;
                }
                entry.lease = Some(Lease {
                    owner: worker.to_string(),
                    expires_at: until,
                });
                e.lease_expires_at = Some(until);
                e.attempts += 1;
                e.updated_at = now;
                claimed = Some(Claim {
                    execution: e.clone(),
                    tenant: Tenant::new(key.tenant.clone())?,
                    resume_answer: None,
                });
                state.touch(&key, false);
                break;
            }
            if claimed.is_none() {
                // The oldest pending execution of a session with nothing running and no
                // older pending one; executions without a session never wait.
                let mut pending: Vec<(Timestamp, Id, Key)> = state
                    .all_executions()
                    .filter(|(k, e)| {
                        e.execution.status == ExecutionStatus::Pending
                            && filter.allows(&k.tenant, &e.execution.agent_type)
                    })
                    .map(|(k, e)| (e.execution.created_at, e.execution.id, k.clone()))
                    .collect();
                pending.sort_by_key(|x| (x.0, x.1));
                for (created_at, id, key) in pending {
                    // A pending subagent (a worker agent's) runs while its parent runs.
                    let subagent = state
                        .exec(&key.tenant, id)
                        .is_some_and(|(_, e)| e.execution.parent_execution_id.is_some());
                    if let Some(session) = key.session.filter(|_| !subagent) {
                        let Some(container) = state.session(&key.tenant, session) else {
                            continue;
                        };
                        let blocked = container.executions.iter().any(|o| {
                            o.execution.session_id == Some(session)
                                && (o.execution.status == ExecutionStatus::Running
                                    || (o.execution.status == ExecutionStatus::Pending
                                        && o.execution.parent_execution_id.is_none()
                                        && (o.execution.created_at, o.execution.id)
                                            < (created_at, id)))
                        });
                        if blocked {
                            continue;
                        }
                    }
                    let Some((_, entry)) = state.exec_mut(&key.tenant, id) else {
                        continue;
                    };
                    let e = &mut entry.execution;
                    e.status = ExecutionStatus::Running;
                    e.attempts += 1;
                    e.started_at.get_or_insert(now);
                    e.updated_at = now;
                    entry.lease = Some(Lease {
                        owner: worker.to_string(),
                        expires_at: until,
                    });
                    entry.execution.lease_expires_at = Some(until);
                    let resume_answer = entry.resume_answer.take();
                    claimed = Some(Claim {
                        execution: entry.execution.clone(),
                        tenant: Tenant::new(key.tenant.clone())?,
                        resume_answer,
                    });
                    state.touch(&key, false);
                    break;
                }
            }
            self.enqueue(&mut state, claimed)
        };
        ack.await
    }

    /// Back to the queue; `keep_attempt` counts the attempt it was claimed with.
    pub(crate) async fn queue_release(
        &self,
        worker: &str,
        id: Id,
        keep_attempt: bool,
    ) -> Result<()> {
        let now = self.now();
        let ack = {
            let mut state = self.lock();
            let Some(key) = state.executions.get(&id).cloned() else {
                return Ok(());
            };
            let Some((_, entry)) = state.exec_mut(&key.tenant, id) else {
                return Ok(());
            };
            let held = entry.execution.status == ExecutionStatus::Running
                && entry.lease.as_ref().is_some_and(|l| l.owner == worker);
            if !held {
                return Ok(());
            }
            entry.lease = None;
            let e = &mut entry.execution;
            e.lease_expires_at = None;
            e.status = ExecutionStatus::Pending;
            if !keep_attempt {
                e.attempts = e.attempts.saturating_sub(1);
            }
            e.updated_at = now;
            state.touch(&key, false);
            self.enqueue(&mut state, ())
        };
        ack.await
    }
}

impl stepwise_store::ExecutionStore for FileStore {
    /// Separate writes in order: the files backend has no transaction across files.
    async fn create_execution_with_messages(
        &self,
        tenant: &Tenant,
        new: NewExecution,
        messages: Vec<NewMessage>,
        events: Vec<NewEvent>,
    ) -> Result<(Execution, Vec<Message>)> {
        stepwise_store::separately::create_execution_with_messages(
            self, tenant, new, messages, events,
        )
        .await
    }

    async fn create_execution(&self, tenant: &Tenant, new: NewExecution) -> Result<Execution> {
        check_depth("input", [&new.input, &new.agent_config, &new.metadata])?;
        let now = self.now();
        let lease_owner = new.lease.as_ref().map(|l| l.owner.clone());
        let execution = new.into_execution(tenant, now)?;
        let ack = {
            let mut state = self.lock();
            let now = self.now();
            let execution = Execution {
                started_at: execution.started_at.map(|_| now),
                created_at: now,
                updated_at: now,
                ..execution
            };
            if let Some(session_id) = execution.session_id
                && state.session(tenant.as_str(), session_id).is_none()
            {
                return Err(StoreError::NotFound("session"));
            }
            if let Some(parent) = execution.parent_execution_id
                && state.exec(tenant.as_str(), parent).is_none()
            {
                return Err(StoreError::NotFound("parent execution"));
            }
            let root = self.inner.shared.root.clone();
            let ts = tenant_state(&mut state, &root, tenant.as_str());
            let Some(container) = ts.container_mut(execution.session_id) else {
                return Err(StoreError::NotFound("session"));
            };
            let lease = lease_owner
                .zip(execution.lease_expires_at)
                .map(|(owner, expires_at)| Lease { owner, expires_at });
            container.executions.push(ExecEntry {
                execution: execution.clone(),
                steps: Default::default(),
                lease,
                resume_answer: None,
            });
            if let Some(session) = container.session.as_mut() {
                session.last_execution_id = Some(execution.id);
                session.updated_at = now;
                crate::state::reactivate(session, now);
            }
            let key = Key {
                tenant: tenant.as_str().to_string(),
                session: execution.session_id,
            };
            state.executions.insert(execution.id, key.clone());
            state.touch(&key, true);
            self.enqueue(&mut state, execution)
        };
        ack.await
    }

    async fn get_execution(&self, tenant: &Tenant, id: Id) -> Result<Option<Execution>> {
        Ok(self
            .lock()
            .exec(tenant.as_str(), id)
            .map(|(_, e)| e.execution.clone()))
    }

    async fn list_executions(&self, tenant: &Tenant, session_id: Id) -> Result<Vec<Execution>> {
        let state = self.lock();
        let Some(container) = state.session(tenant.as_str(), session_id) else {
            return Ok(Vec::new());
        };
        Ok(container
            .executions
            .iter()
            .map(|e| e.execution.clone())
            .collect())
    }

    async fn transition_execution(
        &self,
        tenant: &Tenant,
        id: Id,
        transition: Transition,
    ) -> Result<Execution> {
        match &transition {
            Transition::Resume { answer } => check_depth("answer", [answer])?,
            Transition::Complete { output } => check_depth("output", [output])?,
            _ => {}
        }
        let now = self.now();
        let ack = {
            let mut state = self.lock();
            let Some((key, entry)) = state.exec_mut(tenant.as_str(), id) else {
                return Err(StoreError::NotFound("execution"));
            };
            check_transition(entry.execution.status, &transition)?;
            let target = transition.target();
            let e = &mut entry.execution;
            e.status = target;
            entry.resume_answer = None;
            match transition {
                // The claim ended with the worker pausing: not an interruption.
                Transition::Pause { .. } => e.attempts = 0,
                Transition::Resume { answer } => entry.resume_answer = Some(answer),
                Transition::Complete { output } => {
                    e.output = output;
                    e.completed_at.get_or_insert(now);
                }
                Transition::Fail { error_message } => {
                    e.error_message = Some(error_message);
                    e.completed_at.get_or_insert(now);
                }
                Transition::Cancel => {
                    e.completed_at.get_or_insert(now);
                }
            }
            entry.lease = None;
            e.lease_expires_at = None;
            e.updated_at = now;
            let execution = e.clone();
            state.touch(&key, false);
            self.enqueue(&mut state, execution)
        };
        ack.await
    }
}

impl stepwise_store::QueueStore for FileStore {
    async fn claim_matching(
        &self,
        filter: &ClaimFilter,
        workers: &[String],
        lease: Duration,
        max_attempts: u32,
    ) -> Result<Vec<Claim>> {
        let mut claims = Vec::with_capacity(workers.len());
        for worker in workers {
            match self
                .queue_claim_next(filter, worker, lease, max_attempts)
                .await
            {
                Ok(Some(claim)) => claims.push(claim),
                Ok(None) => break,
                Err(e) if claims.is_empty() => return Err(e),
                Err(e) => {
                    tracing::warn!(worker, error = %e, "claiming work failed after some claims");
                    break;
                }
            }
        }
        Ok(claims)
    }

    async fn record_worker(&self, tenant: &Tenant, worker: WorkerSeen) -> Result<()> {
        let forget_before =
            worker.last_seen_at.0 - stepwise_store::rules::FORGET_WORKERS_AFTER.as_micros() as i64;
        let mut workers = self
            .inner
            .shared
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        workers.retain(|_, w| w.last_seen_at.0 >= forget_before);
        let key = (tenant.as_str().to_string(), worker.worker_id.clone());
        // The newer call wins, never the other way round.
        if workers
            .get(&key)
            .is_none_or(|known| known.last_seen_at <= worker.last_seen_at)
        {
            workers.insert(key, worker);
        }
        Ok(())
    }

    async fn worker_offline(
        &self,
        tenant: &Tenant,
        worker_id: &str,
        at: Timestamp,
    ) -> Result<bool> {
        let mut workers = self
            .inner
            .shared
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let key = (tenant.as_str().to_string(), worker_id.to_string());
        Ok(workers
            .get_mut(&key)
            .map(|worker| worker.last_seen_at = at)
            .is_some())
    }

    async fn list_workers(&self, tenant: &Tenant, since: Timestamp) -> Result<Vec<WorkerSeen>> {
        let workers = self
            .inner
            .shared
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut seen: Vec<WorkerSeen> = workers
            .iter()
            .filter(|((t, _), w)| t == tenant.as_str() && w.last_seen_at >= since)
            .map(|(_, w)| w.clone())
            .collect();
        seen.sort_by(|a, b| {
            b.last_seen_at
                .cmp(&a.last_seen_at)
                .then_with(|| a.worker_id.cmp(&b.worker_id))
        });
        Ok(seen)
    }

    async fn renew_leases(&self, worker: &str, ids: Vec<Id>, lease: Duration) -> Result<Vec<Id>> {
        let until = lease_until(self.now(), lease);
        let mut state = self.lock();
        let mut lost = Vec::new();
        for id in ids {
            let key = state.executions.get(&id).cloned();
            let held = key.as_ref().and_then(|key| {
                let (_, entry) = state.exec_mut(&key.tenant, id)?;
                let lease = entry.lease.as_mut()?;
                if entry.execution.status != ExecutionStatus::Running || lease.owner != worker {
                    return None;
                }
                lease.expires_at = until;
                entry.execution.lease_expires_at = Some(until);
                Some(())
            });
            match (held, key) {
                // Written with the next batch: an older deadline on disk only means a
                // crashed process's work is taken over sooner.
                (Some(()), Some(key)) => state.touch(&key, false),
                _ => lost.push(id),
            }
        }
        if !state.pending.dirty.is_empty() {
            self.inner.shared.wake.notify_one();
        }
        Ok(lost)
    }

    async fn release(&self, worker: &str, id: Id) -> Result<()> {
        self.queue_release(worker, id, false).await
    }

    async fn requeue(&self, worker: &str, id: Id) -> Result<()> {
        self.queue_release(worker, id, true).await
    }

    async fn queue_depth(&self) -> Result<u64> {
        Ok(self
            .lock()
            .all_executions()
            .filter(|(_, e)| e.execution.status == ExecutionStatus::Pending)
            .count() as u64)
    }
}
