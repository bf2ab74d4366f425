//! `GET /v1/sessions/{id}/executions`: a session's executions, oldest first, paginated.

use axum::Json;
use axum::extract::{Path, State};
use stepwise_core::Execution;
use stepwise_store::Store;

use super::PageQuery;
use crate::auth::Caller;
use crate::error::{ApiError, ApiQuery, ApiResult, ErrorBody, path_id};
use crate::schemas::{IdPath, PageParams};
use crate::sessions::paginate;
use crate::shapes::ExecutionList;
use crate::{AppState, List};

pub async fn list<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<List<Execution>>> {
    let id = path_id(&id, "id")?;
    state
        .store()
        .get_session(&caller.tenant, id)
        .await?
        .ok_or_else(|| ApiError::not_found("session"))?;
    let executions = state.store().list_executions(&caller.tenant, id).await?;
    Ok(Json(paginate(executions, &query.limit, &query.cursor)?))
}

#[utoipa::path(get, path = "/v1/sessions/{id}/executions", tag = "executions", operation_id = "list_executions",
    params(IdPath, PageParams),
    responses((status = 200, body = ExecutionList), (status = 404, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}
