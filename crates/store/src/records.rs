//! The records a backend stores for a new session, message, execution, snapshot or API
//! key: ids and server times added to what the caller gave. Every backend builds them here,
//! so a field's starting value is the same whichever database keeps it.

use serde_json::Value;
use stepwise_core::{
    Execution, ExecutionStatus, Message, Session, SessionStatus, Snapshot, Timestamp, new_id,
};

use crate::{
    AccessRole, ApiKeyRecord, NewExecution, NewMessage, NewSession, NewSnapshot, StoreError, Tenant,
};

impl NewSession {
    /// An `active` session with no messages yet, created and updated at `now`.
    pub fn into_session(self, tenant: &Tenant, now: Timestamp) -> Session {
        Session {
            id: new_id(),
            tenant_id: tenant.as_str().to_string(),
            user_id: self.user_id,
            name: self.name,
            title: self.title,
            status: SessionStatus::Active,
            related_type: self.related_type,
            related_id: self.related_id,
            initial_context_url: self.initial_context_url,
            metadata: self.metadata,
            agent: None,
            last_execution_id: None,
            last_snapshot_id: None,
            message_count: 0,
            first_message: None,
            created_at: now,
            updated_at: now,
        }
    }
}

impl NewMessage {
    pub fn into_message(self, now: Timestamp) -> Message {
        Message {
            id: new_id(),
            session_id: self.session_id,
            role: self.role,
            content: self.content,
            execution_id: self.execution_id,
            related_type: self.related_type,
            related_id: self.related_id,
            context_url: self.context_url,
            metadata: self.metadata,
            created_at: now,
        }
    }
}

impl NewExecution {
    /// A `pending` or `running` execution (any other starting status is refused), with no
    /// steps, output or attempts yet; a running one starts at `now`.
    pub fn into_execution(self, tenant: &Tenant, now: Timestamp) -> Result<Execution, StoreError> {
        if !matches!(
            self.status,
            ExecutionStatus::Pending | ExecutionStatus::Running
        ) {
            return Err(StoreError::invalid(
                "status",
                "a new execution is pending or running",
            ));
        }
        Ok(Execution {
            id: new_id(),
            session_id: self.session_id,
            parent_execution_id: self.parent_execution_id,
            tenant_id: tenant.as_str().to_string(),
            user_id: self.user_id,
            agent_type: self.agent_type,
            agent_config: self.agent_config,
            status: self.status,
            input: self.input,
            output: Value::Null,
            last_snapshot_id: None,
            step_count: 0,
            token_usage: Default::default(),
            metadata: self.metadata,
            error_message: None,
            attempts: 0,
            lease_expires_at: self
                .lease
                .as_ref()
                .filter(|_| self.status == ExecutionStatus::Running)
                .map(|l| crate::rules::lease_until(now, l.duration)),
            started_at: (self.status == ExecutionStatus::Running).then_some(now),
            completed_at: None,
            created_at: now,
            updated_at: now,
        })
    }
}

impl NewSnapshot {
    pub fn into_snapshot(self, now: Timestamp) -> Snapshot {
        Snapshot {
            id: new_id(),
            execution_id: self.execution_id,
            parent_snapshot_id: self.parent_snapshot_id,
            agent_id: self.agent_id,
            agent_name: self.agent_name,
            step_number: self.step_number,
            is_final: self.is_final,
            debug_mode: self.debug_mode,
            state: self.state,
            created_at: now,
        }
    }
}

impl ApiKeyRecord {
    /// A new, unrevoked key's record (its hash is stored beside it, never in it).
    pub fn new(
        tenant: &Tenant,
        user_id: &str,
        role: AccessRole,
        name: Option<String>,
        now: Timestamp,
    ) -> Self {
        ApiKeyRecord {
            id: new_id(),
            name,
            tenant_id: tenant.as_str().to_string(),
            user_id: user_id.to_string(),
            role,
            created_at: now,
            revoked_at: None,
        }
    }
}
