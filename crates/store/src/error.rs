use stepwise_core::name::NameError;

/// Every way a storage call can fail. Not-found is not an error: reads answer `Option`.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum StoreError {
    /// The tenant was empty or malformed; never treated as "all tenants".
    #[error("a tenant id is required")]
    InvalidTenant,
    /// The input breaks a rule of the data model.
    #[error("{message}")]
    Invalid {
        field: Option<&'static str>,
        message: String,
    },
    /// A uniqueness rule (a session name, a step number with another body).
    #[error("{0}")]
    Conflict(String),
    /// The row exists but is in a state that does not allow this (a finished execution).
    #[error("{0}")]
    InvalidState(String),
    /// The session already has a root execution queued or running, and the write was to
    /// queue another only if it had none ([`crate::IfBusy::Refuse`]).
    #[error("{0}")]
    Busy(String),
    /// A worker's lease on an execution is not current (expired and taken over, the
    /// execution paused, cancelled or finished, or not its lease at all): the worker's
    /// write is refused and nothing is written.
    #[error("{0}")]
    LeaseLost(String),
    /// A row the call refers to does not exist for this tenant.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The database cannot be reached or written (down, locked, writer stopped).
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// The database's disk (or quota) is full: writes fail until space is freed; reads
    /// still work.
    #[error("storage full: {0}")]
    StorageFull(String),
    /// Anything else the backend reports; a bug or an unexpected database error.
    #[error("storage error: {0}")]
    Backend(String),
}

impl StoreError {
    pub fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        StoreError::Invalid {
            field: Some(field),
            message: message.into(),
        }
    }
}

impl From<NameError> for StoreError {
    fn from(e: NameError) -> Self {
        StoreError::invalid("name", e.to_string())
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
