//! `stepwise cleanup`: one retention pass (the server's cleaner runs the same pass).

use clap::Args;
use serde_json::json;
use stepwise_core::Timestamp;
use stepwise_store::{CleanupReport, RetentionPolicy, Store, StoreError};

#[derive(Args, Debug, Clone)]
pub struct CleanupArgs {
    /// Count what would change and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the counts as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub retention: RetentionArgs,
}

/// The retention rules; every number can be set by flag, environment or stepwise.toml.
#[derive(Args, Debug, Clone)]
pub struct RetentionArgs {
    /// Active sessions idle this many days are marked `abandoned`.
    #[arg(long, env = "STEPWISE_ABANDON_AFTER_DAYS", default_value_t = RetentionPolicy::default().abandon_after_days, value_name = "DAYS")]
    pub abandon_after_days: u32,
    /// Completed sessions are deleted this many days after their last update.
    #[arg(long, env = "STEPWISE_COMPLETED_DAYS", default_value_t = RetentionPolicy::default().completed_days, value_name = "DAYS")]
    pub completed_days: u32,
    /// Abandoned sessions are deleted this many days after their last update.
    #[arg(long, env = "STEPWISE_ABANDONED_DAYS", default_value_t = RetentionPolicy::default().abandoned_days, value_name = "DAYS")]
    pub abandoned_days: u32,
    /// Soft-deleted sessions are removed for good this many days after deletion.
    #[arg(long, env = "STEPWISE_DELETED_DAYS", default_value_t = RetentionPolicy::default().deleted_days, value_name = "DAYS")]
    pub deleted_days: u32,
}

impl RetentionArgs {
    pub fn policy(&self) -> RetentionPolicy {
        RetentionPolicy {
            abandon_after_days: self.abandon_after_days,
            completed_days: self.completed_days,
            abandoned_days: self.abandoned_days,
            deleted_days: self.deleted_days,
        }
    }
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
/// sessions past retention. `stepwise cleanup` and the server's cleaner both run this.
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
    let marked_abandoned = store
        .mark_abandoned(now.minus_days(policy.abandon_after_days), dry)
        .await?;
    let deleted = store.cleanup_old_sessions(now, policy, dry).await?;
    Ok(PassOutcome {
        skipped: false,
        marked_abandoned,
        deleted,
    })
}

pub async fn run<S: Store>(store: &S, args: CleanupArgs) -> anyhow::Result<()> {
    let policy = args.retention.policy();
    let dry = args.dry_run;
    let PassOutcome {
        skipped,
        marked_abandoned: marked,
        deleted,
    } = retention_pass(store, policy, Timestamp::now(), dry).await?;
    if args.json {
        let out = json!({
            "dry_run": dry,
            "skipped": skipped,
            "policy": {
                "abandon_after_days": policy.abandon_after_days,
                "completed_days": policy.completed_days,
                "abandoned_days": policy.abandoned_days,
                "deleted_days": policy.deleted_days,
            },
            "marked_abandoned": marked,
            "deleted": deleted,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    if skipped {
        println!("skipped: another node is running a retention pass right now");
        return Ok(());
    }
    let (mark_verb, delete_verb) = if dry {
        ("would mark", "would delete")
    } else {
        ("marked", "deleted")
    };
    if dry {
        println!("dry run: nothing was changed");
    }
    println!(
        "policy: abandon after {} idle days; delete completed after {}, abandoned after {}, deleted after {} days",
        policy.abandon_after_days,
        policy.completed_days,
        policy.abandoned_days,
        policy.deleted_days
    );
    println!("{mark_verb} abandoned: {marked} sessions");
    println!(
        "{delete_verb}: {} sessions, {} messages, {} executions, {} steps, {} snapshots, {} events",
        deleted.sessions,
        deleted.messages,
        deleted.executions,
        deleted.steps,
        deleted.snapshots,
        deleted.events
    );
    Ok(())
}
