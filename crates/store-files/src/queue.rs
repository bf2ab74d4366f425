//! The queue in the files backend: claims (an expired lease first, else the oldest pending
//! execution of a session with nothing running), lease renewal, release and requeue, worker
//! presence, and the queue's depth.

use std::time::Duration;

use stepwise_core::{ExecutionStatus, Id, Timestamp};
use stepwise_store::rules::{attempts_exhausted, gave_up_message, lease_expired, lease_until};
use stepwise_store::{Claim, ClaimFilter, Result, Tenant};

use crate::FileStore;
use crate::state::{Key, Lease};

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

    async fn lease_expiry(&self, worker: &str, id: Id) -> Result<Option<Timestamp>> {
        let state = self.lock();
        let Some(key) = state.executions.get(&id) else {
            return Ok(None);
        };
        Ok(state.exec(&key.tenant, id).and_then(|(_, entry)| {
            let lease = entry.lease.as_ref()?;
            (entry.execution.status == ExecutionStatus::Running && lease.owner == worker)
                .then_some(lease.expires_at)
        }))
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

    /// One process owns the folder: its runners hear of new work from the in-process
    /// doorbell, never from here.
    async fn queue_signal(&self) {
        std::future::pending().await
    }
}
