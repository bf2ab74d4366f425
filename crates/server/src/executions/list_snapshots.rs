//! `GET /v1/executions/{id}/snapshots`: an execution's snapshots, oldest first, without
//! their state (read one with `GET /v1/snapshots/{id}`), paginated.

use axum::Json;
use axum::extract::{Path, State};
use stepwise_core::Snapshot;
use stepwise_store::Store;

use super::{PageQuery, load};
use crate::auth::Caller;
use crate::error::{ApiQuery, ApiResult, ErrorBody};
use crate::schemas::{IdPath, PageParams};
use crate::sessions::paginate;
use crate::shapes::SnapshotList;
use crate::{AppState, List};

pub async fn list_snapshots<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<List<Snapshot>>> {
    let execution = load(&state, &caller, &id).await?;
    let snapshots = state
        .store()
        .list_snapshots(&caller.tenant, execution.id)
        .await?;
    Ok(Json(paginate(snapshots, &query.limit, &query.cursor)?))
}

#[utoipa::path(get, path = "/v1/executions/{id}/snapshots", tag = "executions", operation_id = "list_snapshots",
    params(IdPath, PageParams),
    responses((status = 200, body = SnapshotList), (status = 404, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}
