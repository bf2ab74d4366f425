use std::sync::Arc;

use serde_json::json;
use stepwise_core::{ExecutionStatus, Id, ManualClock, Role, Session, SessionStatus, Timestamp};
use stepwise_store::{
    CleanupReport, MessageQuery, RetentionOverride, RetentionPolicy, SessionPatch, Store, Tenant,
    TenantScope, Transition, export_session,
};

use crate::Harness;
use crate::support::*;
use stepwise_store::prelude::*;

/// "Now" in the retention cases: 400 days after [`T0`], so every age fits after it.
const NOW: Timestamp = Timestamp(T0.0 + 400 * 86_400 * 1_000_000);

/// A session whose last update was `age_days` before [`NOW`], in `status`.
async fn aged_session<S: Store>(
    store: &S,
    clock: &Arc<ManualClock>,
    tenant: &Tenant,
    name: &str,
    age_days: u32,
    status: SessionStatus,
) -> Session {
    clock.set(NOW.minus_days(age_days));
    let session = create_session(store, tenant, Some(name)).await;
    let session = match status {
        SessionStatus::Active => session,
        SessionStatus::Deleted => {
            assert!(ok(
                store.delete_session(tenant, session.id).await,
                "delete_session"
            ));
            some(store.get_session(tenant, session.id).await, "get deleted")
        }
        other => some(
            store
                .update_session(
                    tenant,
                    session.id,
                    SessionPatch {
                        status: Some(other),
                        ..SessionPatch::default()
                    },
                )
                .await,
            "set status",
        ),
    };
    assert_eq!(session.status, status);
    session
}

