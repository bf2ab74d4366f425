//! Leases on claimed executions: when one runs out, and when a worker that keeps losing
//! an execution gives it up.

use std::time::Duration;

use stepwise_core::Timestamp;

/// When a lease taken (or renewed) at `now` for `lease` runs out; saturates at the
/// largest time instead of overflowing.
pub fn lease_until(now: Timestamp, lease: Duration) -> Timestamp {
    let micros = i64::try_from(lease.as_micros()).unwrap_or(i64::MAX);
    Timestamp(now.0.saturating_add(micros))
}

/// Whether a lease running out at `expires_at` has run out at `now` (strictly after it:
/// a lease is still held at its last microsecond).
pub fn lease_expired(expires_at: Timestamp, now: Timestamp) -> bool {
    expires_at < now
}

/// How long a worker process that stopped calling stays listed (`GET /v1/agents`) before
/// the store forgets it.
pub const FORGET_WORKERS_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Whether an execution whose lease ran out after `attempts` claims is failed instead of
/// claimed again.
pub fn attempts_exhausted(attempts: u32, max_attempts: u32) -> bool {
    attempts >= max_attempts
}

/// The error message of an execution failed by [`attempts_exhausted`].
pub fn gave_up_message(attempts: u32) -> String {
    format!(
        "the execution was interrupted {attempts} times (its worker stopped before finishing); giving up"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_runs_out_its_length_after_now() {
        assert_eq!(
            lease_until(Timestamp(1_000), Duration::from_millis(30)),
            Timestamp(31_000)
        );
    }

    #[test]
    fn a_huge_lease_saturates_instead_of_overflowing() {
        assert_eq!(
            lease_until(Timestamp(5), Duration::from_secs(u64::MAX)),
            Timestamp(i64::MAX)
        );
    }

    #[test]
    fn a_lease_is_held_up_to_and_including_its_end() {
        let end = Timestamp(100);
        assert!(!lease_expired(end, Timestamp(99)));
        assert!(!lease_expired(end, Timestamp(100)));
        assert!(lease_expired(end, Timestamp(101)));
    }

    #[test]
    fn attempts_run_out_at_the_maximum() {
        assert!(!attempts_exhausted(2, 3));
        assert!(attempts_exhausted(3, 3));
        assert!(gave_up_message(3).contains("interrupted 3 times"));
    }
}
