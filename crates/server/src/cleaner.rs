//! The retention cleaner: one retention pass (the same `stepwise cleanup` runs), and the
//! schedule a [`Node`](crate::Node) runs it on: once shortly after start, then on an
//! interval — or once a day at a fixed UTC time — until the node stops. A store error is
//! logged and tried again later; it never takes the server down.

use std::future::Future;
use std::time::Duration;

use stepwise_core::{SharedClock, Timestamp};
use stepwise_store::{CleanupReport, RetentionPolicy, Store, StoreError, TenantScope};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Default time between two passes: daily.
pub const DEFAULT_INTERVAL_SECS: u64 = 86_400;

const DAY_MICROS: i64 = 86_400_000_000;

/// When the cleaner's passes run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schedule {
    /// At start, then every interval (a failed pass too is tried again after it).
    Every(Duration),
    /// Once a day at this time of day, UTC (seconds after midnight), not at start; a failed
    /// pass is tried again after `retry` (or at the next such time, if sooner).
    DailyAt { second_of_day: u32, retry: Duration },
}

impl Schedule {
    /// `HH:MM` (UTC) as a daily schedule; `None` for anything else.
    pub fn daily_at(text: &str, retry: Duration) -> Option<Schedule> {
        let (hours, minutes) = text.trim().split_once(':')?;
        let (hours, minutes): (u32, u32) = (hours.parse().ok()?, minutes.parse().ok()?);
        (hours < 24 && minutes < 60 && text.trim().len() == 5).then_some(Schedule::DailyAt {
            second_of_day: hours * 3600 + minutes * 60,
            retry,
        })
    }

    /// How long to wait before the first pass.
    fn first_wait(&self, now: Timestamp) -> Duration {
        match *self {
            Schedule::Every(_) => Duration::ZERO,
            Schedule::DailyAt { second_of_day, .. } => until_time_of_day(now, second_of_day),
        }
    }

    /// How long to wait after a pass (`failed` or not).
    fn next_wait(&self, now: Timestamp, failed: bool) -> Duration {
        match *self {
            Schedule::Every(interval) => interval,
            Schedule::DailyAt {
                second_of_day,
                retry,
            } => {
                let next = until_time_of_day(now, second_of_day);
                if failed { retry.min(next) } else { next }
            }
        }
    }
}

/// The time from `now` to the next `second_of_day` (UTC); a whole day when it is now.
fn until_time_of_day(now: Timestamp, second_of_day: u32) -> Duration {
    let into_day = now.0.rem_euclid(DAY_MICROS);
    let target = i64::from(second_of_day) * 1_000_000;
    let wait = (target - into_day).rem_euclid(DAY_MICROS);
    let wait = if wait == 0 { DAY_MICROS } else { wait };
    Duration::from_micros(wait.unsigned_abs())
}

/// What one retention pass changed (or, dry, would change).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassOutcome {
    /// Another node held the retention lock, so this pass did nothing.
    pub skipped: bool,
    pub marked_abandoned: u64,
    pub deleted: CleanupReport,
}

/// One retention pass as of `now`: mark idle active sessions abandoned, then delete
/// sessions past retention. `stepwise cleanup` and the cleaner both run this.
/// A pass that changes data holds the store's retention lock throughout (on PostgreSQL,
/// one node at a time); when another node holds it, the pass is skipped.
pub async fn retention_pass<S: Store>(
    store: &S,
    policy: RetentionPolicy,
    now: Timestamp,
    dry: bool,
) -> Result<PassOutcome, StoreError> {
    let _lock = if dry {
        None
    } else {
        match store.try_retention_lock().await? {
            Some(lock) => Some(lock),
            None => {
                tracing::debug!("retention pass skipped: another node is running one");
                return Ok(PassOutcome {
                    skipped: true,
                    ..PassOutcome::default()
                });
            }
        }
    };
    // Each tenant with a retention of its own (`PUT /v1/retention`) gets a pass of its
    // own; every other tenant goes by the server's policy.
    let own = store.tenant_retentions().await?;
    let mut passes: Vec<(RetentionPolicy, TenantScope)> = own
        .iter()
        .map(|(tenant, retention)| (retention.over(policy), TenantScope::Only(tenant.clone())))
        .collect();
    passes.push((
        policy,
        TenantScope::AllBut(own.into_iter().map(|(tenant, _)| tenant).collect()),
    ));
    let mut marked_abandoned = 0;
    let mut deleted = CleanupReport::default();
    for (policy, scope) in passes {
        marked_abandoned += store
            .mark_abandoned(policy.abandon_cutoff(now), dry, scope.clone())
            .await?;
        deleted.add(store.cleanup_old_sessions(now, policy, dry, scope).await?);
    }
    Ok(PassOutcome {
        skipped: false,
        marked_abandoned,
        deleted,
    })
}

