//! What each role may do, checked once per request after auth (`docs/security.md`):
//! - `admin`: everything in its tenant.
//! - `user`: only its own sessions and everything under them (messages, executions, steps,
//!   snapshots, events, memory, export, items, LangGraph threads and checkpoints, AI SDK
//!   chats, AG-UI threads). Another user's is 404 `not_found`, exactly like another
//!   tenant's; the worker endpoints, keys, tokens and tenant-wide deletes are 403.
//! - `worker`: `GET /v1/agents`, claims, and the executions it holds a lease on (every call
//!   carries the claim's `Stepwise-Lease`); everything else is 403.
//!
//! The route's own path parameter names what a call reaches (`/sessions/{id}`,
//! `/executions/{id}`, `/snapshots/{id}`, `/threads/{thread_id}`); calls that name a session
//! in their body (the AI SDK chat, AG-UI) are checked where the session is looked up
//! (`runs::find_session`), and lists are narrowed by their handlers.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use stepwise_core::Id;
use stepwise_store::{AccessRole, Store, Tenant};

use super::Caller;
use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::executions::LEASE_HEADER;
use stepwise_store::prelude::*;

/// Routes (method, path under `/v1`) a `worker` may call.
const WORKER_ROUTES: &[(Method, &str)] = &[
    (Method::GET, "/agents"),
    (Method::GET, "/limits"),
    (Method::POST, "/workers/claim"),
    (Method::DELETE, "/workers/{worker_id}"),
    (Method::POST, "/executions/{id}/heartbeat"),
    (Method::POST, "/executions/{id}/deltas"),
    (Method::POST, "/executions/{id}/release"),
    (Method::GET, "/executions/{id}"),
    (Method::GET, "/executions/{id}/steps"),
    (Method::POST, "/executions/{id}/steps"),
    (Method::POST, "/executions/{id}/steps/batch"),
    (Method::GET, "/executions/{id}/snapshots"),
    (Method::POST, "/executions/{id}/snapshots"),
    (Method::POST, "/executions/{id}/complete"),
    (Method::POST, "/executions/{id}/fail"),
    (Method::POST, "/executions/{id}/pause"),
    (Method::POST, "/executions/{id}/messages"),
];

/// Routes a `user` may not call: the workers' own, and what reaches past one user.
const USER_FORBIDDEN: &[(Method, &str)] = &[
    (Method::POST, "/workers/claim"),
    (Method::DELETE, "/workers/{worker_id}"),
    (Method::POST, "/executions/{id}/heartbeat"),
    (Method::POST, "/executions/{id}/deltas"),
    (Method::POST, "/executions/{id}/release"),
    (Method::POST, "/checkpoints/delete-for-runs"),
    (Method::POST, "/keys"),
    (Method::GET, "/keys"),
    (Method::DELETE, "/keys/{id}"),
    (Method::POST, "/tokens"),
    (Method::GET, "/retention"),
    (Method::PUT, "/retention"),
];

/// The heartbeat a `user` may send: for an external execution of theirs (its recorder's
/// lease), never for a worker's.
const RECORDER_HEARTBEAT: (Method, &str) = (Method::POST, "/executions/{id}/heartbeat");

/// Session owners seen lately, by tenant and session id (an owner never changes).
#[derive(Default)]
pub struct Owners {
    sessions: Mutex<HashMap<(Tenant, Id), String>>,
}

const MAX_CACHED_OWNERS: usize = 100_000;

impl Owners {
    fn get(&self, tenant: &Tenant, id: Id) -> Option<String> {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(tenant.clone(), id))
            .cloned()
    }

    fn put(&self, tenant: &Tenant, id: Id, owner: &str) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if sessions.len() >= MAX_CACHED_OWNERS {
            sessions.clear();
        }
        sessions.insert((tenant.clone(), id), owner.to_string());
    }
}

