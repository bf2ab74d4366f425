//! `POST /v1/sessions/{id}/fork`: a new session holding the session as it was at a point
//! (after an execution, or at one of its steps; the latest when none is given): its
//! messages, executions, steps and snapshots up to there, and for a LangGraph thread its
//! checkpoints up to there. Its agent memory restores exactly at that point; the original
//! is untouched. The fork belongs to the caller.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde_json::Value;
use stepwise_core::name::validate_name;
use stepwise_core::{Id, Session};
use stepwise_store::rules::{ForkCut, ForkPoint, cut_document};
use stepwise_store::{CheckpointStore, Store, StoreError, export_session};

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, ErrorBody, path_id};
use crate::schemas::IdPath;

/// Where the fork ends, and its name. Every field is optional; an empty body (or none)
/// forks the whole session.
#[derive(Debug, Default, utoipa::ToSchema)]
#[allow(dead_code)] // the schema of a body read by `fork_point`
pub struct ForkBody {
    /// A root execution of the session: the fork ends after it (the latest when absent).
    #[schema(schema_with = crate::schemas::uuid_or_null)]
    pub execution_id: Option<Id>,
    /// A step of that execution: the fork holds what the execution had written up to
    /// this step, and shows the execution as cancelled there.
    #[schema(minimum = 1, maximum = 4294967295_u64)]
    pub step_number: Option<u32>,
    /// The new session's name (unique in the tenant; none when absent).
    #[schema(schema_with = crate::schemas::name)]
    pub name: Option<String>,
}

#[utoipa::path(post, path = "/v1/sessions/{id}/fork", tag = "sessions", operation_id = "fork_session",
    params(IdPath), request_body(content = Option<ForkBody>, description = "optional: an empty body forks the whole session"),
    responses((status = 201, body = Session, description = "the new session"),
              (status = 400, body = ErrorBody, description = "a field is invalid"),
              (status = 404, body = ErrorBody, description = "no such session"),
              (status = 422, body = ErrorBody, description = "`invalid_state`: `execution_id` is not a root execution of the session, or `step_number` not a step of that execution (`field` names which)"),
              (status = 409, body = ErrorBody, description = "`name` is taken")))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn fork<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<impl IntoResponse> {
    let id = path_id(&id, "id")?;
    let (point, name) = fork_body(&headers, &body)?;
    let session = fork_session(&state, &caller, id, point, name).await?;
    Ok((StatusCode::CREATED, Json(session)))
}

/// The session `id` forked at `point` (see the module's docs), named `name`: the new session,
/// the caller's.
pub async fn fork_session<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    id: Id,
    point: ForkPoint,
    name: Option<String>,
) -> ApiResult<Session> {
    let document = export_session(state.store(), &caller.tenant, id)
        .await?
        .ok_or_else(|| ApiError::not_found("session"))?;
    let (mut document, cut) = cut_document(document, point).map_err(|e| match e {
        StoreError::NotFound("step") => {
            not_in_session("step_number", "step_number is not a step of that execution")
        }
        StoreError::NotFound(_) => not_in_session(
            "execution_id",
            "execution_id is not a root execution of this session",
        ),
        other => other.into(),
    })?;
    document.session.name = name;
    let own_thread = document.thread.is_some();
    let store = state.store();
    let session = store
        .import_document(&caller.tenant, &caller.user_id, document)
        .await?;
    if !own_thread && let Err(e) = fork_worker_thread(state, caller, id, session.id, &cut).await {
        // The fork is all or nothing: without its thread it goes again.
        if let Err(cleanup) = store.delete_session(&caller.tenant, session.id).await {
            tracing::warn!(session = %session.id, error = %cleanup, "a fork whose thread failed could not be deleted");
        }
        return Err(e);
    }
    Ok(session)
}

/// 422 for a fork point the session does not have (the session itself exists: a 404 would
/// say it does not).
fn not_in_session(field: &str, message: &str) -> ApiError {
    ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_state", message).with_field(field)
}

/// A worker's LangGraph agent keeps its thread apart, named after the session
/// (`thread_id` = the session id): the fork gets that thread too, cut at the same point and
/// named after the fork, so the agent goes on from there.
async fn fork_worker_thread<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    source: Id,
    fork: Id,
    cut: &ForkCut,
) -> ApiResult<()> {
    let store = state.store();
    let Some(checkpoints) = store.checkpoints() else {
        return Ok(());
    };
    let Some(thread) = checkpoints
        .get_thread(&caller.tenant, &source.to_string())
        .await?
    else {
        return Ok(());
    };
    let Some(mut document) = export_session(store, &caller.tenant, thread.session_id).await? else {
        return Ok(());
    };
    let Some(mut rows) = document.thread.take() else {
        return Ok(());
    };
    cut.cut_thread(&mut rows);
    rows.thread_id = fork.to_string();
    document.thread = Some(rows);
    document.session.name = Some(fork.to_string());
    document.messages.clear();
    document.executions.clear();
    document.steps.clear();
    document.snapshots.clear();
    store
        .import_document(&caller.tenant, &caller.user_id, document)
        .await?;
    Ok(())
}

/// Reads the body: none, empty or `null` is `{}`; otherwise a JSON object of [`ForkBody`]'s
/// fields (whole numbers may be written as floats).
fn fork_body(headers: &HeaderMap, body: &Bytes) -> ApiResult<(ForkPoint, Option<String>)> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok((ForkPoint::default(), None));
    }
    crate::error::check_charset(headers)?;
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?;
    let fields = match value {
        Value::Object(fields) => fields,
        Value::Null => return Ok((ForkPoint::default(), None)),
        _ => return Err(ApiError::bad_request("the body must be a JSON object")),
    };
    let execution_id = match fields.get("execution_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(path_id(text, "execution_id")?),
        Some(_) => {
            return Err(ApiError::invalid(
                "execution_id",
                "execution_id must be an execution's id",
            ));
        }
    };
    let step_number = match fields.get("step_number") {
        None | Some(Value::Null) => None,
        number => {
            Some(crate::checkpoints::integer(number, "step_number", 1, u32::MAX.into())? as u32)
        }
    };
    let name = match fields.get("name") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => {
            validate_name(name).map_err(|e| ApiError::invalid("name", e.to_string()))?;
            Some(name.clone())
        }
        Some(_) => return Err(ApiError::invalid("name", "name must be a string")),
    };
    Ok((
        ForkPoint {
            execution_id,
            step_number,
        },
        name,
    ))
}
