//! Operations endpoints, one file each: liveness, readiness, Prometheus metrics and the
//! OpenAPI document. None of them is under `/v1`: they answer without an API key.

pub(crate) mod healthz;
pub(crate) mod limits;
pub(crate) mod metrics;
pub(crate) mod openapi;
pub(crate) mod readyz;
pub(crate) mod retention;

pub use metrics::{
    StatusCache, record_retention_failure, record_retention_pass, record_retention_skipped,
};
