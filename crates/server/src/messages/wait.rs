//! `?wait=S` on the message posts: for a caller without an event stream (a `curl`, a
//! script), the post answers 200 with the finished execution and its answer when the
//! execution ends within `S` seconds (at most 60), else 202 as without it. It follows the
//! session's live events, so it answers as soon as the end is stored.

use std::time::Duration;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use stepwise_core::{Execution, Id, Message, Role};
use stepwise_store::{MessageQuery, Store};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use super::MessageAccepted;
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};

/// The longest `?wait=`, in seconds.
pub const MAX_WAIT_S: f64 = 60.0;

/// `?wait=S`: seconds to wait for the execution to end (0 < S ≤ 60; fractions allowed).
/// api.md documents it; the OpenAPI document leaves it out, so that property-based
/// clients do not hold a request open for up to a minute on a run that waits for a worker.
#[derive(Debug, Default, Deserialize)]
pub struct WaitQuery {
    pub wait: Option<String>,
}

impl WaitQuery {
    pub(crate) fn duration(&self) -> ApiResult<Option<Duration>> {
        let Some(text) = &self.wait else {
            return Ok(None);
        };
        match text.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && (0.0..=MAX_WAIT_S).contains(&s) => {
                Ok((s > 0.0).then(|| Duration::from_secs_f64(s)))
            }
            _ => Err(ApiError::invalid(
                "wait",
                format!("wait must be a number of seconds from 0 to {MAX_WAIT_S}"),
            )),
        }
    }
}

/// The answer of a post that waited for its execution to end.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MessageAnswered {
    #[schema(value_type = String, format = Uuid)]
    pub session_id: Id,
    pub message: Message,
    /// The execution, ended (`completed`, `failed` or `cancelled`).
    pub execution: Execution,
    /// The agent's answer: the assistant message the execution wrote (`null` when it wrote
    /// none, e.g. it failed).
    #[schema(nullable)]
    pub answer: Option<Message>,
}

/// 202 with `accepted`, or, with a wait, 200 once its execution ends within it.
pub(crate) async fn respond<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    accepted: MessageAccepted,
    wait: Option<Duration>,
) -> ApiResult<Response> {
    let Some(wait) = wait else {
        return Ok((StatusCode::ACCEPTED, Json(accepted)).into_response());
    };
    let store = state.store();
    let deadline = Instant::now() + wait;
    let mut live = store.subscribe(&caller.tenant, accepted.session_id);
    let execution_id = accepted.execution.id;
    loop {
        let Some(execution) = store.get_execution(&caller.tenant, execution_id).await? else {
            break;
        };
        if execution.status.is_finished() {
            let answer = store
                .list_messages(
                    &caller.tenant,
                    accepted.session_id,
                    MessageQuery {
                        after: Some(accepted.message.id),
                        roles: Some(vec![Role::Assistant]),
                        limit: Some(stepwise_store::MAX_PAGE_LIMIT),
                    },
                )
                .await?
                .into_iter()
                .rfind(|m| m.execution_id == Some(execution_id));
            let answered = MessageAnswered {
                session_id: accepted.session_id,
                message: accepted.message,
                execution,
                answer,
            };
            return Ok((StatusCode::OK, Json(answered)).into_response());
        }
        // Any event of the session (or a lag, or the deadline) is a reason to look again.
        match tokio::time::timeout_at(deadline, live.recv()).await {
            Err(_) => break,
            Ok(Ok(_) | Err(RecvError::Lagged(_))) => {}
            Ok(Err(RecvError::Closed)) => {
                tokio::time::sleep_until(
                    (Instant::now() + Duration::from_millis(100)).min(deadline),
                )
                .await;
                if Instant::now() >= deadline {
                    break;
                }
            }
        }
    }
    let execution = store
        .get_execution(&caller.tenant, execution_id)
        .await?
        .unwrap_or(accepted.execution);
    Ok((
        StatusCode::ACCEPTED,
        Json(MessageAccepted {
            execution,
            ..accepted
        }),
    )
        .into_response())
}
