//! Executions, steps and snapshots, and the endpoints external agents drive: one file per
//! endpoint, each holding its request type with its schema constraints, its validation,
//! its OpenAPI `doc` and its handler. Handlers only translate HTTP: every change of an
//! execution is a method of the engine (`Engine::complete_external`...).

pub(crate) mod append_step;
pub(crate) mod append_steps;
pub(crate) mod cancel;
pub(crate) mod complete;
pub(crate) mod fail;
pub(crate) mod get;
pub(crate) mod get_snapshot;
pub(crate) mod list;
pub(crate) mod list_snapshots;
pub(crate) mod list_steps;
pub(crate) mod open;
pub(crate) mod pause;
pub(crate) mod post_message;
pub(crate) mod save_snapshot;
mod schema;

use serde::Deserialize;
use serde_json::Value;
use stepwise_core::Execution;
use stepwise_store::Store;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, path_id};

/// Longest `error_message` of `POST /v1/executions/{id}/fail`, in characters.
pub const MAX_ERROR_CHARS: usize = 65_536;
pub use crate::limits::MAX_TOOL_CALLS_PER_STEP;

/// `limit` and `cursor` of a list.
#[derive(Debug, Default, Deserialize)]
pub struct PageQuery {
    pub limit: Option<String>,
    pub cursor: Option<String>,
}

/// Reads a JSON body into `T`, taking whole numbers written as floats (`3.0`, which JSON
/// Schema calls an integer) at the `integers` pointers as integers.
pub(crate) fn typed_body<T: serde::de::DeserializeOwned>(
    mut body: Value,
    integers: &[&str],
) -> ApiResult<T> {
    for pointer in integers {
        if let Some(number) = body.pointer_mut(pointer)
            && number.is_f64()
            && let Some(f) = number.as_f64()
            && f.fract() == 0.0
            && (0.0..=9_007_199_254_740_992.0).contains(&f)
        {
            *number = Value::from(f as u64);
        }
    }
    serde_json::from_value(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not valid: {e}")))
}

/// The caller's execution with this id (404 when it is not theirs).
async fn load<S: Store>(state: &AppState<S>, caller: &Caller, id: &str) -> ApiResult<Execution> {
    let id = path_id(id, "id")?;
    state
        .store()
        .get_execution(&caller.tenant, id)
        .await?
        .ok_or_else(|| ApiError::not_found("execution"))
}

/// The caller's external or worker execution with this id, checked for a write: 422 when
/// a built-in agent runs it, 409 `lease_lost` when a worker's execution comes without its
/// current lease (see `docs/workers.md`).
async fn load_external<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    id: &str,
    lease: &LeaseHeader,
) -> ApiResult<Execution> {
    let id = path_id(id, "id")?;
    Ok(state
        .engine
        .driven_execution(&caller.tenant, id, lease.0.as_deref())
        .await?)
}

/// The `Stepwise-Lease` header: the lease of a worker's claim, sent with every write.
#[derive(Debug, Default)]
pub struct LeaseHeader(pub Option<String>);

/// The longest lease token taken (they are 38 characters).
const MAX_LEASE_CHARS: usize = 128;

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for LeaseHeader {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        let Some(value) = parts.headers.get(LEASE_HEADER) else {
            return Ok(LeaseHeader(None));
        };
        match value.to_str() {
            Ok(text)
                if !text.is_empty()
                    && text.len() <= MAX_LEASE_CHARS
                    && text.bytes().all(|b| b.is_ascii_graphic()) =>
            {
                Ok(LeaseHeader(Some(text.to_string())))
            }
            _ => Err(ApiError::invalid(
                LEASE_HEADER,
                format!(
                    "the {LEASE_HEADER} header must be a lease token of at most {MAX_LEASE_CHARS} characters"
                ),
            )),
        }
    }
}

/// The header a worker's writes carry their lease in.
pub const LEASE_HEADER: &str = "stepwise-lease";
