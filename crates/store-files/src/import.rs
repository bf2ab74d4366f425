//! Importing a session document into the files backend: planned by
//! [`ImportPlan`](stepwise_store::rules::ImportPlan), checked against what a session file can
//! hold, then laid out as one session in memory and written like any other change.

use stepwise_core::document::{DocumentLimits, validate_document};
use stepwise_core::{Session, SessionDocument};
use stepwise_store::rules::{ImportPlan, name_taken};
use stepwise_store::{Result, StoreError, Tenant};

use crate::disk::stem_of;
use crate::sessions::stem_free;
use crate::state::{Container, ExecEntry, Key, StoredStep};
use crate::{FileStore, check_depth, tenant_state};

impl FileStore {
    pub(crate) async fn import_document_as_session(
        &self,
        tenant: &Tenant,
        user_id: &str,
        doc: SessionDocument,
    ) -> Result<Session> {
        if doc.thread.is_some() {
            return Err(StoreError::InvalidState(
                "this document carries a LangGraph thread's checkpoints; checkpoints need the SQLite or PostgreSQL backend".into(),
            ));
        }
        validate_document(&doc, &DocumentLimits::default()).map_err(|e| StoreError::Invalid {
            field: Some("document"),
            message: e.to_string(),
        })?;
        check_depth("session", [&doc.session.metadata])?;
        check_depth("messages", doc.messages.iter().map(|m| &m.metadata))?;
        check_depth(
            "executions",
            doc.executions
                .iter()
                .flat_map(|e| [&e.agent_config, &e.input, &e.output, &e.metadata]),
        )?;
        check_depth(
            "steps",
            doc.steps.iter().flat_map(|s| {
                std::iter::once(&s.output).chain(s.tool_calls.iter().map(|c| &c.arguments))
            }),
        )?;
        check_depth("snapshots", doc.snapshots.iter().map(|s| &s.state))?;
        let container = container_of(ImportPlan::new(tenant, user_id, doc, self.now())?);
        let Some(session) = container.session.clone() else {
            return Err(StoreError::invalid(
                "session",
                "the document has no session",
            ));
        };
        let ack = {
            let mut state = self.lock();
            let root = self.inner.shared.root.clone();
            crate::sessions::release_deleted_name(
                &mut state,
                &root,
                tenant.as_str(),
                session.name.as_deref(),
            );
            let ts = tenant_state(&mut state, &root, tenant.as_str());
            if let Some(name) = &session.name
                && ts.names.contains_key(name)
            {
                return Err(name_taken(Some(name)));
            }
            let stem = stem_of(&session);
            stem_free(ts, &stem, session.id)?;
            if let Some(name) = &session.name {
                ts.names.insert(name.clone(), session.id);
            }
            ts.stems.insert(stem, session.id);
            let key = Key {
                tenant: tenant.as_str().to_string(),
                session: Some(session.id),
            };
            for e in &container.executions {
                state.executions.insert(e.execution.id, key.clone());
            }
            for s in &container.snapshots {
                state.snapshots.insert(s.id, key.clone());
            }
            let root = self.inner.shared.root.clone();
            tenant_state(&mut state, &root, tenant.as_str())
                .sessions
                .insert(session.id, container);
            state.touch(&key, true);
            self.enqueue(&mut state, session)
        };
        ack.await
    }
}

/// The planned session laid out as this store keeps a session in memory (the plan has
/// already put messages, executions and snapshots in order).
fn container_of(plan: ImportPlan) -> Container {
    let doc = plan.doc;
    let mut executions: Vec<ExecEntry> = doc
        .executions
        .into_iter()
        .map(|execution| ExecEntry {
            // No worker holds an imported execution.
            execution: stepwise_core::Execution {
                lease_expires_at: None,
                ..execution
            },
            steps: Default::default(),
            lease: None,
            resume_answer: None,
        })
        .collect();
    for step in doc.steps {
        if let Some(entry) = executions
            .iter_mut()
            .find(|e| e.execution.id == step.execution_id)
        {
            entry
                .steps
                .insert(step.step_number, StoredStep::Decoded(step));
        }
    }
    // What the messages say, not what the document claims.
    let first_message = doc
        .messages
        .iter()
        .find(|m| m.role == stepwise_core::Role::User)
        .map(|m| crate::messages::first_message_of(&m.content));
    Container {
        session: Some(stepwise_core::Session {
            first_message,
            ..doc.session
        }),
        messages: doc.messages,
        executions,
        snapshots: doc.snapshots,
        ..Container::default()
    }
}
