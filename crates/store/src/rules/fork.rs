//! Forking a session: its export document cut at a point (an execution, and a step of it),
//! to be imported as a new session. The cut decides what the fork holds; the import
//! ([`crate::rekey_document`]) gives every row a fresh id.

use std::collections::HashSet;

use serde_json::Value;
use stepwise_core::document::DocumentThread;
use stepwise_core::{ExecutionStatus, Id, SessionDocument, Timestamp, TokenUsage};

use crate::{Result, StoreError};

/// The key a worker's LangGraph run writes into each checkpoint's metadata: the execution
/// that wrote it.
pub const CHECKPOINT_EXECUTION_KEY: &str = "stepwise_execution_id";

/// Where a fork ends: after the root execution `execution_id` (the latest when `None`),
/// at its step `step_number` when given (its whole run otherwise).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ForkPoint {
    pub execution_id: Option<Id>,
    pub step_number: Option<u32>,
}

/// Cuts `doc` (a session's export) at `point`: the root executions up to the chosen one with
/// their sub-executions, steps, snapshots and messages; of the chosen execution, when cut at
/// a step, only what it had written up to that step (it reads as `cancelled` there, with the
/// token counts of its kept steps). A LangGraph thread keeps the checkpoints written up to
/// the same point, and is renamed after the session, so the fork's thread follows the new
/// session. `NotFound("execution")` when the execution is not a root execution of the
/// session; `NotFound("step")` for a step number it does not have.
pub fn cut_document(
    mut doc: SessionDocument,
    point: ForkPoint,
) -> Result<(SessionDocument, ForkCut)> {
    doc.executions.sort_by_key(|e| (e.created_at, e.id));
    let roots: Vec<Id> = doc
        .executions
        .iter()
        .filter(|e| e.parent_execution_id.is_none())
        .map(|e| e.id)
        .collect();
    let target = match point.execution_id {
        Some(id) => roots
            .iter()
            .position(|r| *r == id)
            .ok_or(StoreError::NotFound("execution"))?,
        None if roots.is_empty() => {
            if point.step_number.is_some() {
                return Err(StoreError::NotFound("step"));
            }
            return Ok((renamed_thread(doc), ForkCut::everything()));
        }
        None => roots.len() - 1,
    };
    let target_id = roots[target];
    let next_root_at = roots.get(target + 1).and_then(|next| {
        doc.executions
            .iter()
            .find(|e| e.id == *next)
            .map(|e| e.created_at)
    });

    // The cut inside the target: the time its kept last step was written.
    let target_steps: Vec<u32> = doc
        .steps
        .iter()
        .filter(|s| s.execution_id == target_id)
        .map(|s| s.step_number)
        .collect();
    let cut_step = match point.step_number {
        None => None,
        Some(n) if !target_steps.contains(&n) => return Err(StoreError::NotFound("step")),
        Some(n) if target_steps.iter().all(|s| *s <= n) => None,
        Some(n) => Some(n),
    };
    let cut_at: Option<Timestamp> = cut_step.and_then(|n| {
        doc.steps
            .iter()
            .find(|s| s.execution_id == target_id && s.step_number == n)
            .map(|s| s.created_at)
    });
    // Rows not tied to a kept execution stay when written before this.
    let horizon = cut_at.or(next_root_at);
    let before_horizon = |at: Timestamp| match (cut_at, horizon) {
        (Some(cut), _) => at <= cut,
        (None, Some(next)) => at < next,
        (None, None) => true,
    };

    // Kept executions: the roots up to the target, and sub-executions of kept roots (of the
    // target when cut, those started by its kept steps).
    let kept_roots: HashSet<Id> = roots[..=target].iter().copied().collect();
    let mut kept: HashSet<Id> = kept_roots.clone();
    let mut grew = true;
    while grew {
        grew = false;
        for e in &doc.executions {
            let Some(parent) = e.parent_execution_id else {
                continue;
            };
            if kept.contains(&e.id) || !kept.contains(&parent) {
                continue;
            }
            if parent == target_id && cut_at.is_some_and(|cut| e.created_at > cut) {
                continue;
            }
            kept.insert(e.id);
            grew = true;
        }
    }
    // The target and what descends from it: cut at `cut_at` when the target is cut.
    let mut under_target: HashSet<Id> = HashSet::from([target_id]);
    let mut grew = true;
    while grew {
        grew = false;
        for e in &doc.executions {
            if let Some(parent) = e.parent_execution_id
                && under_target.contains(&parent)
                && under_target.insert(e.id)
            {
                grew = true;
            }
        }
    }
    let in_cut = |execution: Id, at: Timestamp| -> bool {
        !under_target.contains(&execution) || cut_at.is_none_or(|cut| at <= cut)
    };
    let steps = std::mem::take(&mut doc.steps);
    doc.steps = steps
        .into_iter()
        .filter(|s| kept.contains(&s.execution_id))
        .filter(|s| match cut_step {
            Some(n) if s.execution_id == target_id => s.step_number <= n,
            _ => in_cut(s.execution_id, s.created_at),
        })
        .collect();
    let snapshots = std::mem::take(&mut doc.snapshots);
    doc.snapshots = snapshots
        .into_iter()
        .filter(|s| kept.contains(&s.execution_id))
        .filter(|s| match cut_step {
            Some(n) if s.execution_id == target_id => s.step_number <= n && !s.is_final,
            _ => in_cut(s.execution_id, s.created_at),
        })
        .collect();
    let messages = std::mem::take(&mut doc.messages);
    doc.messages = messages
        .into_iter()
        .filter(|m| match m.execution_id {
            Some(e) if kept.contains(&e) => in_cut(e, m.created_at),
            Some(_) => false,
            None => before_horizon(m.created_at),
        })
        .collect();
    let snapshot_ids: HashSet<Id> = doc.snapshots.iter().map(|s| s.id).collect();
    for s in &mut doc.snapshots {
        s.parent_snapshot_id = s.parent_snapshot_id.filter(|p| snapshot_ids.contains(p));
    }
    doc.executions.retain(|e| kept.contains(&e.id));
    for e in &mut doc.executions {
        let own: Vec<&stepwise_core::Step> = doc
            .steps
            .iter()
            .filter(|s| s.execution_id == e.id)
            .collect();
        let latest_snapshot = doc
            .snapshots
            .iter()
            .filter(|s| s.execution_id == e.id)
            .max_by_key(|s| (s.created_at, s.step_number))
            .map(|s| s.id);
        e.last_snapshot_id = e
            .last_snapshot_id
            .filter(|id| snapshot_ids.contains(id))
            .or(latest_snapshot);
        if let Some(cut) = cut_at
            && under_target.contains(&e.id)
            && (e.id == target_id || e.completed_at.is_none_or(|done| done > cut))
        {
            e.status = ExecutionStatus::Cancelled;
            e.output = Value::Null;
            e.error_message = Some(format!("forked at step {}", cut_step.unwrap_or_default()));
            e.completed_at = Some(cut);
            e.step_count = own.len() as u64;
            e.token_usage = own.iter().fold(TokenUsage::default(), |mut sum, s| {
                sum.add(&s.token_usage);
                sum
            });
        }
    }
    let session = &mut doc.session;
    session.last_execution_id = Some(target_id);
    session.last_snapshot_id = doc
        .snapshots
        .iter()
        .filter(|s| kept_roots.contains(&s.execution_id))
        .max_by_key(|s| (s.created_at, s.id))
        .map(|s| s.id);
    session.message_count = doc.messages.len() as u64;

    let cut = ForkCut {
        everything: false,
        kept: kept.iter().map(Id::to_string).collect(),
        target: target_id.to_string(),
        cut_at,
        next_root_at,
    };
    if let Some(thread) = doc.thread.as_mut() {
        cut.cut_thread(thread);
    }
    Ok((renamed_thread(doc), cut))
}

