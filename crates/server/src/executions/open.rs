//! `POST /v1/sessions/{id}/executions`: opens a running execution an agent outside the
//! server drives over HTTP (steps, snapshots, then complete, fail or pause), or queues
//! one for a worker's agent type (a worker agent's subagent: `docs/workers.md`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use stepwise_core::{Execution, Id};
use stepwise_engine::{EXTERNAL_AGENT, OpenExternal};
use stepwise_store::Store;

use super::schema;
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult, ErrorBody, path_id};
use crate::schemas::IdPath;
use crate::sessions::check_metadata;

/// The execution to open.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct OpenExecutionBody {
    #[schema(schema_with = schema::external_agent_type)]
    pub agent_type: String,
    #[serde(default)]
    pub input: Value,
    #[schema(schema_with = schema::object_or_null)]
    pub agent_config: Option<Value>,
    #[schema(schema_with = schema::uuid_or_null)]
    pub parent_execution_id: Option<String>,
    #[schema(schema_with = schema::object_or_null)]
    pub metadata: Option<Value>,
    /// An external execution is held under a lease its recorder renews (every write
    /// carrying it in the `Stepwise-Lease` header, and `POST /v1/executions/{id}/heartbeat`);
    /// when none comes within the lease, the server fails it ("its recorder stopped") and
    /// the session's queue moves on. `false`: no lease, held `running` until finished
    /// (the behaviour before leases, for recorders that never renew; kept for one release).
    #[serde(default)]
    pub lease: Option<bool>,
}

/// An opened execution: the Execution, and for a leased external one its lease.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OpenedExecution {
    #[serde(flatten)]
    pub execution: Execution,
    /// The lease token: send it as the `Stepwise-Lease` header on the execution's writes
    /// and in its heartbeats (`null`: not leased).
    pub lease: Option<String>,
    /// How often to heartbeat while nothing else is written (a third of the lease;
    /// `null`: not leased). The lease runs out at `lease_expires_at`.
    pub heartbeat_interval_s: Option<f64>,
}

pub async fn open<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<OpenExecutionBody>,
) -> ApiResult<impl IntoResponse> {
    let session_id = path_id(&id, "id")?;
    let for_worker = state.engine.is_worker_agent(&body.agent_type);
    if body.agent_type != EXTERNAL_AGENT && !for_worker {
        return Err(ApiError::invalid(
            "agent_type",
            "agent_type must be \"external\" or a worker's agent type; built-in agents run from messages (POST /v1/sessions/{id}/messages)",
        ));
    }
    let agent_config = match body.agent_config {
        None | Some(Value::Null) => Value::Null,
        Some(config @ Value::Object(_)) => config,
        Some(_) => {
            return Err(ApiError::invalid(
                "agent_config",
                "agent_config must be a JSON object",
            ));
        }
    };
    let metadata = check_metadata("metadata", &body.metadata)?;
    let session = state
        .store()
        .get_session(&caller.tenant, session_id)
        .await?
        .ok_or_else(|| ApiError::not_found("session"))?;
    let parent_execution_id =
        parent_in_session(&state, &caller, session.id, &body.parent_execution_id).await?;
    let open = OpenExternal {
        session_id: session.id,
        parent_execution_id,
        user_id: caller.user_id.clone(),
        agent_config,
        input: body.input,
        metadata,
        leased: body.lease != Some(false),
    };
    let opened = if for_worker {
        let execution = state
            .engine
            .queue_for_worker(&caller.tenant, open, body.agent_type)
            .await?;
        OpenedExecution {
            execution,
            lease: None,
            heartbeat_interval_s: None,
        }
    } else {
        let opened = state.engine.open_external(&caller.tenant, open).await?;
        let heartbeat_interval_s = opened
            .lease
            .is_some()
            .then(|| crate::workers::heartbeat_interval_s(state.engine.config().lease));
        OpenedExecution {
            execution: opened.execution,
            lease: opened.lease,
            heartbeat_interval_s,
        }
    };
    Ok((StatusCode::CREATED, Json(opened)))
}

/// The parent execution named by the body, which must be in the session.
async fn parent_in_session<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    session_id: Id,
    parent: &Option<String>,
) -> ApiResult<Option<Id>> {
    let Some(text) = parent else { return Ok(None) };
    let parent_id = stepwise_core::parse_id(text).ok_or_else(|| {
        ApiError::invalid(
            "parent_execution_id",
            "parent_execution_id must be an execution id",
        )
    })?;
    let parent = state
        .store()
        .get_execution(&caller.tenant, parent_id)
        .await?;
    if parent.is_none_or(|p| p.session_id != Some(session_id)) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "the parent execution is not in this session",
        )
        .with_field("parent_execution_id"));
    }
    Ok(Some(parent_id))
}

#[utoipa::path(post, path = "/v1/sessions/{id}/executions", tag = "external agents", operation_id = "open_execution",
    params(IdPath), request_body = OpenExecutionBody,
    responses((status = 201, body = OpenedExecution), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}
