//! What worker processes rely on: claims limited to agent types and a tenant, a session's
//! default agent, and the record of workers seen.

use std::time::Duration;

use serde_json::json;
use stepwise_core::{ExecutionStatus, SessionAgent, Timestamp};
use stepwise_store::{ClaimFilter, SessionPatch, Store, WorkerSeen};

use crate::Harness;
use crate::support::{T0, create_session, manual_store, new_execution, ok, some, tenant};
use stepwise_store::prelude::*;

const LEASE: Duration = Duration::from_secs(30);

fn only(agent_types: &[&str], tenant: Option<&str>) -> ClaimFilter {
    ClaimFilter {
        agent_types: Some(agent_types.iter().map(|t| t.to_string()).collect()),
        tenant: tenant.map(str::to_string),
    }
}

/// Claims for one lease owner under a filter.
async fn claim_one<S: Store>(
    store: &S,
    filter: &ClaimFilter,
    owner: &str,
) -> Option<stepwise_core::Execution> {
    let claims = ok(
        store
            .claim_matching(filter, &[owner.to_string()], LEASE, 5)
            .await,
        "claim_matching",
    );
    claims.into_iter().next().map(|c| c.execution)
}

pub async fn queue_claim_filter<H: Harness>(harness: &H) {
    let (store, clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let globex = tenant("globex");
    let a = create_session(&store, &acme, Some("a")).await;
    let b = create_session(&store, &acme, Some("b")).await;
    let g = create_session(&store, &globex, Some("g")).await;
    let typed = |session, agent: &str| {
        let mut new = new_execution(Some(session), ExecutionStatus::Pending);
        new.agent_type = agent.to_string();
        new
    };
    // Session a: a coder execution, then a demo one behind it (FIFO per session holds
    // across agent types). Session b: a planner one. Globex: a coder one.
    let a1 = ok(
        store.create_execution(&acme, typed(a.id, "coder")).await,
        "create",
    );
    let a2 = ok(
        store.create_execution(&acme, typed(a.id, "demo")).await,
        "create",
    );
    let b1 = ok(
        store.create_execution(&acme, typed(b.id, "planner")).await,
        "create",
    );
    let g1 = ok(
        store.create_execution(&globex, typed(g.id, "coder")).await,
        "create",
    );

    assert!(
        claim_one(&store, &only(&["demo"], None), "builtin")
            .await
            .is_none(),
        "a demo execution queued behind a coder one waits for it, whatever claims"
    );
    let planner = claim_one(&store, &only(&["planner", "writer"], Some("acme")), "w1").await;
    assert_eq!(
        planner.map(|e| e.id),
        Some(b1.id),
        "a claim takes only its agent types"
    );
    let acme_coder = claim_one(&store, &only(&["coder"], Some("acme")), "w2").await;
    assert_eq!(acme_coder.map(|e| e.id), Some(a1.id));
    assert!(
        claim_one(&store, &only(&["coder"], Some("acme")), "w3")
            .await
            .is_none(),
        "a claim of one tenant never takes another tenant's execution"
    );
    let globex_coder = claim_one(&store, &only(&["coder"], Some("globex")), "w4").await;
    assert_eq!(globex_coder.map(|e| e.id), Some(g1.id));

    // w2's lease runs out: only a claim of its agent type (and tenant) takes it over.
    clock.advance_secs(LEASE.as_secs() as i64 + 1);
    assert!(
        claim_one(&store, &only(&["planner"], Some("acme")), "w5")
            .await
            .is_some_and(|e| e.id == b1.id),
        "the planner's own expired lease is taken over by a planner claim"
    );
    assert!(
        claim_one(&store, &only(&["coder"], Some("globex")), "w6")
            .await
            .is_some_and(|e| e.id == g1.id),
    );
    let again = claim_one(&store, &only(&["coder"], Some("acme")), "w7").await;
    assert_eq!(again.as_ref().map(|e| e.id), Some(a1.id));
    assert_eq!(
        again.map(|e| e.attempts),
        Some(2),
        "a takeover counts an attempt"
    );
    ok(
        store
            .transition_execution(
                &acme,
                a1.id,
                stepwise_store::Transition::Complete {
                    output: json!("done"),
                },
            )
            .await,
        "complete",
    );
    let demo = claim_one(&store, &ClaimFilter::any(), "builtin").await;
    assert_eq!(
        demo.map(|e| e.id),
        Some(a2.id),
        "then the demo execution runs"
    );
}

pub async fn session_agent<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let session = create_session(&store, &acme, Some("with-agent")).await;
    assert_eq!(session.agent, None, "a new session has no default agent");
    let coder = SessionAgent {
        agent_type: "coder".into(),
        config: json!({"model": "small"}),
    };
    let set = SessionPatch {
        agent: Some(Some(coder.clone())),
        ..SessionPatch::default()
    };
    let updated = some(
        store.update_session(&acme, session.id, set).await,
        "update_session",
    );
    assert_eq!(updated.agent.as_ref(), Some(&coder));
    let read = some(store.get_session(&acme, session.id).await, "get_session");
    assert_eq!(
        read.agent.as_ref(),
        Some(&coder),
        "the default agent is stored"
    );
    let other = SessionPatch {
        title: Some("renamed".into()),
        ..SessionPatch::default()
    };
    let kept = some(
        store.update_session(&acme, session.id, other).await,
        "update_session",
    );
    assert_eq!(
        kept.agent.as_ref(),
        Some(&coder),
        "a patch without agent keeps it"
    );
    let clear = SessionPatch {
        agent: Some(None),
        ..SessionPatch::default()
    };
    let cleared = some(
        store.update_session(&acme, session.id, clear).await,
        "update_session",
    );
    assert_eq!(cleared.agent, None, "`Some(None)` clears it");
}

