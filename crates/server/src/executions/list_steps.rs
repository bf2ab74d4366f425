//! `GET /v1/executions/{id}/steps`: an execution's steps by step number, paginated.

use axum::Json;
use axum::extract::{Path, State};
use stepwise_core::Step;
use stepwise_store::Store;

use super::{PageQuery, load};
use crate::auth::Caller;
use crate::error::{ApiQuery, ApiResult, ErrorBody};
use crate::schemas::{IdPath, PageParams};
use crate::sessions::paginate;
use crate::shapes::StepList;
use crate::{AppState, List};

pub async fn list_steps<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<List<Step>>> {
    let execution = load(&state, &caller, &id).await?;
    let steps = state
        .store()
        .list_steps(&caller.tenant, execution.id)
        .await?;
    Ok(Json(paginate(steps.items, &query.limit, &query.cursor)?))
}

#[utoipa::path(get, path = "/v1/executions/{id}/steps", tag = "executions", operation_id = "list_steps",
    params(IdPath, PageParams),
    responses((status = 200, body = StepList), (status = 404, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}
