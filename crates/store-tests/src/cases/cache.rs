//! The hot-session cache: a restore served from the cache is exactly what the database
//! holds, after appends, across executions, and per tenant.

use stepwise_core::{ExecutionStatus, Id, Restored, Step, StepKind};
use stepwise_store::{NewStep, Store, restore_memory};

use crate::Harness;
use crate::support::*;

async fn save<S: Store>(store: &S, tenant: &stepwise_store::Tenant, execution: Id, n: u32) {
    let new = NewStep {
        execution_id: execution,
        step_number: n,
        kind: StepKind::Action,
        body: step_body(n),
    };
    ok(append_step(store, tenant, new).await, "append_step");
}

/// The restore's steps, checked against an uncached read of the same session.
async fn restored<S: Store>(store: &S, tenant: &stepwise_store::Tenant, session: Id) -> Vec<Step> {
    let memory = some(
        restore_memory(store, tenant, session).await,
        "restore_memory",
    );
    assert_eq!(memory.restored, Restored::Full, "every step decodes");
    let stored = ok(
        store.list_session_steps(tenant, session).await,
        "list_session_steps",
    );
    assert_eq!(
        memory.steps, stored.items,
        "the restore answers what the database holds, in execution order"
    );
    memory.steps
}

/// Restores after appends see every new step in place; the cache answers repeated
/// restores (counted as hits) and never another tenant's.
pub async fn session_cache<H: Harness>(harness: &H) {
    let (store, clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let session = create_session(&store, &acme, Some("cached")).await;

    // An empty session, then its first steps.
    assert!(restored(&store, &acme, session.id).await.is_empty());
    let first = create_execution(&store, &acme, Some(session.id), ExecutionStatus::Running).await;
    for n in 1..=3 {
        save(&store, &acme, first.id, n).await;
    }
    assert_eq!(restored(&store, &acme, session.id).await.len(), 3);

    let before = store.session_cache().map(|c| c.stats());
    save(&store, &acme, first.id, 4).await;
    assert_eq!(restored(&store, &acme, session.id).await.len(), 4);
    assert_eq!(restored(&store, &acme, session.id).await.len(), 4);
    if let (Some(before), Some(cache)) = (before, store.session_cache()) {
        let after = cache.stats();
        assert_eq!(
            after.hits,
            before.hits + 2,
            "a restore after an append and a repeated restore are hits"
        );
        assert_eq!(after.misses, before.misses, "no whole read was needed");
        assert!(after.bytes > 0 && after.bytes <= after.limit_bytes);
    }

    // A later execution (a subagent), then a step of the earlier one: the earlier
    // execution's step goes before the later execution's steps.
    clock.advance_secs(1);
    let second = create_execution(&store, &acme, Some(session.id), ExecutionStatus::Running).await;
    save(&store, &acme, second.id, 1).await;
    let steps = restored(&store, &acme, session.id).await;
    assert_eq!(steps.len(), 5);
    save(&store, &acme, first.id, 5).await;
    let steps = restored(&store, &acme, session.id).await;
    let order: Vec<(Id, u32)> = steps
        .iter()
        .map(|s| (s.execution_id, s.step_number))
        .collect();
    let mut expected: Vec<(Id, u32)> = (1..=5).map(|n| (first.id, n)).collect();
    expected.push((second.id, 1));
    assert_eq!(order, expected);

    // Another tenant's restore of this session finds nothing, cached or not.
    let globex = tenant("globex");
    assert!(
        ok(
            restore_memory(&store, &globex, session.id).await,
            "restore_memory"
        )
        .is_none(),
        "another tenant's session is not found"
    );
    // And a session of its own with steps is its own entry.
    let theirs = create_session(&store, &globex, Some("cached")).await;
    let exec = create_execution(&store, &globex, Some(theirs.id), ExecutionStatus::Running).await;
    save(&store, &globex, exec.id, 1).await;
    assert_eq!(restored(&store, &globex, theirs.id).await.len(), 1);
    assert_eq!(restored(&store, &acme, session.id).await.len(), 6);
}
