//! What a [`SessionPatch`] does to a session.

use stepwise_core::{Session, Timestamp};

use crate::{Result, SessionPatch};

impl SessionPatch {
    /// Checks the patch before anything is read or written: a new name must follow the
    /// name rules ([`super::check_name`]).
    pub fn check(&self) -> Result<()> {
        super::check_name(self.name.as_deref())
    }

    /// Applies the patch: every field it sets replaces the session's (a name or title can
    /// be changed, not cleared), and the session counts as updated at `now` even when the
    /// patch sets nothing. Uniqueness of the name is the backend's to enforce.
    pub fn apply(self, session: &mut Session, now: Timestamp) {
        if let Some(title) = self.title {
            session.title = Some(title);
        }
        if let Some(name) = self.name {
            session.name = Some(name);
        }
        if let Some(status) = self.status {
            session.status = status;
        }
        if let Some(metadata) = self.metadata {
            session.metadata = metadata;
        }
        if let Some(agent) = self.agent {
            session.agent = agent;
        }
        session.updated_at = now;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;
    use stepwise_core::SessionStatus;

    use super::*;
    use crate::{NewSession, StoreError, Tenant};

    fn session() -> Session {
        let new = NewSession {
            user_id: "u".into(),
            name: Some("before".into()),
            title: Some("Title".into()),
            metadata: json!({"k": 1}),
            ..NewSession::default()
        };
        new.into_session(&Tenant::new("t").unwrap(), Timestamp(10))
    }

    #[test]
    fn an_empty_patch_changes_only_updated_at() {
        let mut s = session();
        let before = s.clone();
        SessionPatch::default().apply(&mut s, Timestamp(20));
        assert_eq!(s.updated_at, Timestamp(20));
        assert_eq!(
            Session {
                updated_at: before.updated_at,
                ..s
            },
            before
        );
    }

    #[test]
    fn every_field_set_replaces_the_sessions() {
        let mut s = session();
        let patch = SessionPatch {
            title: Some("New".into()),
            name: Some("after".into()),
            status: Some(SessionStatus::Completed),
            metadata: Some(json!({"k": 2})),
            agent: None,
        };
        patch.apply(&mut s, Timestamp(30));
        assert_eq!(s.title.as_deref(), Some("New"));
        assert_eq!(s.name.as_deref(), Some("after"));
        assert_eq!(s.status, SessionStatus::Completed);
        assert_eq!(s.metadata, json!({"k": 2}));
        assert_eq!(s.created_at, Timestamp(10));
    }

    #[test]
    fn a_patch_with_a_bad_name_is_refused() {
        let patch = SessionPatch {
            name: Some("no spaces allowed".into()),
            ..SessionPatch::default()
        };
        assert!(matches!(patch.check(), Err(StoreError::Invalid { .. })));
        assert_eq!(SessionPatch::default().check(), Ok(()));
    }
}