pub async fn workers_seen<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let globex = tenant("globex");
    let seen = |id: &str, at: i64, agent: &str| WorkerSeen {
        worker_id: id.to_string(),
        agents: json!([{"type": agent, "description": "", "config_schema": null}]),
        last_seen_at: Timestamp(T0.0 + at * 1_000_000),
    };
    ok(
        store.record_worker(&acme, seen("w1", 0, "coder")).await,
        "record_worker",
    );
    ok(
        store.record_worker(&acme, seen("w2", 10, "planner")).await,
        "record_worker",
    );
    ok(
        store.record_worker(&globex, seen("w1", 20, "spy")).await,
        "record_worker",
    );
    // Seen again: the newer call replaces the older, never the other way round.
    ok(
        store.record_worker(&acme, seen("w1", 30, "coder")).await,
        "record_worker",
    );
    ok(
        store.record_worker(&acme, seen("w1", 5, "stale")).await,
        "record_worker",
    );

    let all = ok(store.list_workers(&acme, T0).await, "list_workers");
    let ids: Vec<&str> = all.iter().map(|w| w.worker_id.as_str()).collect();
    assert_eq!(ids, ["w1", "w2"], "the tenant's workers, most recent first");
    assert_eq!(all[0].last_seen_at, Timestamp(T0.0 + 30 * 1_000_000));
    assert_eq!(
        all[0].agents[0]["type"], "coder",
        "an older call changes nothing"
    );
    let recent = ok(
        store
            .list_workers(&acme, Timestamp(T0.0 + 15 * 1_000_000))
            .await,
        "list_workers",
    );
    assert_eq!(recent.len(), 1, "only workers seen since the time asked");
    let theirs = ok(store.list_workers(&globex, T0).await, "list_workers");
    assert_eq!(theirs.len(), 1);
    assert_eq!(
        theirs[0].agents[0]["type"], "spy",
        "another tenant's worker of the same id is its own"
    );

    // A worker that stopped cleanly is set back to an earlier time: offline at once, its
    // agent types still listed; another tenant's worker of the same id is untouched.
    let stopped_at = Timestamp(T0.0 + 2 * 1_000_000);
    assert!(ok(
        store.worker_offline(&acme, "w1", stopped_at).await,
        "worker_offline"
    ));
    assert!(
        !ok(
            store.worker_offline(&acme, "nobody", stopped_at).await,
            "worker_offline"
        ),
        "an unknown worker is not the tenant's"
    );
    let recent = ok(
        store
            .list_workers(&acme, Timestamp(T0.0 + 15 * 1_000_000))
            .await,
        "list_workers",
    );
    assert!(
        recent.is_empty(),
        "the stopped worker is no longer recent: {recent:?}"
    );
    let all = ok(store.list_workers(&acme, T0).await, "list_workers");
    let ids: Vec<&str> = all.iter().map(|w| w.worker_id.as_str()).collect();
    assert_eq!(ids, ["w2", "w1"], "still known, by its new time");
    let stopped = &all[1];
    assert_eq!(stopped.last_seen_at, stopped_at);
    assert_eq!(stopped.agents[0]["type"], "coder", "its agent types stay");
    let theirs = ok(store.list_workers(&globex, T0).await, "list_workers");
    assert_eq!(theirs[0].last_seen_at, Timestamp(T0.0 + 20 * 1_000_000));
    // A later call brings it back.
    ok(
        store.record_worker(&acme, seen("w1", 40, "coder")).await,
        "record_worker",
    );
    let all = ok(store.list_workers(&acme, T0).await, "list_workers");
    assert_eq!(all[0].worker_id, "w1");
    assert_eq!(all[0].last_seen_at, Timestamp(T0.0 + 40 * 1_000_000));
}
