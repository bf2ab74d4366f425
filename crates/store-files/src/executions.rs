//! Executions in the files backend: create, read and transition (the queue that claims them
//! is `queue.rs`).

use stepwise_core::{Execution, Id};
use stepwise_store::rules::{check_transition, removal_set};
use stepwise_store::{IfBusy, NewExecution, Result, StoreError, Tenant, Transition};

use crate::state::{ExecEntry, Key, Lease};
use crate::{FileStore, check_depth, tenant_state};
use stepwise_core::Message;
use stepwise_store::NewEvent;
use stepwise_store::NewMessage;

impl stepwise_store::ExecutionStore for FileStore {
    /// Separate writes in order: the files backend has no transaction across files.
    async fn create_execution_with_messages(
        &self,
        tenant: &Tenant,
        new: NewExecution,
        messages: Vec<NewMessage>,
        events: Vec<NewEvent>,
        if_busy: IfBusy,
    ) -> Result<(Execution, Vec<Message>)> {
        let _refusing = match if_busy {
            IfBusy::Refuse => Some(self.inner.refusing.lock().await),
            IfBusy::Queue => None,
        };
        stepwise_store::separately::create_execution_with_messages(
            self, tenant, new, messages, events, if_busy,
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

    async fn remove_executions(
        &self,
        tenant: &Tenant,
        session_id: Id,
        ids: Vec<Id>,
    ) -> Result<u64> {
        let now = self.now();
        let ack = {
            let mut state = self.lock();
            let Some(container) = state.session_mut(tenant.as_str(), session_id) else {
                return Ok(0);
            };
            let executions: Vec<Execution> = container
                .executions
                .iter()
                .map(|e| e.execution.clone())
                .collect();
            let (gone, last_root) = removal_set(&executions, &ids)?;
            if gone.is_empty() {
                return Ok(0);
            }
            let went = |id: &Option<Id>| id.is_some_and(|id| gone.contains(&id));
            container
                .executions
                .retain(|e| !gone.contains(&e.execution.id));
            let dropped_snapshots: Vec<Id> = container
                .snapshots
                .iter()
                .filter(|s| gone.contains(&s.execution_id))
                .map(|s| s.id)
                .collect();
            container
                .snapshots
                .retain(|s| !gone.contains(&s.execution_id));
            container.messages.retain(|m| !went(&m.execution_id));
            container.events.retain(|e| !went(&e.execution_id));
            let remaining_roots: Vec<Id> = container
                .executions
                .iter()
                .filter(|e| e.execution.parent_execution_id.is_none())
                .map(|e| e.execution.id)
                .collect();
            let newest_snapshot = container
                .snapshots
                .iter()
                .filter(|s| remaining_roots.contains(&s.execution_id))
                .max_by_key(|s| (s.created_at, s.id))
                .map(|s| s.id);
            let message_count = container.messages.len() as u64;
            if let Some(session) = container.session.as_mut() {
                session.last_execution_id = last_root;
                if went_snapshot(session.last_snapshot_id, &dropped_snapshots) {
                    session.last_snapshot_id = newest_snapshot;
                }
                session.message_count = message_count;
                session.updated_at = now;
            }
            for id in &gone {
                state.executions.remove(id);
            }
            for id in &dropped_snapshots {
                state.snapshots.remove(id);
            }
            let key = Key {
                tenant: tenant.as_str().to_string(),
                session: Some(session_id),
            };
            state.touch(&key, true);
            self.enqueue(&mut state, gone.len() as u64)
        };
        ack.await
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

/// Whether the session's last snapshot is one of those removed.
fn went_snapshot(last: Option<Id>, dropped: &[Id]) -> bool {
    last.is_some_and(|id| dropped.contains(&id))
}