/// Middleware for `/v1`, inside auth: 403 for a route the caller's role may not call, 404
/// for another user's session and what is under it.
pub async fn guard<S: Store>(
    State(state): State<AppState<S>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(caller) = request.extensions().get::<Caller>().cloned() else {
        return next.run(request).await;
    };
    if caller.role == AccessRole::Admin {
        return next.run(request).await;
    }
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|m| {
            m.as_str()
                .strip_prefix("/v1")
                .unwrap_or(m.as_str())
                .to_string()
        })
        .unwrap_or_default();
    let params = path_params(&route, request.uri().path());
    let lease = request
        .headers()
        .get(LEASE_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_string);
    let method = request.method().clone();
    let checked = match caller.role {
        AccessRole::Worker => {
            check_worker(&state, &caller, &method, &route, &params, lease.as_deref()).await
        }
        _ => check_user(&state, &caller, &method, &route, &params).await,
    };
    match checked {
        Ok(()) => next.run(request).await,
        Err(error) => error.into_response(),
    }
}

/// The route's `{name}` segments with what the path holds there (percent-decoded); `route`
/// and `path` are both under `/v1`.
fn path_params(route: &str, path: &str) -> Vec<(String, String)> {
    let path = path.strip_prefix("/v1").unwrap_or(path);
    route
        .split('/')
        .zip(path.split('/'))
        .filter_map(|(pattern, value)| {
            let name = pattern.strip_prefix('{')?.strip_suffix('}')?;
            let value = percent_decode(value)?;
            Some((name.to_string(), value))
        })
        .collect()
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes: Vec<u8> =
        url::form_urlencoded::parse(format!("v={}", text.replace('+', "%2B")).as_bytes())
            .next()
            .map(|(_, v)| v.into_owned().into_bytes())?;
    String::from_utf8(bytes).ok()
}

fn listed(routes: &[(Method, &str)], method: &Method, route: &str) -> bool {
    routes.iter().any(|(m, r)| m == method && *r == route)
}

fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

async fn check_worker<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    method: &Method,
    route: &str,
    params: &[(String, String)],
    lease: Option<&str>,
) -> ApiResult<()> {
    if !listed(WORKER_ROUTES, method, route) {
        return Err(ApiError::forbidden(format!(
            "a worker {} may only claim executions and write to the ones it holds a lease on; {method} /v1{route} is not for it",
            caller.credential_name()
        )));
    }
    if !route.starts_with("/executions/{id}") {
        return Ok(());
    }
    let lease = lease.ok_or_else(|| {
            ApiError::forbidden(
                "a worker reaches only the executions it holds a lease on: send the claim's Stepwise-Lease header",
            )
        })?;
    // Writes check the lease in their handler; a read checks it here (and renews it).
    if *method == Method::GET
        && let Some(id) = param(params, "id").and_then(stepwise_core::parse_id)
    {
        state
            .engine
            .driven_execution(&caller.tenant, id, Some(lease))
            .await?;
    }
    Ok(())
}

async fn check_user<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    method: &Method,
    route: &str,
    params: &[(String, String)],
) -> ApiResult<()> {
    if route == RECORDER_HEARTBEAT.1 && method == RECORDER_HEARTBEAT.0 {
        // A user's recorder renews the lease of the external execution it opened; a
        // worker's execution stays the workers' (and admins').
        if let Some(id) = param(params, "id").and_then(stepwise_core::parse_id)
            && let Some(execution) = state.store().get_execution(&caller.tenant, id).await?
            && execution.agent_type == stepwise_engine::EXTERNAL_AGENT
        {
            return check_session_of(state, caller, execution.session_id, "execution").await;
        }
    }
    if listed(USER_FORBIDDEN, method, route) {
        return Err(ApiError::forbidden(format!(
            "{method} /v1{route} is not for a `user` {}: it needs an admin's{}",
            caller.credential_name(),
            if route.starts_with("/workers")
                || route.ends_with("heartbeat")
                || route.ends_with("deltas")
                || route.ends_with("release")
            {
                " or a worker's"
            } else {
                ""
            }
        )));
    }
    if route.starts_with("/sessions/{id}") {
        if let Some(id) = param(params, "id").and_then(stepwise_core::parse_id) {
            check_session(state, caller, id, "session").await?;
        }
    } else if route.starts_with("/executions/{id}") {
        if let Some(id) = param(params, "id").and_then(stepwise_core::parse_id)
            && let Some(execution) = state.store().get_execution(&caller.tenant, id).await?
        {
            check_session_of(state, caller, execution.session_id, "execution").await?;
        }
    } else if route.starts_with("/snapshots/{id}") {
        if let Some(id) = param(params, "id").and_then(stepwise_core::parse_id)
            && let Some(snapshot) = state.store().get_snapshot(&caller.tenant, id).await?
        {
            let execution = state
                .store()
                .get_execution(&caller.tenant, snapshot.execution_id)
                .await?;
            check_session_of(
                state,
                caller,
                execution.and_then(|e| e.session_id),
                "snapshot",
            )
            .await?;
        }
    } else if route.starts_with("/threads/{thread_id}")
        && let Some(thread) = param(params, "thread_id")
    {
        check_thread(state, caller, thread).await?;
    }
    Ok(())
}