/// Passes run so far, for logs and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanerProgress {
    pub passes: u64,
    pub failures: u64,
    pub last: Option<PassOutcome>,
}

/// A running cleaner; `stop` ends it promptly (a pass in flight is abandoned: each batch
/// the store commits stands, and the next start picks up the rest).
pub struct Cleaner {
    task: JoinHandle<()>,
    progress: watch::Receiver<CleanerProgress>,
}

impl Cleaner {
    /// Waits for the task to end after the stop signal was sent (at most `within`).
    pub async fn join(self, within: Duration) {
        match tokio::time::timeout(within, self.task).await {
            Ok(Ok(())) => {
                let done = *self.progress.borrow();
                tracing::info!(
                    passes = done.passes,
                    failures = done.failures,
                    "retention cleaner stopped"
                );
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "the retention cleaner task failed"),
            Err(_) => tracing::warn!("the retention cleaner did not stop in time"),
        }
    }
}

/// Starts the cleaner over `store`, passes as of `clock`'s time; it stops when `stop` turns true (or its sender is gone).
pub fn spawn<S: Store>(
    store: S,
    policy: RetentionPolicy,
    schedule: Schedule,
    clock: SharedClock,
    stop: watch::Receiver<bool>,
) -> Cleaner {
    let (interval, daily_at) = match schedule {
        Schedule::Every(interval) => (interval, None),
        Schedule::DailyAt {
            second_of_day,
            retry,
        } => (
            retry,
            Some(format!(
                "{:02}:{:02}",
                second_of_day / 3600,
                second_of_day % 3600 / 60
            )),
        ),
    };
    tracing::info!(
        daily_at_utc = daily_at.as_deref().unwrap_or("-"),
        interval_secs = interval.as_secs(),
        abandon_after_days = policy.abandon_after_days,
        completed_days = policy.completed_days,
        abandoned_days = policy.abandoned_days,
        deleted_days = policy.deleted_days,
        "retention cleaner started"
    );
    let pass_clock = clock.clone();
    run_loop(schedule, clock, stop, move || {
        let store = store.clone();
        let now = pass_clock.now();
        async move { retention_pass(&store, policy, now, false).await }
    })
}

