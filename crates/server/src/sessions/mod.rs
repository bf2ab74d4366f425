//! Sessions: one file per endpoint (its request and response types with their schema
//! constraints, its validation, its OpenAPI doc and its handler), and here what several of
//! them share: the limits on session text, loading a session of the caller's tenant, and
//! paging a list.
//!
//! Adding an endpoint: a new file beside these with its `doc()` and handler, one line in
//! the router (`crate::app`) and one in `crate::openapi::ApiDoc`'s `paths(...)`.

pub(crate) mod create;
pub(crate) mod delete;
pub(crate) mod export;
pub(crate) mod fork;
pub(crate) mod get;
pub(crate) mod import;
pub(crate) mod list;
pub(crate) mod memory;
pub(crate) mod update;

use stepwise_core::{Id, Session};
use stepwise_store::Store;

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::{AppState, List};

pub use crate::limits::{MAX_CONTENT_CHARS, MAX_URL_CHARS, check_metadata, check_text};

/// Longest session title, in characters.
pub const MAX_TITLE_CHARS: usize = 500;
/// Longest `related_type` / `related_id`, in characters.
pub const MAX_REF_CHARS: usize = 256;
/// Longest free text an external agent sends (a step, a final message, a question).
pub const MAX_CONTENT_BYTES: usize = 1024 * 1024;
/// Rows a document may hold per kind (the body limit bounds it too).
pub const MAX_DOCUMENT_ROWS: usize = 100_000;

/// The session `id` of the caller's tenant, or 404.
pub(crate) async fn load_session<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    id: Id,
) -> ApiResult<Session> {
    state
        .store()
        .get_session(&caller.tenant, id)
        .await?
        .ok_or_else(|| ApiError::not_found("session"))
}

/// Reads a list's `limit` (1 to 500, 50 when absent).
pub fn parse_limit(limit: &Option<String>) -> ApiResult<u32> {
    match limit {
        None => Ok(stepwise_store::DEFAULT_PAGE_LIMIT),
        Some(text) => match text.trim().parse::<u32>() {
            Ok(n) if (1..=stepwise_store::MAX_PAGE_LIMIT).contains(&n) => Ok(n),
            _ => Err(ApiError::invalid(
                "limit",
                "limit must be an integer from 1 to 500",
            )),
        },
    }
}

/// Pages a list held in memory; the cursor is the position of the next item.
pub fn paginate<T>(
    items: Vec<T>,
    limit: &Option<String>,
    cursor: &Option<String>,
) -> ApiResult<List<T>> {
    let limit = parse_limit(limit)? as usize;
    let start = match cursor {
        None => 0,
        Some(text) => {
            let (at, _) = stepwise_store::cursor::decode(text).map_err(ApiError::from)?;
            usize::try_from(at.as_micros()).map_err(|_| {
                ApiError::invalid("cursor", "the cursor is not one this server issued")
            })?
        }
    };
    let total = items.len();
    let page: Vec<T> = items.into_iter().skip(start).take(limit).collect();
    let next = start + page.len();
    let next_cursor = (next < total).then(|| {
        stepwise_store::cursor::encode(
            stepwise_core::Timestamp(i64::try_from(next).unwrap_or(i64::MAX)),
            Id::nil(),
        )
    });
    Ok(List {
        items: page,
        next_cursor,
    })
}

/// A session's default agent from a request: checked like a message's agent.
pub(crate) fn session_agent<S: stepwise_store::Store>(
    state: &crate::AppState<S>,
    agent: crate::messages::AgentBody,
) -> crate::error::ApiResult<stepwise_core::SessionAgent> {
    let choice = agent.checked("agent")?;
    state.engine.check_agent_type(&choice.agent_type)?;
    Ok(stepwise_core::SessionAgent {
        agent_type: choice.agent_type,
        config: choice.config,
    })
}
