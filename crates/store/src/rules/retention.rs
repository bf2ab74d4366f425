//! Retention: which sessions the cleaner marks abandoned, and which it deletes.

use stepwise_core::{Session, SessionStatus, Timestamp};

use crate::{CleanupReport, RetentionPolicy};

/// How old (by `updated_at`) a session of each deletable status must be to be deleted:
/// strictly older than its cutoff. Other statuses are never deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpiryCutoffs {
    pub completed: Timestamp,
    pub abandoned: Timestamp,
    pub deleted: Timestamp,
}

impl RetentionPolicy {
    /// The deletion cutoffs of a cleanup pass run at `now`.
    pub fn cutoffs(&self, now: Timestamp) -> ExpiryCutoffs {
        ExpiryCutoffs {
            completed: now.minus_days(self.completed_days),
            abandoned: now.minus_days(self.abandoned_days),
            deleted: now.minus_days(self.deleted_days),
        }
    }

    /// Active sessions not updated since this time are marked abandoned.
    pub fn abandon_cutoff(&self, now: Timestamp) -> Timestamp {
        now.minus_days(self.abandon_after_days)
    }
}

impl ExpiryCutoffs {
    /// The cutoff of `status`, `None` for a status that is never deleted.
    pub fn for_status(&self, status: SessionStatus) -> Option<Timestamp> {
        match status {
            SessionStatus::Completed => Some(self.completed),
            SessionStatus::Abandoned => Some(self.abandoned),
            SessionStatus::Deleted => Some(self.deleted),
            _ => None,
        }
    }

    /// Whether the cleaner deletes `session`.
    pub fn is_expired(&self, session: &Session) -> bool {
        self.for_status(session.status)
            .is_some_and(|cutoff| session.updated_at < cutoff)
    }

    /// The cutoffs in microseconds, in the order completed, abandoned, deleted (the order
    /// of the parameters of the backends' "expired" query).
    pub fn as_micros(&self) -> [i64; 3] {
        [self.completed.0, self.abandoned.0, self.deleted.0]
    }
}

/// Whether `mark_abandoned` with this cutoff marks `session`: it is active and was not
/// updated since.
pub fn is_stale(session: &Session, cutoff: Timestamp) -> bool {
    session.status == SessionStatus::Active && session.updated_at < cutoff
}

impl CleanupReport {
    /// Adds what another batch (or session) deleted.
    pub fn add(&mut self, other: CleanupReport) {
        self.sessions += other.sessions;
        self.messages += other.messages;
        self.executions += other.executions;
        self.steps += other.steps;
        self.snapshots += other.snapshots;
        self.events += other.events;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::{NewSession, Tenant};

    const DAY: i64 = 86_400_000_000;

    fn session(status: SessionStatus, updated_at: Timestamp) -> Session {
        let mut s = NewSession::default().into_session(&Tenant::new("t").unwrap(), updated_at);
        s.status = status;
        s
    }

    fn policy() -> RetentionPolicy {
        RetentionPolicy {
            abandon_after_days: 5,
            completed_days: 10,
            abandoned_days: 20,
            deleted_days: 30,
        }
    }

    #[test]
    fn each_status_has_its_own_cutoff() {
        let now = Timestamp(100 * DAY);
        let c = policy().cutoffs(now);
        assert_eq!(c.as_micros(), [90 * DAY, 80 * DAY, 70 * DAY]);
        assert_eq!(c.for_status(SessionStatus::Active), None);
        assert_eq!(policy().abandon_cutoff(now), Timestamp(95 * DAY));
    }

    #[test]
    fn a_session_expires_strictly_after_its_cutoff() {
        let c = policy().cutoffs(Timestamp(100 * DAY));
        assert!(!c.is_expired(&session(SessionStatus::Completed, Timestamp(90 * DAY))));
        assert!(c.is_expired(&session(SessionStatus::Completed, Timestamp(90 * DAY - 1))));
        assert!(!c.is_expired(&session(SessionStatus::Deleted, Timestamp(75 * DAY))));
        assert!(c.is_expired(&session(SessionStatus::Abandoned, Timestamp(75 * DAY))));
    }

    #[test]
    fn active_sessions_are_never_deleted_only_marked() {
        let old = session(SessionStatus::Active, Timestamp(0));
        assert!(!policy().cutoffs(Timestamp(100 * DAY)).is_expired(&old));
        assert!(is_stale(&old, Timestamp(1)));
        assert!(!is_stale(&old, Timestamp(0)));
        assert!(!is_stale(
            &session(SessionStatus::Completed, Timestamp(0)),
            Timestamp(1)
        ));
    }

    #[test]
    fn reports_add_up_field_by_field() {
        let mut total = CleanupReport {
            sessions: 1,
            steps: 2,
            ..Default::default()
        };
        total.add(CleanupReport {
            sessions: 2,
            events: 4,
            ..Default::default()
        });
        assert_eq!(
            total,
            CleanupReport {
                sessions: 3,
                steps: 2,
                events: 4,
                ..Default::default()
            }
        );
    }
}