/// 404 unless the caller sees this session (absent sessions pass: the handler answers).
async fn check_session<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    id: Id,
    what: &str,
) -> ApiResult<()> {
    let owner = match state.auth.owners.get(&caller.tenant, id) {
        Some(owner) => Some(owner),
        None => match state.store().get_session(&caller.tenant, id).await? {
            Some(session) => {
                state.auth.owners.put(&caller.tenant, id, &session.user_id);
                Some(session.user_id)
            }
            None => None,
        },
    };
    match owner {
        Some(owner) if !caller.sees_owner(&owner) => Err(ApiError::not_found(what)),
        _ => Ok(()),
    }
}

/// 404 unless the caller sees the session something belongs to; a thing of no session is
/// an admin's alone.
async fn check_session_of<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    session: Option<Id>,
    what: &str,
) -> ApiResult<()> {
    match session {
        Some(id) => check_session(state, caller, id, what).await,
        None => Err(ApiError::not_found(what)),
    }
}

/// 404 unless the caller sees the thread's session (a thread that does not exist yet
/// passes: the first put makes it the caller's).
pub(crate) async fn check_thread<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    thread: &str,
) -> ApiResult<()> {
    if caller.role == AccessRole::Admin {
        return Ok(());
    }
    let Some(checkpoints) = state.store().checkpoints() else {
        return Ok(());
    };
    let Ok(info) = checkpoints.get_thread(&caller.tenant, thread).await else {
        // A thread id the handler refuses (400) is not looked up.
        return Ok(());
    };
    match info {
        Some(info) => check_session(state, caller, info.session_id, "thread").await,
        // No checkpoint yet. A LangGraph thread (`/langgraph/threads`) is a session whose id
        // or name is the thread's: another user's keeps its id from this caller, so that its
        // graph's checkpoints never land in a thread the caller made first.
        None => {
            let store = state.store();
            let mut session = match thread.parse::<Id>() {
                Ok(id) => store.get_session(&caller.tenant, id).await?,
                Err(_) => None,
            };
            if session.is_none() && stepwise_core::name::validate_name(thread).is_ok() {
                session = store.find_session_by_name(&caller.tenant, thread).await?;
            }
            match session {
                Some(session) if !caller.sees_owner(&session.user_id) => {
                    Err(ApiError::not_found("thread"))
                }
                _ => Ok(()),
            }
        }
    }
}

/// Whether the caller sees the thread (for lists narrowed thread by thread).
pub(crate) async fn sees_thread<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    thread: &str,
) -> ApiResult<bool> {
    match check_thread(state, caller, thread).await {
        Ok(()) => Ok(true),
        Err(e) if e.status == axum::http::StatusCode::NOT_FOUND => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_params_are_read_from_the_route() {
        assert_eq!(
            path_params("/sessions/{id}/events", "/sessions/abc/events"),
            vec![("id".to_string(), "abc".to_string())]
        );
        assert_eq!(
            path_params(
                "/threads/{thread_id}/checkpoints/{checkpoint_id}",
                "/v1/threads/a%20b/checkpoints/c+d"
            ),
            vec![
                ("thread_id".to_string(), "a b".to_string()),
                ("checkpoint_id".to_string(), "c+d".to_string())
            ]
        );
        assert!(path_params("/agents", "/agents").is_empty());
    }
}
