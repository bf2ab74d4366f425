//! Importing a session document, up to the writes: the document re-keyed into the
//! importing tenant, its LangGraph thread turned into rows, its records in the order they
//! are stored. A backend only writes what the plan holds, in one transaction.

use stepwise_core::codec;
use stepwise_core::{SessionDocument, Timestamp};

use crate::checkpoints::{ThreadRows, thread_rows};
use crate::{Result, Tenant, rekey_document};

/// A document ready to be written as a new session.
#[derive(Debug, Clone)]
pub struct ImportPlan {
    /// The re-keyed document ([`rekey_document`]), with `thread` taken out of it and
    /// messages, executions and snapshots oldest first (creation time, then id).
    pub doc: SessionDocument,
    /// The document's LangGraph thread as rows, when it carries one.
    pub thread: Option<ThreadRows>,
    /// The server time of the import (the session's `updated_at`, the thread's rows').
    pub now: Timestamp,
}

impl ImportPlan {
    /// Validates and re-keys `doc` as a new session of `tenant` owned by `user_id`; every
    /// refusal of [`rekey_document`] and of [`thread_rows`] happens here, before any write.
    pub fn new(
        tenant: &Tenant,
        user_id: &str,
        doc: SessionDocument,
        now: Timestamp,
    ) -> Result<ImportPlan> {
        let mut doc = rekey_document(tenant, user_id, doc, now)?;
        let thread = doc.thread.take().map(thread_rows).transpose()?;
        doc.messages.sort_by_key(|m| (m.created_at, m.id));
        doc.executions.sort_by_key(|e| (e.created_at, e.id));
        doc.snapshots.sort_by_key(|s| (s.created_at, s.id));
        Ok(ImportPlan { doc, thread, now })
    }

    /// The steps' stored payloads, in `doc.steps` order (compressed past `threshold`).
    pub fn step_payloads(&self, threshold: usize) -> Vec<Vec<u8>> {
        self.doc
            .steps
            .iter()
            .map(|s| codec::encode_step(&s.body(), threshold))
            .collect()
    }

    /// The snapshots' stored states, in `doc.snapshots` order (compressed past `threshold`).
    pub fn snapshot_states(&self, threshold: usize) -> Vec<Vec<u8>> {
        self.doc
            .snapshots
            .iter()
            .map(|s| codec::encode_value(&s.state, threshold))
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use stepwise_core::document::FORMAT_VERSION;
    use stepwise_core::{Message, Role, Step, StepBody, StepKind, new_id};

    use super::*;
    use crate::{NewMessage, NewSession, StoreError};

    fn document() -> SessionDocument {
        let source = Tenant::new("source").unwrap();
        let session = NewSession {
            user_id: "someone".into(),
            name: Some("imported".into()),
            ..NewSession::default()
        }
        .into_session(&source, Timestamp(5));
        let message = |at: i64| -> Message {
            NewMessage::new(session.id, Role::User, format!("at {at}")).into_message(Timestamp(at))
        };
        SessionDocument {
            format_version: FORMAT_VERSION,
            messages: vec![message(30), message(10), message(20)],
            session,
            executions: Vec::new(),
            steps: Vec::new(),
            snapshots: Vec::new(),
            thread: None,
        }
    }

    #[test]
    fn the_plan_rekeys_into_the_tenant_and_orders_messages() {
        let doc = document();
        let old_id = doc.session.id;
        let tenant = Tenant::new("target").unwrap();
        let plan = ImportPlan::new(&tenant, "me", doc, Timestamp(99)).unwrap();
        let s = &plan.doc.session;
        assert_ne!(s.id, old_id);
        assert_eq!(s.tenant_id, "target");
        assert_eq!(s.user_id, "me");
        assert_eq!(s.updated_at, Timestamp(99));
        assert_eq!(s.message_count, 3);
        let times: Vec<i64> = plan.doc.messages.iter().map(|m| m.created_at.0).collect();
        assert_eq!(times, [10, 20, 30]);
        assert!(plan.doc.messages.iter().all(|m| m.session_id == s.id));
        assert!(plan.thread.is_none());
        assert!(plan.step_payloads(1024).is_empty());
    }

    #[test]
    fn a_step_of_an_execution_not_in_the_document_is_refused() {
        let mut doc = document();
        doc.steps.push(Step::from_body(
            new_id(),
            new_id(),
            Some(doc.session.id),
            1,
            StepKind::Task,
            StepBody::default(),
            Timestamp(1),
        ));
        let err = ImportPlan::new(&Tenant::new("t").unwrap(), "me", doc, Timestamp(1));
        assert!(matches!(
            err,
            Err(StoreError::Invalid {
                field: Some("steps"),
                ..
            })
        ));
    }
}
