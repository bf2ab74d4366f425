//! The session name rule and the conflicts a taken name reports.

use stepwise_core::name::validate_name;

use crate::{Result, StoreError};

/// Checks a session name given on create, update or import; no name is always fine.
pub fn check_name(name: Option<&str>) -> Result<()> {
    match name {
        Some(name) => validate_name(name).map_err(StoreError::from),
        None => Ok(()),
    }
}

/// The conflict of creating (or importing) a session under a name the tenant already uses.
pub fn name_taken(name: Option<&str>) -> StoreError {
    StoreError::Conflict(format!(
        "a session named '{}' already exists",
        name.unwrap_or_default()
    ))
}

/// The conflict of renaming a session to a name another session of the tenant uses.
pub fn rename_taken() -> StoreError {
    StoreError::Conflict("a session with that name already exists".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_name_passes_and_a_valid_one_too() {
        assert_eq!(check_name(None), Ok(()));
        assert_eq!(check_name(Some("support-42")), Ok(()));
    }

    #[test]
    fn a_name_breaking_the_rules_is_invalid_on_the_name_field() {
        for bad in ["", "has space", "a/b"] {
            match check_name(Some(bad)) {
                Err(StoreError::Invalid { field, .. }) => assert_eq!(field, Some("name")),
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn a_taken_name_is_a_conflict_naming_it() {
        assert_eq!(
            name_taken(Some("alpha")),
            StoreError::Conflict("a session named 'alpha' already exists".into())
        );
        assert!(matches!(rename_taken(), StoreError::Conflict(_)));
    }
}
