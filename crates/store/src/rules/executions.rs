//! Checks on execution writes that do not depend on how rows are stored.

use stepwise_core::ExecutionStatus;

use crate::{Result, StoreError, Transition};

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
