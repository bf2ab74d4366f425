//! Retention in the files backend: marking stale sessions abandoned, and deleting expired
//! sessions with their files.

use stepwise_core::{ExecutionStatus, Id, SessionStatus, Timestamp};
use stepwise_store::rules::is_stale;
use stepwise_store::{CleanupReport, Result, RetentionPolicy};

use crate::FileStore;
use crate::disk::stem_of;
use crate::state::{Container, Key};
use stepwise_store::RetentionLock;

/// What deleting this session removes, counted like the SQL backends count rows.
fn container_report(container: &Container) -> CleanupReport {
    CleanupReport {
        sessions: 1,
        messages: container.messages.len() as u64,
        executions: container.executions.len() as u64,
        steps: container
            .executions
            .iter()
            .map(|e| e.steps.len() as u64)
            .sum::<u64>()
            + container.orphan_damaged_steps(),
        snapshots: container.snapshots.len() as u64,
        events: container.events.len() as u64,
    }
}

impl stepwise_store::RetentionStore for FileStore {
    async fn mark_abandoned(&self, cutoff: Timestamp, dry: bool) -> Result<u64> {
        let now = self.now();
        let ack = {
            let mut state = self.lock();
            let stale: Vec<Key> = state
                .tenants
                .iter()
                .flat_map(|(tenant, ts)| {
                    ts.sessions.iter().filter_map(move |(id, c)| {
                        let s = c.session.as_ref()?;
                        is_stale(s, cutoff).then(|| Key {
                            tenant: tenant.clone(),
                            session: Some(*id),
                        })
                    })
                })
                .collect();
            let count = stale.len() as u64;
            if dry {
                return Ok(count);
            }
            for key in &stale {
                let Some(container) = state.container_mut(key) else {
                    continue;
                };
                for entry in &mut container.executions {
                    let e = &mut entry.execution;
                    if e.status == ExecutionStatus::Paused {
                        e.status = ExecutionStatus::Cancelled;
                        e.completed_at = Some(now);
                        e.updated_at = now;
                        entry.lease = None;
                        e.lease_expires_at = None;
                        entry.resume_answer = None;
                    }
                }
                if let Some(session) = container.session.as_mut() {
                    session.status = SessionStatus::Abandoned;
                    session.updated_at = now;
                }
                state.touch(key, true);
            }
            self.enqueue(&mut state, count)
        };
        ack.await
    }

    async fn cleanup_old_sessions(
        &self,
        now: Timestamp,
        policy: RetentionPolicy,
        dry: bool,
    ) -> Result<CleanupReport> {
        let ack = {
            let mut state = self.lock();
            let cutoffs = policy.cutoffs(now);
            let doomed: Vec<(String, Id)> = state
                .tenants
                .iter()
                .flat_map(|(tenant, ts)| {
                    ts.sessions.iter().filter_map(move |(id, c)| {
                        let s = c.session.as_ref()?;
                        cutoffs.is_expired(s).then(|| (tenant.clone(), *id))
                    })
                })
                .collect();
            let mut total = CleanupReport::default();
            for (tenant, id) in &doomed {
                if let Some(container) = state.session(tenant, *id) {
                    total.add(container_report(container));
                }
            }
            if dry {
                return Ok(total);
            }
            for (tenant, id) in doomed {
                let Some(ts) = state.tenants.get_mut(&tenant) else {
                    continue;
                };
                let Some(container) = ts.sessions.remove(&id) else {
                    continue;
                };
                let stem = container.session.as_ref().map(stem_of);
                if let Some(name) = container.session.as_ref().and_then(|s| s.name.clone()) {
                    ts.names.remove(&name);
                }
                if let Some(stem) = &stem {
                    ts.stems.remove(stem);
                }
                for e in &container.executions {
                    state.executions.remove(&e.execution.id);
                }
                for s in &container.snapshots {
                    state.snapshots.remove(&s.id);
                }
                if let Some(stem) = stem {
                    state.pending.removals.push((tenant.clone(), stem));
                }
                state.pending.index_dirty.insert(tenant);
            }
            if total.sessions > 0 {
                tracing::info!(?total, "retention cleanup deleted expired sessions");
            }
            self.enqueue(&mut state, total)
        };
        ack.await
    }

    async fn try_retention_lock(&self) -> Result<Option<RetentionLock>> {
        // One process at a time uses the folder.
        Ok(Some(RetentionLock::local()))
    }
}
