//! Checks on execution writes that do not depend on how rows are stored.

use stepwise_core::{ExecutionStatus, Id, Timestamp};

use crate::{NewEvent, NewExecution, NewMessage, Result, StoreError, Transition};

/// Refuses a transition the execution lifecycle does not allow from `current`.
pub fn check_transition(current: ExecutionStatus, transition: &Transition) -> Result<()> {
    let target = transition.target();
    if current.can_become(target) {
        Ok(())
    } else {
        Err(StoreError::InvalidState(format!(
            "the execution is {current} and cannot become {target}"
        )))
    }
}

/// What a move writes besides the status, as SQL backends store it: the output and the
/// resume answer as JSON text, the error message, and when the execution finished (a
/// terminal move, in microseconds).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MoveColumns {
    pub output: Option<String>,
    pub error_message: Option<String>,
    pub resume_answer: Option<String>,
    pub completed_at: Option<i64>,
}

impl MoveColumns {
    pub fn of(transition: &Transition, now: Timestamp) -> MoveColumns {
        let text = |value: &serde_json::Value| {
            serde_json::to_string(value).unwrap_or_else(|_| "null".into())
        };
        match transition {
            Transition::Pause { .. } => MoveColumns::default(),
            Transition::Resume { answer } => MoveColumns {
                resume_answer: Some(text(answer)),
                ..MoveColumns::default()
            },
            Transition::Complete { output } => MoveColumns {
                output: Some(text(output)),
                completed_at: Some(now.0),
                ..MoveColumns::default()
            },
            Transition::Fail { error_message } => MoveColumns {
                error_message: Some(error_message.clone()),
                completed_at: Some(now.0),
                ..MoveColumns::default()
            },
            Transition::Cancel => MoveColumns {
                completed_at: Some(now.0),
                ..MoveColumns::default()
            },
        }
    }
}

/// [`StoreError::Busy`] when one of a session's executions (`(parent, status)`) is a root
/// execution queued or running ([`crate::IfBusy::Refuse`]).
pub fn refuse_if_busy(
    executions: impl IntoIterator<Item = (Option<Id>, ExecutionStatus)>,
) -> Result<()> {
    let busy = executions.into_iter().any(|(parent, status)| {
        parent.is_none() && matches!(status, ExecutionStatus::Pending | ExecutionStatus::Running)
    });
    if busy {
        return Err(StoreError::Busy(BUSY.to_string()));
    }
    Ok(())
}

/// What [`refuse_if_busy`] answers.
pub const BUSY: &str = "the session has an execution queued or running";

/// Refuses step number 0: steps are numbered from 1.
pub fn check_step_number(step_number: u32) -> Result<()> {
    if step_number == 0 {
        return Err(StoreError::invalid(
            "step_number",
            "step numbers start at 1",
        ));
    }
    Ok(())
}

/// What [`ExecutionStore::create_execution_with_messages`](crate::ExecutionStore::create_execution_with_messages)
/// accepts: a top-level execution of a session, with messages and events of that session.
/// Answers the session.
pub fn check_execution_with_messages(
    new: &NewExecution,
    messages: &[NewMessage],
    events: &[NewEvent],
) -> Result<Id> {
    let session_id = new.session_id.ok_or_else(|| {
        StoreError::invalid(
            "session_id",
            "an execution created with messages has a session",
        )
    })?;
    if new.parent_execution_id.is_some() {
        return Err(StoreError::invalid(
            "parent_execution_id",
            "an execution created with messages is a top-level one",
        ));
    }
    if messages.iter().any(|m| m.session_id != session_id)
        || events.iter().any(|e| e.session_id != session_id)
    {
        return Err(StoreError::invalid(
            "session_id",
            "the messages and events belong to the execution's session",
        ));
    }
    Ok(session_id)
}

/// What [`ExecutionStore::remove_executions`](crate::ExecutionStore::remove_executions)
/// deletes of a session holding `executions`: the listed ones that belong to it and every
/// sub-execution below them. `InvalidState` when one of them is not finished (nothing is
/// deleted). Also answers the session's last root execution once they are gone.
pub fn removal_set(
    executions: &[stepwise_core::Execution],
    ids: &[Id],
) -> Result<(Vec<Id>, Option<Id>)> {
    let mut gone: Vec<Id> = executions
        .iter()
        .filter(|e| ids.contains(&e.id))
        .map(|e| e.id)
        .collect();
    let mut grew = true;
    while grew {
        grew = false;
        for e in executions {
            if let Some(parent) = e.parent_execution_id
                && gone.contains(&parent)
                && !gone.contains(&e.id)
            {
                gone.push(e.id);
                grew = true;
            }
        }
    }
    if let Some(running) = executions
        .iter()
        .find(|e| gone.contains(&e.id) && !e.status.is_finished())
    {
        return Err(StoreError::InvalidState(format!(
            "execution {} is {}: only a finished execution can be removed",
            running.id, running.status
        )));
    }
    let last_root = executions
        .iter()
        .filter(|e| e.parent_execution_id.is_none() && !gone.contains(&e.id))
        .max_by_key(|e| (e.created_at, e.id))
        .map(|e| e.id);
    Ok((gone, last_root))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_execution_cannot_move_on() {
        let cancel = Transition::Cancel;
        assert_eq!(check_transition(ExecutionStatus::Running, &cancel), Ok(()));
        assert!(matches!(
            check_transition(ExecutionStatus::Completed, &cancel),
            Err(StoreError::InvalidState(m)) if m.contains("completed")
        ));
    }

    #[test]
    fn step_numbers_start_at_one() {
        assert!(matches!(
            check_step_number(0),
            Err(StoreError::Invalid {
                field: Some("step_number"),
                ..
            })
        ));
        assert_eq!(check_step_number(1), Ok(()));
    }
}
