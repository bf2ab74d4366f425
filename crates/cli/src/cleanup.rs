//! `stepwise cleanup`: one retention pass, the one the server's cleaner runs
//! ([`stepwise_server::cleaner::retention_pass`]).

use clap::Args;
use serde_json::json;
use stepwise_core::Timestamp;
use stepwise_server::cleaner::{PassOutcome, retention_pass};
use stepwise_store::{RetentionPolicy, Store};

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