/// Active sessions untouched since the cutoff become abandoned, their paused executions
/// are cancelled; nothing else changes, and a dry run changes nothing at all.
pub async fn retention_mark_abandoned<H: Harness>(harness: &H) {
    let (store, clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let globex = tenant("globex");

    let fresh = aged_session(&store, &clock, &acme, "fresh", 1, SessionStatus::Active).await;
    let fresh_paused =
        create_execution(&store, &acme, Some(fresh.id), ExecutionStatus::Running).await;
    ok(
        store
            .transition_execution(
                &acme,
                fresh_paused.id,
                Transition::Pause {
                    question: "?".into(),
                },
            )
            .await,
        "pause",
    );
    let almost = aged_session(&store, &clock, &acme, "almost", 29, SessionStatus::Active).await;
    let stale = aged_session(&store, &clock, &acme, "stale", 31, SessionStatus::Active).await;
    let stale_paused =
        create_execution(&store, &acme, Some(stale.id), ExecutionStatus::Running).await;
    ok(
        store
            .transition_execution(
                &acme,
                stale_paused.id,
                Transition::Pause {
                    question: "?".into(),
                },
            )
            .await,
        "pause",
    );
    let stale_done =
        create_execution(&store, &acme, Some(stale.id), ExecutionStatus::Running).await;
    ok(
        store
            .transition_execution(
                &acme,
                stale_done.id,
                Transition::Complete { output: json!(1) },
            )
            .await,
        "complete",
    );
    let old_other_tenant =
        aged_session(&store, &clock, &globex, "old", 45, SessionStatus::Active).await;
    let completed = aged_session(
        &store,
        &clock,
        &acme,
        "completed",
        60,
        SessionStatus::Completed,
    )
    .await;
    let archived = aged_session(
        &store,
        &clock,
        &acme,
        "archived",
        60,
        SessionStatus::Archived,
    )
    .await;
    let deleted = aged_session(&store, &clock, &acme, "deleted", 60, SessionStatus::Deleted).await;
    clock.set(NOW);
    let cutoff = NOW.minus_days(30);

    let everyone = [
        &fresh,
        &almost,
        &stale,
        &old_other_tenant,
        &completed,
        &archived,
        &deleted,
    ];
    let before = snapshot_all(&store, &everyone).await;

    let would = ok(
        store.mark_abandoned(cutoff, true, TenantScope::All).await,
        "mark_abandoned dry",
    );
    assert_eq!(
        would, 2,
        "stale (31 days) and globex's old (45 days) would be marked"
    );
    assert_eq!(
        snapshot_all(&store, &everyone).await,
        before,
        "a dry run changes nothing"
    );
    assert_eq!(
        some(store.get_execution(&acme, stale_paused.id).await, "paused").status,
        ExecutionStatus::Paused,
        "a dry run cancels nothing"
    );

    let marked = ok(
        store.mark_abandoned(cutoff, false, TenantScope::All).await,
        "mark_abandoned",
    );
    assert_eq!(marked, 2);
    for (session, expected) in [
        (&fresh, SessionStatus::Active),
        (&almost, SessionStatus::Active),
        (&stale, SessionStatus::Abandoned),
        (&old_other_tenant, SessionStatus::Abandoned),
        (&completed, SessionStatus::Completed),
        (&archived, SessionStatus::Archived),
        (&deleted, SessionStatus::Deleted),
    ] {
        let t = tenant(&session.tenant_id);
        let now = some(store.get_session(&t, session.id).await, "get_session");
        assert_eq!(
            now.status, expected,
            "session {:?} after mark_abandoned",
            session.name
        );
    }
    assert_eq!(
        some(
            store.get_execution(&acme, stale_paused.id).await,
            "stale paused"
        )
        .status,
        ExecutionStatus::Cancelled,
        "a paused execution in an abandoned session is cancelled"
    );
    assert_eq!(
        some(
            store.get_execution(&acme, stale_done.id).await,
            "stale done"
        )
        .status,
        ExecutionStatus::Completed,
        "finished executions keep their status"
    );
    assert_eq!(
        some(
            store.get_execution(&acme, fresh_paused.id).await,
            "fresh paused"
        )
        .status,
        ExecutionStatus::Paused,
        "a paused execution in a live session stays paused"
    );
    assert_eq!(
        ok(
            store.mark_abandoned(cutoff, false, TenantScope::All).await,
            "mark_abandoned again"
        ),
        0,
        "already abandoned"
    );
}

struct Planted {
    session: Session,
    tenant: Tenant,
    report: CleanupReport,
}

/// A session with some of everything, written while the clock says `age_days` ago.
async fn planted<S: Store>(
    store: &S,
    clock: &Arc<ManualClock>,
    tenant: &Tenant,
    name: &str,
    age_days: u32,
    status: SessionStatus,
    size: u32,
) -> Planted {
    clock.set(NOW.minus_days(age_days));
    let session = create_session(store, tenant, Some(name)).await;
    let mut report = CleanupReport {
        sessions: 1,
        ..CleanupReport::default()
    };
    let execution =
        create_execution(store, tenant, Some(session.id), ExecutionStatus::Running).await;
    let mut sub = new_execution(Some(session.id), ExecutionStatus::Running);
    sub.parent_execution_id = Some(execution.id);
    let subagent = ok(store.create_execution(tenant, sub).await, "create subagent");
    report.executions = 2;
    let mut parent = None;
    for n in 1..=size {
        append_message(
            store,
            tenant,
            session.id,
            Role::User,
            &format!("message {n}"),
        )
        .await;
        add_step(store, tenant, execution.id, n).await;
        add_step(store, tenant, subagent.id, n).await;
        add_event(store, tenant, session.id, &format!("event {n}")).await;
        parent = Some(
            add_snapshot(store, tenant, execution.id, n, parent)
                .await
                .id,
        );
        report.messages += 1;
        report.steps += 2;
        report.events += 1;
        report.snapshots += 1;
    }
    add_snapshot(store, tenant, subagent.id, 1, parent).await;
    report.snapshots += 1;
    ok(
        store
            .transition_execution(
                tenant,
                subagent.id,
                Transition::Complete {
                    output: json!("sub"),
                },
            )
            .await,
        "complete",
    );
    ok(
        store
            .transition_execution(
                tenant,
                execution.id,
                Transition::Complete {
                    output: json!("main"),
                },
            )
            .await,
        "complete",
    );
    let session = match status {
        SessionStatus::Active => some(store.get_session(tenant, session.id).await, "get"),
        SessionStatus::Deleted => {
            assert!(ok(
                store.delete_session(tenant, session.id).await,
                "delete_session"
            ));
            some(store.get_session(tenant, session.id).await, "get deleted")
        }
        other => some(
            store
                .update_session(
                    tenant,
                    session.id,
                    SessionPatch {
                        status: Some(other),
                        ..SessionPatch::default()
                    },
                )
                .await,
            "set status",
        ),
    };
    Planted {
        session,
        tenant: tenant.clone(),
        report,
    }
}

/// Sessions past retention are deleted with every child row; the report counts them
/// exactly; everything else is untouched; a dry run reports the same and deletes nothing.
pub async fn retention_cleanup<H: Harness>(harness: &H) {
    let (store, clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let globex = tenant("globex");
    use SessionStatus::*;
    let expired = vec![
        planted(&store, &clock, &acme, "completed-old", 91, Completed, 3).await,
        planted(&store, &clock, &acme, "abandoned-old", 31, Abandoned, 2).await,
        planted(&store, &clock, &globex, "deleted-old", 45, Deleted, 4).await,
        planted(
            &store,
            &clock,
            &globex,
            "completed-ancient",
            300,
            Completed,
            1,
        )
        .await,
    ];
    let kept = vec![
        planted(&store, &clock, &acme, "completed-recent", 89, Completed, 2).await,
        planted(&store, &clock, &acme, "abandoned-recent", 29, Abandoned, 2).await,
        planted(&store, &clock, &globex, "deleted-recent", 10, Deleted, 1).await,
        planted(&store, &clock, &acme, "active-fresh", 1, Active, 3).await,
        planted(&store, &clock, &acme, "archived-old", 200, Archived, 1).await,
        planted(&store, &clock, &acme, "closed-old", 200, Closed, 1).await,
    ];
    clock.set(NOW);

    let mut expected = CleanupReport::default();
    for p in &expired {
        expected.sessions += p.report.sessions;
        expected.messages += p.report.messages;
        expected.executions += p.report.executions;
        expected.steps += p.report.steps;
        expected.snapshots += p.report.snapshots;
        expected.events += p.report.events;
    }
    let all: Vec<&Session> = expired.iter().chain(&kept).map(|p| &p.session).collect();
    let before = export_all(&store, &expired, &kept).await;
    let policy = RetentionPolicy::default();

    let dry = ok(
        store
            .cleanup_old_sessions(NOW, policy, true, TenantScope::All)
            .await,
        "cleanup dry run",
    );
    assert_eq!(dry, expected, "a dry run reports what it would delete");
    assert_eq!(
        export_all(&store, &expired, &kept).await,
        before,
        "a dry run deletes nothing"
    );
    assert_eq!(snapshot_all(&store, &all).await.len(), all.len());

    let report = ok(
        store
            .cleanup_old_sessions(NOW, policy, false, TenantScope::All)
            .await,
        "cleanup",
    );
    assert_eq!(report, expected, "the report counts every deleted row");

    for p in &expired {
        let id = p.session.id;
        let t = &p.tenant;
        let what = format!("expired session {:?}", p.session.name);
        assert_eq!(
            ok(store.get_session(t, id).await, &what),
            None,
            "{what} is gone"
        );
        assert!(
            ok(
                store.list_messages(t, id, MessageQuery::default()).await,
                &what
            )
            .is_empty(),
            "{what}: messages"
        );
        assert!(
            ok(store.list_executions(t, id).await, &what).is_empty(),
            "{what}: executions"
        );
        assert!(
            ok(store.list_session_steps(t, id).await, &what)
                .items
                .is_empty(),
            "{what}: steps"
        );
        assert!(
            ok(store.list_events(t, id, 0, 1000).await, &what).is_empty(),
            "{what}: events"
        );
        let name = p.session.name.clone().unwrap_or_default();
        assert_eq!(
            ok(store.find_session_by_name(t, &name).await, &what),
            None,
            "{what}: by name"
        );
    }
    for (p, doc) in expired.iter().zip(&before) {
        let doc = doc.as_ref().expect("exported before cleanup");
        for execution in &doc.executions {
            assert_eq!(
                ok(store.get_execution(&p.tenant, execution.id).await, "get"),
                None,
                "its executions are gone"
            );
            assert!(
                ok(store.list_steps(&p.tenant, execution.id).await, "steps")
                    .items
                    .is_empty()
            );
            assert!(
                ok(
                    store.list_snapshots(&p.tenant, execution.id).await,
                    "snapshots"
                )
                .is_empty()
            );
        }
        for snapshot in &doc.snapshots {
            assert_eq!(
                ok(store.get_snapshot(&p.tenant, snapshot.id).await, "get"),
                None,
                "its snapshots are gone"
            );
        }
    }
    let after = export_all(&store, &[], &kept).await;
    assert_eq!(
        after,
        before[expired.len()..].to_vec(),
        "sessions within retention are untouched"
    );
    for p in &kept {
        let events = ok(
            store.list_events(&p.tenant, p.session.id, 0, 1000).await,
            "events",
        );
        assert_eq!(
            events.len() as u64,
            p.report.events,
            "a kept session keeps its events"
        );
    }

    let again = ok(
        store
            .cleanup_old_sessions(NOW, policy, false, TenantScope::All)
            .await,
        "cleanup again",
    );
    assert_eq!(
        again,
        CleanupReport::default(),
        "a second pass finds nothing"
    );

    // Custom numbers: with 20 days for completed sessions, the 89-day one goes too.
    let strict = RetentionPolicy {
        completed_days: 20,
        ..policy
    };
    let report = ok(
        store
            .cleanup_old_sessions(NOW, strict, false, TenantScope::All)
            .await,
        "strict cleanup",
    );
    assert_eq!(report.sessions, 1, "the policy's numbers are honoured");
    assert_eq!(report, kept[0].report);
    assert_eq!(
        ok(store.get_session(&acme, kept[0].session.id).await, "get"),
        None
    );
    // The name of a deleted session is free again.
    create_session(&store, &acme, Some("completed-recent")).await;
}

async fn export_all<S: Store>(
    store: &S,
    first: &[Planted],
    second: &[Planted],
) -> Vec<Option<stepwise_core::SessionDocument>> {
    let mut docs = Vec::new();
    for p in first.iter().chain(second) {
        docs.push(ok(
            export_session(store, &p.tenant, p.session.id).await,
            "export_session",
        ));
    }
    docs
}

async fn snapshot_all<S: Store>(store: &S, sessions: &[&Session]) -> Vec<(Id, Option<Session>)> {
    let mut out = Vec::new();
    for session in sessions {
        let t = tenant(&session.tenant_id);
        out.push((
            session.id,
            ok(store.get_session(&t, session.id).await, "get_session"),
        ));
    }
    out
}

/// An abandoned session comes back: a message, an execution, a step or a snapshot in it
/// makes it `active` again, updated then, so the cleaner counts its idleness from there.
pub async fn retention_abandoned_comes_back<H: Harness>(harness: &H) {
    let (store, clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let session = create_session(&store, &acme, Some("comes-back")).await;
    let running = create_execution(&store, &acme, Some(session.id), ExecutionStatus::Running).await;
    let mut at = T0;
    let abandon = |at: Timestamp| {
        let store = store.clone();
        let acme = acme.clone();
        let clock = clock.clone();
        async move {
            clock.set(at);
            let patch = SessionPatch {
                status: Some(SessionStatus::Abandoned),
                ..SessionPatch::default()
            };
            let marked = some(
                store.update_session(&acme, session.id, patch).await,
                "mark abandoned",
            );
            assert_eq!(marked.status, SessionStatus::Abandoned);
        }
    };
    for what in ["a message", "an execution", "a step", "a snapshot"] {
        at = Timestamp(at.0 + 86_400 * 1_000_000);
        abandon(at).await;
        let later = Timestamp(at.0 + 3_600 * 1_000_000);
        clock.set(later);
        match what {
            "a message" => {
                append_message(&store, &acme, session.id, Role::User, "back again").await;
            }
            "an execution" => {
                create_execution(&store, &acme, Some(session.id), ExecutionStatus::Pending).await;
            }
            "a step" => {
                add_step(&store, &acme, running.id, 1).await;
            }
            _ => {
                add_snapshot(&store, &acme, running.id, 1, None).await;
            }
        }
        let now = some(store.get_session(&acme, session.id).await, "session");
        assert_eq!(now.status, SessionStatus::Active, "{what} makes it active");
        // The manual clock moves on by a microsecond a reading: "then", not before.
        assert!(
            now.updated_at >= later && now.updated_at.0 < later.0 + 1_000_000,
            "{what} counts as its last use: {:?} for {later:?}",
            now.updated_at
        );
    }
    // A session that is not abandoned keeps its status (a completed one stays completed).
    let done = SessionPatch {
        status: Some(SessionStatus::Completed),
        ..SessionPatch::default()
    };
    some(
        store.update_session(&acme, session.id, done).await,
        "complete",
    );
    add_step(&store, &acme, running.id, 2).await;
    append_message(&store, &acme, session.id, Role::User, "thanks").await;
    let now = some(store.get_session(&acme, session.id).await, "session");
    assert_eq!(now.status, SessionStatus::Completed);
}

/// A tenant's own retention: stored, read back, cleared; a pass scoped to a tenant touches
/// its sessions alone, and one for every tenant but some leaves theirs.
pub async fn retention_per_tenant<H: Harness>(harness: &H) {
    let (store, clock) = manual_store(harness).await;
    let (acme, globex) = (tenant("acme"), tenant("globex"));
    assert!(ok(store.tenant_retentions().await, "none yet").is_empty());
    let short = RetentionOverride {
        completed_days: Some(1),
        mark_abandoned_days: Some(2),
        ..RetentionOverride::default()
    };
    ok(store.set_tenant_retention(&acme, Some(short)).await, "set");
    assert_eq!(
        ok(store.tenant_retentions().await, "listed"),
        vec![("acme".to_string(), short)]
    );
    let base = RetentionPolicy::default();
    assert_eq!(short.over(base).completed_days, 1);
    assert_eq!(short.over(base).abandoned_days, base.abandoned_days);

    let acme_done =
        aged_session(&store, &clock, &acme, "a-done", 5, SessionStatus::Completed).await;
    let globex_done = aged_session(
        &store,
        &clock,
        &globex,
        "g-done",
        5,
        SessionStatus::Completed,
    )
    .await;
    let acme_idle = aged_session(&store, &clock, &acme, "a-idle", 3, SessionStatus::Active).await;
    let globex_idle =
        aged_session(&store, &clock, &globex, "g-idle", 3, SessionStatus::Active).await;
    clock.set(NOW);

    let own = TenantScope::Only("acme".into());
    let others = TenantScope::AllBut(vec!["acme".into()]);
    let policy = short.over(base);
    let marked = ok(
        store
            .mark_abandoned(policy.abandon_cutoff(NOW), false, own.clone())
            .await,
        "mark acme's",
    );
    assert_eq!(marked, 1);
    let report = ok(
        store.cleanup_old_sessions(NOW, policy, false, own).await,
        "clean acme's",
    );
    assert_eq!(report.sessions, 1);
    assert_eq!(
        ok(store.get_session(&acme, acme_done.id).await, "gone"),
        None
    );
    assert_eq!(
        some(store.get_session(&acme, acme_idle.id).await, "idle").status,
        SessionStatus::Abandoned
    );
    // The server's policy (90 days, 30 idle) for everyone else: globex keeps both.
    assert_eq!(
        ok(
            store
                .mark_abandoned(base.abandon_cutoff(NOW), false, others.clone())
                .await,
            "mark the others'"
        ),
        0
    );
    let report = ok(
        store.cleanup_old_sessions(NOW, base, false, others).await,
        "clean the others'",
    );
    assert_eq!(report.sessions, 0);
    assert!(ok(store.get_session(&globex, globex_done.id).await, "kept").is_some());
    assert_eq!(
        some(store.get_session(&globex, globex_idle.id).await, "kept").status,
        SessionStatus::Active
    );

    ok(store.set_tenant_retention(&acme, None).await, "clear");
    assert!(ok(store.tenant_retentions().await, "cleared").is_empty());
}
