//! Retention in the files backend: marking stale sessions abandoned, and deleting expired
//! sessions with their files.

use std::collections::BTreeMap;
use stepwise_core::{ExecutionStatus, Id, SessionStatus, Timestamp};
use stepwise_store::rules::is_stale;

use stepwise_store::{
    CleanupReport, Result, RetentionOverride, RetentionPolicy, StoreError, Tenant, TenantScope,
};

use crate::FileStore;
use crate::disk::stem_of;
use crate::state::{Container, Key};
use stepwise_store::RetentionLock;

impl FileStore {
    /// The tenants' own retentions: `.tenant-retention` (JSON) in the store's folder, a
    /// name the loader passes over.
    fn retention_file(&self) -> std::path::PathBuf {
        self.dir().join(".tenant-retention")
    }
}

/// The tenants' own retentions in `path` (none when it does not exist).
fn read_retentions(path: &std::path::Path) -> Result<BTreeMap<String, RetentionOverride>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            StoreError::Backend(format!("{} is not a retention file: {e}", path.display()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(StoreError::Backend(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}

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
    async fn mark_abandoned(
        &self,
        cutoff: Timestamp,
        dry: bool,
        scope: TenantScope,
    ) -> Result<u64> {
        let now = self.now();
        let ack = {
            let mut state = self.lock();
            let stale: Vec<Key> = state
                .tenants
                .iter()
                .filter(|(tenant, _)| scope.covers(tenant))
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
        scope: TenantScope,
    ) -> Result<CleanupReport> {
        let ack = {
            let mut state = self.lock();
            let cutoffs = policy.cutoffs(now);
            let doomed: Vec<(String, Id)> = state
                .tenants
                .iter()
                .filter(|(tenant, _)| scope.covers(tenant))
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

    async fn tenant_retentions(&self) -> Result<Vec<(String, RetentionOverride)>> {
        let _held = self.lock();
        Ok(read_retentions(&self.retention_file())?
            .into_iter()
            .collect())
    }

    async fn set_tenant_retention(
        &self,
        tenant: &Tenant,
        retention: Option<RetentionOverride>,
    ) -> Result<()> {
        // Under the store's lock: one writer of the file at a time.
        let _held = self.lock();
        let path = self.retention_file();
        let mut all = read_retentions(&path)?;
        match retention {
            Some(retention) => all.insert(tenant.as_str().to_string(), retention),
            None => all.remove(tenant.as_str()),
        };
        let text =
            serde_json::to_vec_pretty(&all).map_err(|e| StoreError::Backend(e.to_string()))?;
        let temp = path.with_extension("tmp");
        std::fs::write(&temp, text)
            .and_then(|()| std::fs::rename(&temp, &path))
            .map_err(|e| StoreError::Backend(format!("cannot write {}: {e}", path.display())))
    }

    async fn try_retention_lock(&self) -> Result<Option<RetentionLock>> {
        // One process at a time uses the folder.
        Ok(Some(RetentionLock::local()))
    }
}