/// Where a fork cut a session, for the LangGraph thread that goes with it (the session's
/// own, or a worker's thread named after the session).
#[derive(Debug, Clone)]
pub struct ForkCut {
    /// The session had no execution: the whole thread is kept.
    everything: bool,
    /// The kept executions' ids.
    kept: HashSet<String>,
    target: String,
    cut_at: Option<Timestamp>,
    next_root_at: Option<Timestamp>,
}

impl ForkCut {
    fn everything() -> Self {
        ForkCut {
            everything: true,
            kept: HashSet::new(),
            target: String::new(),
            cut_at: None,
            next_root_at: None,
        }
    }

    /// Keeps the checkpoints written up to the cut: those a kept execution's run wrote
    /// (metadata `stepwise_execution_id`; of the cut execution, up to its cut step), others
    /// by the time they were written; then the pending writes of kept checkpoints only.
    pub fn cut_thread(&self, thread: &mut DocumentThread) {
        if self.everything {
            return;
        }
        thread.checkpoints.retain(|c| {
            match c
                .metadata
                .get(CHECKPOINT_EXECUTION_KEY)
                .and_then(Value::as_str)
            {
                Some(e) if e == self.target => self.cut_at.is_none_or(|cut| c.created_at <= cut),
                Some(e) => self.kept.contains(e),
                None => match (self.cut_at, self.next_root_at) {
                    (Some(cut), _) => c.created_at <= cut,
                    (None, Some(next)) => c.created_at < next,
                    (None, None) => true,
                },
            }
        });
        let checkpoint_ids: HashSet<(String, String)> = thread
            .checkpoints
            .iter()
            .map(|c| (c.checkpoint_ns.clone(), c.checkpoint_id.clone()))
            .collect();
        thread.checkpoint_writes.retain(|w| {
            checkpoint_ids.contains(&(w.checkpoint_ns.clone(), w.checkpoint_id.clone()))
        });
        for c in &mut thread.checkpoints {
            if c.parent_checkpoint_id
                .as_ref()
                .is_some_and(|p| !checkpoint_ids.contains(&(c.checkpoint_ns.clone(), p.clone())))
            {
                c.parent_checkpoint_id = None;
            }
        }
    }
}

/// The thread of a fork is named after its session: [`crate::rekey_document`] renames a
/// thread named after the old session to the new session's id.
fn renamed_thread(mut doc: SessionDocument) -> SessionDocument {
    let session_id = doc.session.id.to_string();
    if let Some(thread) = doc.thread.as_mut() {
        thread.thread_id = session_id;
    }
    doc
}