/// The schedule, apart from the store so it can be tested with any pass.
fn run_loop<P, F>(
    schedule: Schedule,
    clock: SharedClock,
    mut stop: watch::Receiver<bool>,
    mut pass: P,
) -> Cleaner
where
    P: FnMut() -> F + Send + 'static,
    F: Future<Output = Result<PassOutcome, StoreError>> + Send,
{
    let (progress_tx, progress) = watch::channel(CleanerProgress::default());
    let task = tokio::spawn(async move {
        let first = schedule.first_wait(clock.now());
        if !first.is_zero() {
            tokio::select! {
                biased;
                _ = stop.wait_for(|stop| *stop) => return,
                _ = tokio::time::sleep(first) => {}
            }
        }
        loop {
            let outcome = tokio::select! {
                biased;
                _ = stop.wait_for(|stop| *stop) => break,
                outcome = pass() => outcome,
            };
            progress_tx.send_modify(|p| {
                p.passes += 1;
                match &outcome {
                    Ok(done) => p.last = Some(*done),
                    Err(_) => p.failures += 1,
                }
            });
            match &outcome {
                Ok(done) if done.skipped => crate::record_retention_skipped(),
                Ok(done) => crate::record_retention_pass(done.marked_abandoned, &done.deleted),
                Err(_) => crate::record_retention_failure(),
            }
            // A zero wait would spin.
            let wait = schedule
                .next_wait(clock.now(), outcome.is_err())
                .max(Duration::from_millis(1));
            match outcome {
                Ok(done) if done.skipped => tracing::debug!(
                    retry_in_secs = wait.as_secs(),
                    "retention pass skipped: another node holds the retention lock"
                ),
                Ok(done) => tracing::info!(
                    marked_abandoned = done.marked_abandoned,
                    deleted_sessions = done.deleted.sessions,
                    deleted_messages = done.deleted.messages,
                    deleted_executions = done.deleted.executions,
                    deleted_steps = done.deleted.steps,
                    deleted_snapshots = done.deleted.snapshots,
                    deleted_events = done.deleted.events,
                    "retention pass done"
                ),
                Err(e) => tracing::warn!(
                    error = %e,
                    retry_in_secs = wait.as_secs(),
                    "retention pass failed; trying again later"
                ),
            }
            tokio::select! {
                biased;
                _ = stop.wait_for(|stop| *stop) => break,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    });
    Cleaner { task, progress }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use stepwise_core::{ManualClock, SessionStatus, Timestamp};
    use stepwise_store::{NewSession, SessionPatch, Tenant};
    use stepwise_store_sqlite::{SqliteOptions, SqliteStore};

    use super::*;
    use stepwise_store::prelude::*;

    const TEST_INTERVAL: Duration = Duration::from_millis(5);
    const DEADLINE: Duration = Duration::from_secs(20);

    async fn wait_until(
        progress: &mut watch::Receiver<CleanerProgress>,
        done: impl FnMut(&CleanerProgress) -> bool,
    ) -> CleanerProgress {
        *tokio::time::timeout(DEADLINE, progress.wait_for(done))
            .await
            .expect("the cleaner made no progress before the deadline")
            .expect("the cleaner stopped")
    }

    #[tokio::test]
    async fn the_cleaner_marks_and_deletes_by_the_policy_and_leaves_fresh_sessions() {
        let dir = tempfile::tempdir().unwrap();
        let now = Timestamp::now();
        let clock = ManualClock::new(now.minus_days(100));
        let store = SqliteStore::open_with(
            &dir.path().join("stepwise.db"),
            SqliteOptions {
                clock: clock.clone(),
                ..SqliteOptions::default()
            },
        )
        .unwrap();
        let tenant = Tenant::new("t1").unwrap();
        let new = |name: &str| NewSession {
            user_id: "u1".into(),
            name: Some(name.into()),
            ..NewSession::default()
        };
        // 100 days ago: one idle active session and one completed session.
        let idle = store.create_session(&tenant, new("idle")).await.unwrap();
        let done = store.create_session(&tenant, new("done")).await.unwrap();
        store
            .update_session(
                &tenant,
                done.id,
                SessionPatch {
                    status: Some(SessionStatus::Completed),
                    ..SessionPatch::default()
                },
            )
            .await
            .unwrap();
        // Today: a fresh session.
        clock.set(now);
        let fresh = store.create_session(&tenant, new("fresh")).await.unwrap();
        store.flush().await.unwrap();

        let (stop_tx, stop_rx) = watch::channel(false);
        let cleaner = spawn(
            store.clone(),
            RetentionPolicy::default(),
            Schedule::Every(Duration::from_secs(3600)),
            clock.clone(),
            stop_rx,
        );
        let mut progress = cleaner.progress.clone();
        let first = wait_until(&mut progress, |p| p.passes >= 1).await;
        assert_eq!(first.failures, 0);
        let outcome = first.last.unwrap();
        assert_eq!(outcome.marked_abandoned, 1, "{outcome:?}");
        assert_eq!(outcome.deleted.sessions, 1, "{outcome:?}");

        let idle_now = store.get_session(&tenant, idle.id).await.unwrap().unwrap();
        assert_eq!(idle_now.status, SessionStatus::Abandoned);
        assert!(store.get_session(&tenant, done.id).await.unwrap().is_none());
        let fresh_now = store.get_session(&tenant, fresh.id).await.unwrap().unwrap();
        assert_eq!(fresh_now.status, SessionStatus::Active);
        assert_eq!(fresh_now.updated_at, fresh.updated_at);

        // The interval is an hour: stopping does not wait for it.
        stop_tx.send(true).unwrap();
        cleaner.join(DEADLINE).await;
    }

    #[test]
    fn a_daily_schedule_waits_for_its_time_of_day_utc() {
        let at =
            |h: i64, m: i64, s: i64| Timestamp(((19_000 * 24 + h) * 3600 + m * 60 + s) * 1_000_000);
        let retry = Duration::from_secs(300);
        let schedule = Schedule::daily_at("03:30", retry).unwrap();
        assert_eq!(
            schedule,
            Schedule::DailyAt {
                second_of_day: 3 * 3600 + 30 * 60,
                retry
            }
        );
        // Not at start: at the next 03:30, today or tomorrow.
        assert_eq!(schedule.first_wait(at(1, 0, 0)), Duration::from_secs(9000));
        assert_eq!(
            schedule.first_wait(at(4, 0, 0)),
            Duration::from_secs(23 * 3600 + 1800)
        );
        // Right after a pass at 03:30: a day later; a failed one is tried again sooner.
        assert_eq!(
            schedule.next_wait(at(3, 30, 1), false),
            Duration::from_secs(86_399)
        );
        assert_eq!(schedule.next_wait(at(3, 30, 1), true), retry);
        assert_eq!(
            schedule.next_wait(at(3, 28, 0), true),
            Duration::from_secs(120),
            "the retry never skips the day's time"
        );
        assert_eq!(
            Schedule::Every(retry).first_wait(at(1, 0, 0)),
            Duration::ZERO
        );
        for bad in ["24:00", "3:30", "03:60", "0330", "", "ab:cd", "03:30:00"] {
            assert!(Schedule::daily_at(bad, retry).is_none(), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_failing_pass_is_retried_next_interval_and_stop_is_prompt() {
        let calls = Arc::new(AtomicU64::new(0));
        let (stop_tx, stop_rx) = watch::channel(false);
        let counter = calls.clone();
        let cleaner = run_loop(
            Schedule::Every(TEST_INTERVAL),
            stepwise_core::system_clock(),
            stop_rx,
            move || {
                let call = counter.fetch_add(1, Ordering::SeqCst);
                async move {
                    if call < 2 {
                        Err(StoreError::Unavailable("database is locked".into()))
                    } else {
                        Ok(PassOutcome::default())
                    }
                }
            },
        );
        let mut progress = cleaner.progress.clone();
        let seen = wait_until(&mut progress, |p| p.passes >= 3).await;
        assert_eq!(seen.failures, 2);
        assert_eq!(seen.last, Some(PassOutcome::default()));
        stop_tx.send(true).unwrap();
        tokio::time::timeout(DEADLINE, cleaner.task)
            .await
            .expect("the cleaner did not stop")
            .unwrap();
    }

    #[tokio::test]
    async fn a_pass_in_flight_does_not_hold_up_the_stop() {
        let (stop_tx, stop_rx) = watch::channel(false);
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
        let mut started_tx = Some(started_tx);
        let cleaner = run_loop(
            Schedule::Every(TEST_INTERVAL),
            stepwise_core::system_clock(),
            stop_rx,
            move || {
                if let Some(tx) = started_tx.take() {
                    let _ = tx.send(());
                }
                // A pass that never finishes on its own.
                std::future::pending::<Result<PassOutcome, StoreError>>()
            },
        );
        tokio::time::timeout(DEADLINE, started_rx)
            .await
            .unwrap()
            .unwrap();
        stop_tx.send(true).unwrap();
        tokio::time::timeout(DEADLINE, cleaner.task)
            .await
            .expect("the cleaner did not stop")
            .unwrap();
    }
}
