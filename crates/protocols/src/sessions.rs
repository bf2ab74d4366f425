//! The session a front end's chat or thread id names, and what a turn posted to it needs:
//! the session (found, or created under that name), the agent it keeps, its latest run.

use serde_json::Value;
use stepwise_core::{Execution, Id, Session};
use stepwise_engine::{AgentChoice, MessageInput};
use stepwise_server::{AgentBody, ApiError, ApiResult, AppState, Caller, MessageFields};
use stepwise_store::{NewSession, Store, Tenant};

use crate::follower::{RunFollower, Start, Turn};

/// The session's latest top-level execution (a subagent's parent, not the subagent).
pub(crate) async fn latest_root_execution<S: Store>(
    store: &S,
    tenant: &Tenant,
    session: &Session,
) -> ApiResult<Option<Execution>> {
    Ok(stepwise_engine::latest_root_execution(store, tenant, session.last_execution_id).await?)
}

/// A chat or thread id as a front end sends it: a session id or a valid session name, or a
/// 400 naming `field`.
pub(crate) fn check_chat_id(key: &str, field: &str) -> ApiResult<()> {
    if key.parse::<Id>().is_ok() {
        return Ok(());
    }
    stepwise_core::name::validate_name(key).map_err(|e| {
        ApiError::invalid(
            field,
            format!("{field} is neither a session id nor a valid session name: {e}"),
        )
    })
}

/// The session a front end names (checked with [`check_chat_id`]): a session id of the
/// caller's tenant, or a session name; `None` when neither exists or the caller may not see
/// it (another user's session is as absent as another tenant's).
pub(crate) async fn find_session<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    key: &str,
    field: &str,
) -> ApiResult<Option<Session>> {
    Ok(lookup_session(state, caller, key, field)
        .await?
        .filter(|session| caller.sees(session)))
}

/// [`find_session`] over the whole tenant, whoever owns the session.
pub(crate) async fn lookup_session<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    key: &str,
    field: &str,
) -> ApiResult<Option<Session>> {
    check_chat_id(key, field)?;
    if let Ok(id) = key.parse::<Id>()
        && let Some(session) = state.store().get_session(&caller.tenant, id).await?
    {
        return Ok(Some(session));
    }
    if stepwise_core::name::validate_name(key).is_err() {
        return Ok(None);
    }
    Ok(state
        .store()
        .find_session_by_name(&caller.tenant, key)
        .await?)
}

/// The session a chat turn goes to: the one `key` names, or a new session named `key`.
pub(crate) async fn session_for_turn<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    key: &str,
    field: &str,
) -> ApiResult<Session> {
    if let Some(session) = lookup_session(state, caller, key, field).await? {
        // A name another user's session holds never reaches that session (and cannot be
        // taken: names are unique in a tenant).
        if !caller.sees(&session) {
            return Err(ApiError::not_found("session"));
        }
        if session.status == stepwise_core::SessionStatus::Deleted {
            return Err(ApiError::invalid_state("the session is deleted"));
        }
        return Ok(session);
    }
    stepwise_core::name::validate_name(key).map_err(|e| {
        ApiError::invalid(field, format!("{field} is not a valid session name: {e}"))
    })?;
    let new = NewSession {
        user_id: caller.user_id.clone(),
        name: Some(key.to_string()),
        title: None,
        related_type: None,
        related_id: None,
        initial_context_url: None,
        metadata: Value::Null,
    };
    match state.store().create_session(&caller.tenant, new).await {
        Ok(session) => Ok(session),
        // Created by a concurrent first turn: use that one.
        Err(stepwise_store::StoreError::Conflict(_)) => find_session(state, caller, key, field)
            .await?
            .ok_or_else(|| ApiError::conflict("the session was created and deleted meanwhile")),
        Err(e) => Err(e.into()),
    }
}

/// The agent of a turn that names none: the one the session's latest execution ran (so a
/// chat keeps its agent), when the server can run it; else the server's default.
pub(crate) async fn session_agent<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    session: &Session,
) -> ApiResult<Option<AgentChoice>> {
    let Some(latest) = latest_root_execution(state.store(), &caller.tenant, session).await? else {
        return Ok(None);
    };
    if !state.engine.can_run(&latest.agent_type) {
        return Ok(None);
    }
    Ok(Some(AgentChoice {
        agent_type: latest.agent_type,
        config: latest.agent_config,
    }))
}

/// A front end's turn as the engine takes it: `content` with `agent` (checked as a posted
/// message's are), refused before anything is written when the agent cannot run.
pub(crate) fn turn_message<S: Store>(
    state: &AppState<S>,
    content: String,
    agent: Option<AgentBody>,
) -> ApiResult<MessageInput> {
    let input = MessageFields {
        content,
        related_type: None,
        related_id: None,
        context_url: None,
        metadata: None,
        agent,
    }
    .validate(&state.config)?;
    state.engine.choose_agent(&input)?;
    Ok(input)
}

/// A turn posted to `session` (as `POST /v1/sessions/{id}/messages` posts it: it answers a
/// paused execution, or queues a new one), with the session's own agent when it names none,
/// and its follower: subscribed before the message is written, so every event of the turn
/// arrives, and holding a place among the session's streams.
pub(crate) async fn post_turn<S: Store>(
    state: &AppState<S>,
    caller: Caller,
    session: &Session,
    mut input: MessageInput,
) -> ApiResult<(Turn, RunFollower<S>, stepwise_server::SubscriberSlot)> {
    if input.agent.is_none() {
        input.agent = session_agent(state, &caller, session).await?;
    }
    let slot = state.stream_slot(&caller.tenant, session.id)?;
    let live = state.store().subscribe(&caller.tenant, session.id);
    let submitted = state
        .engine
        .submit_message_to(&caller.tenant, &caller.user_id, session, input)
        .await?;
    let turn = Turn {
        execution_id: submitted.execution.id,
        message_id: Some(submitted.message.id),
    };
    let follower = RunFollower::new(state, caller.tenant, session.id, turn, live, Start::Live);
    Ok((turn, follower, slot))
}
