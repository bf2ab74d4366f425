//! Session names (seed 004): safe as a file name on every OS, unique per tenant.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("a name must be 1 to 64 characters long")]
    Length,
    #[error("a name may only contain letters, digits, '.', '_' and '-'")]
    Characters,
    #[error("a name may not contain '..'")]
    DotDot,
    #[error("'{0}' is a reserved name")]
    Reserved(String),
}

pub const MAX_NAME_LEN: usize = 64;

/// What an agent type may be called: a letter or digit, then up to 63 of
/// `[A-Za-z0-9._-]` (`AGENT_TYPE_PATTERN`).
pub fn is_agent_type(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_NAME_LEN
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// [`is_agent_type`] as a regular expression (for JSON Schema).
pub const AGENT_TYPE_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$";

/// Checks a session name against seed 004's rules: `[A-Za-z0-9._-]`, 1–64 characters,
/// no `..`, and none of the reserved names (`index`, `metadata`, OS device names).
pub fn validate_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(NameError::Length);
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(NameError::Characters);
    }
    if name.contains("..") {
        return Err(NameError::DotDot);
    }
    if is_reserved(name) {
        return Err(NameError::Reserved(name.to_string()));
    }
    Ok(())
}

fn is_reserved(name: &str) -> bool {
    // Windows reserves device names with any extension too (`CON.txt`).
    let stem = name.split('.').next().unwrap_or(name).to_ascii_uppercase();
    let lower = name.to_ascii_lowercase();
    if matches!(lower.as_str(), "index" | "metadata" | ".") {
        return true;
    }
    if matches!(stem.as_str(), "CON" | "PRN" | "AUX" | "NUL") {
        return true;
    }
    for prefix in ["COM", "LPT"] {
        if let Some(rest) = stem.strip_prefix(prefix)
            && rest.len() == 1
            && rest.as_bytes()[0].is_ascii_digit()
            && rest != "0"
        {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_names() {
        for ok in [
            "alpha",
            "a",
            "session-1",
            "my_notes.v2",
            &"x".repeat(64),
            "COM10",
            "console",
        ] {
            assert_eq!(validate_name(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn refuses_unsafe_names() {
        for bad in [
            "",
            &"x".repeat(65),
            "../etc",
            "a/b",
            "a\\b",
            "a..b",
            "..",
            "sp ace",
            "é",
        ] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        for reserved in [
            "index", "INDEX", "metadata", "con", "CON", "nul.txt", "Com1", "lpt9", "aux", "PRN",
        ] {
            assert!(
                matches!(validate_name(reserved), Err(NameError::Reserved(_))),
                "{reserved}"
            );
        }
    }
}
