use std::collections::HashSet;
use std::time::Duration;

use serde_json::json;
use stepwise_core::{ExecutionStatus, Id};
use stepwise_store::{Claim, Store, Transition};

use crate::Harness;
use crate::support::*;
use stepwise_store::prelude::*;

mod deep;

pub use deep::{queue_deep, queue_model};

const LEASE: Duration = Duration::from_secs(30);
const MAX_ATTEMPTS: u32 = 3;

async fn claim<S: Store>(store: &S, worker: &str) -> Option<Claim> {
    ok(
        store.claim_next(worker, LEASE, MAX_ATTEMPTS).await,
        "claim_next",
    )
}

#[track_caller]
fn claimed_id(claim: Option<Claim>, what: &str) -> Id {
    match claim {
        Some(claim) => claim.execution.id,
        None => panic!("{what}: expected a claim, claim_next found nothing to do"),
    }
}

/// Oldest pending first, one running execution per session, FIFO per session, every
/// tenant served, external executions never claimed.
pub async fn queue_claims<H: Harness>(harness: &H) {
    let (store, clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let globex = tenant("globex");
    assert_eq!(ok(store.queue_depth().await, "queue_depth"), 0);
    assert!(
        claim(&store, "w1").await.is_none(),
        "an empty queue has nothing to claim"
    );

    let session_a = create_session(&store, &acme, Some("a")).await;
    let session_b = create_session(&store, &globex, Some("b")).await;
    let a1 = create_execution(&store, &acme, Some(session_a.id), ExecutionStatus::Pending).await;
    let b1 = create_execution(
        &store,
        &globex,
        Some(session_b.id),
        ExecutionStatus::Pending,
    )
    .await;
    let a2 = create_execution(&store, &acme, Some(session_a.id), ExecutionStatus::Pending).await;
    let a3 = create_execution(&store, &acme, Some(session_a.id), ExecutionStatus::Pending).await;
    assert_eq!(
        ok(store.queue_depth().await, "queue_depth"),
        4,
        "four executions wait to run"
    );

    let first = claim(&store, "w1")
        .await
        .expect("the oldest pending execution is claimable");
    assert_eq!(
        first.execution.id, a1.id,
        "claim_next takes the oldest pending execution"
    );
    assert_eq!(first.tenant, acme, "the claim names the execution's tenant");
    assert_eq!(first.execution.status, ExecutionStatus::Running);
    assert_eq!(first.execution.attempts, 1);
    assert!(
        first.execution.started_at.is_some(),
        "a claimed execution has started"
    );
    assert_eq!(first.resume_answer, None);
    let read = some(store.get_execution(&acme, a1.id).await, "get claimed");
    assert_eq!(read.status, ExecutionStatus::Running);
    assert_eq!(read.attempts, 1);

    let second = claim(&store, "w2")
        .await
        .expect("another session's pending execution is claimable");
    assert_eq!(
        second.execution.id, b1.id,
        "a2 waits behind a1 in its session; b1 does not"
    );
    assert_eq!(second.tenant, globex);
    assert!(
        claim(&store, "w3").await.is_none(),
        "a2 and a3 wait while a1 runs"
    );
    assert_eq!(ok(store.queue_depth().await, "queue_depth"), 2);

    ok(
        store
            .transition_execution(&acme, a1.id, Transition::Complete { output: json!(1) })
            .await,
        "complete a1",
    );
    assert_eq!(
        claimed_id(claim(&store, "w3").await, "after a1 completed"),
        a2.id,
        "FIFO within a session"
    );
    assert!(claim(&store, "w4").await.is_none());
    ok(
        store
            .transition_execution(
                &acme,
                a2.id,
                Transition::Fail {
                    error_message: "x".into(),
                },
            )
            .await,
        "fail a2",
    );
    assert_eq!(
        claimed_id(claim(&store, "w4").await, "after a2 failed"),
        a3.id
    );
    ok(
        store
            .transition_execution(&acme, a3.id, Transition::Cancel)
            .await,
        "cancel a3",
    );
    ok(
        store
            .transition_execution(&globex, b1.id, Transition::Complete { output: json!(2) })
            .await,
        "complete b1",
    );
    assert!(claim(&store, "w1").await.is_none());
    assert_eq!(ok(store.queue_depth().await, "queue_depth"), 0);

    // A cancelled pending execution is never claimed, and does not hold up its session.
    let c1 = create_execution(&store, &acme, Some(session_a.id), ExecutionStatus::Pending).await;
    let c2 = create_execution(&store, &acme, Some(session_a.id), ExecutionStatus::Pending).await;
    ok(
        store
            .transition_execution(&acme, c1.id, Transition::Cancel)
            .await,
        "cancel c1",
    );
    assert_eq!(
        claimed_id(claim(&store, "w1").await, "after c1 was cancelled"),
        c2.id
    );
    ok(
        store
            .transition_execution(&acme, c2.id, Transition::Complete { output: json!(3) })
            .await,
        "complete c2",
    );

    // External executions are created running, hold no lease, and are never claimed, not
    // even much later; they still count as the session's running execution.
    let external =
        create_execution(&store, &acme, Some(session_a.id), ExecutionStatus::Running).await;
    let behind_external =
        create_execution(&store, &acme, Some(session_a.id), ExecutionStatus::Pending).await;
    assert!(
        claim(&store, "w1").await.is_none(),
        "a pending execution waits behind a running external one"
    );
    clock.advance_days(2);
    assert!(
        claim(&store, "w1").await.is_none(),
        "an external execution is never claimed, however old"
    );
    assert_eq!(
        some(store.get_execution(&acme, external.id).await, "external").attempts,
        0,
        "nobody claimed the external execution"
    );
    ok(
        store
            .transition_execution(
                &acme,
                external.id,
                Transition::Complete {
                    output: json!("ext"),
                },
            )
            .await,
        "complete external",
    );
    assert_eq!(
        claimed_id(
            claim(&store, "w1").await,
            "after the external run completed"
        ),
        behind_external.id
    );
    ok(
        store
            .transition_execution(
                &acme,
                behind_external.id,
                Transition::Complete { output: json!(4) },
            )
            .await,
        "complete",
    );

    // Background executions (no session) do not block each other.
    let bg1 = create_execution(&store, &acme, None, ExecutionStatus::Pending).await;
    let bg2 = create_execution(&store, &acme, None, ExecutionStatus::Pending).await;
    let got: HashSet<Id> = [
        claimed_id(claim(&store, "w1").await, "bg"),
        claimed_id(claim(&store, "w2").await, "bg"),
    ]
    .into();
    assert_eq!(
        got,
        HashSet::from([bg1.id, bg2.id]),
        "executions without a session run side by side"
    );
    assert!(claim(&store, "w3").await.is_none());
}

/// Leases: renewal keeps an execution, expiry hands it to another worker with one more
/// attempt, too many attempts fail it, release hands it back at once.
pub async fn queue_leases<H: Harness>(harness: &H) {
    let (store, clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let session = create_session(&store, &acme, Some("leases")).await;
    let execution =
        create_execution(&store, &acme, Some(session.id), ExecutionStatus::Pending).await;

    assert_eq!(
        execution.lease_expires_at, None,
        "a pending execution has no lease"
    );
    let first = claim(&store, "w1").await.expect("first claim");
    assert_eq!(first.execution.id, execution.id);
    let deadline = first
        .execution
        .lease_expires_at
        .expect("a claimed execution says when its lease runs out");
    assert!(deadline > first.execution.updated_at, "{deadline:?}");
    let read = |store: &H::Store| {
        let store = store.clone();
        let acme = acme.clone();
        async move {
            ok(
                store.get_execution(&acme, execution.id).await,
                "get_execution",
            )
            .expect("the execution")
        }
    };
    assert_eq!(read(&store).await.lease_expires_at, Some(deadline));
    assert!(
        claim(&store, "w2").await.is_none(),
        "a held lease is not claimable"
    );
    let expiry = |worker: &'static str| {
        let store = store.clone();
        async move {
            ok(
                store.lease_expiry(worker, execution.id).await,
                "lease_expiry",
            )
        }
    };
    assert_eq!(
        expiry("w1").await,
        Some(deadline),
        "the holder reads its lease's deadline"
    );
    assert_eq!(expiry("w2").await, None, "a lease another worker holds");
    assert_eq!(
        ok(
            store.lease_expiry("w1", stepwise_core::new_id()).await,
            "lease_expiry of an unknown id"
        ),
        None
    );

    // Renewal moves the deadline on: 20 s, renew for 30 s, 20 s more is still inside it.
    clock.advance_secs(20);
    let lost = ok(
        store.renew_leases("w1", vec![execution.id], LEASE).await,
        "renew_leases",
    );
    assert!(lost.is_empty(), "w1 still holds its lease: {lost:?}");
    let renewed = read(&store).await.lease_expires_at.expect("still leased");
    assert!(renewed > deadline, "renewed {renewed:?} after {deadline:?}");
    assert_eq!(expiry("w1").await, Some(renewed), "the renewed deadline");
    clock.advance_secs(20);
    assert!(
        claim(&store, "w2").await.is_none(),
        "a renewed lease has not expired"
    );

    // Another worker cannot renew a lease it does not hold, nor one on an unknown id.
    let unknown = stepwise_core::new_id();
    let lost = ok(
        store
            .renew_leases("w2", vec![execution.id, unknown], LEASE)
            .await,
        "renew foreign",
    );
    assert_eq!(
        lost.iter().copied().collect::<HashSet<_>>(),
        HashSet::from([execution.id, unknown])
    );
    assert!(
        claim(&store, "w2").await.is_none(),
        "a failed renewal by w2 did not touch w1's lease"
    );

    // Expiry: the execution goes to another worker, with one more attempt.
    clock.advance_secs(31);
    let taken = claim(&store, "w2")
        .await
        .expect("an expired lease is claimable again");
    assert_eq!(taken.execution.id, execution.id);
    assert_eq!(
        taken.execution.attempts, 2,
        "a takeover counts as another attempt"
    );
    assert_eq!(taken.execution.status, ExecutionStatus::Running);
    assert_eq!(taken.tenant, acme);
    let lost = ok(
        store.renew_leases("w1", vec![execution.id], LEASE).await,
        "renew after takeover",
    );
    assert_eq!(
        lost,
        vec![execution.id],
        "w1 learns it no longer holds the execution"
    );
    assert_eq!(expiry("w1").await, None, "w1's lease was taken over");
    assert_eq!(
        expiry("w2").await,
        taken.execution.lease_expires_at,
        "the new holder's deadline"
    );
    assert!(
        ok(
            store.renew_leases("w2", vec![execution.id], LEASE).await,
            "renew w2"
        )
        .is_empty()
    );

    // Over max_attempts the execution fails with a reason instead of running again.
    clock.advance_secs(31);
    let third = claim(&store, "w3")
        .await
        .expect("attempt 3 of 3 is allowed");
    assert_eq!(third.execution.attempts, 3);
    clock.advance_secs(31);
    assert!(
        claim(&store, "w4").await.is_none(),
        "a fourth attempt is not handed out"
    );
    let failed = some(store.get_execution(&acme, execution.id).await, "get failed");
    assert_eq!(
        failed.status,
        ExecutionStatus::Failed,
        "over max_attempts the execution fails"
    );
    assert!(
        failed
            .error_message
            .as_deref()
            .is_some_and(|m| !m.trim().is_empty()),
        "a failed execution says why: {:?}",
        failed.error_message
    );
    let lost = ok(
        store.renew_leases("w3", vec![execution.id], LEASE).await,
        "renew failed",
    );
    assert_eq!(
        lost,
        vec![execution.id],
        "a failed execution's lease is gone"
    );

    // The failure freed the session for the next execution.
    let next = create_execution(&store, &acme, Some(session.id), ExecutionStatus::Pending).await;
    assert_eq!(
        claimed_id(claim(&store, "w1").await, "after the failure"),
        next.id
    );

    // Release: back to the queue at once, no waiting for the lease.
    ok(store.release("w1", next.id).await, "release");
    let released = ok(store.get_execution(&acme, next.id).await, "get_execution").expect("next");
    assert_eq!(
        released.lease_expires_at, None,
        "a released execution has no lease"
    );
    let reclaimed = claim(&store, "w2")
        .await
        .expect("a released execution is claimable at once");
    assert_eq!(reclaimed.execution.id, next.id);
    assert_eq!(reclaimed.execution.status, ExecutionStatus::Running);
    let lost = ok(
        store.renew_leases("w1", vec![next.id], LEASE).await,
        "renew released",
    );
    assert_eq!(
        lost,
        vec![next.id],
        "w1 released it, so it no longer holds it"
    );

    // Releasing someone else's claim does nothing.
    let _ = store.release("w1", next.id).await;
    assert!(
        claim(&store, "w3").await.is_none(),
        "w1 cannot release w2's claim"
    );
    assert!(
        ok(
            store.renew_leases("w2", vec![next.id], LEASE).await,
            "renew w2"
        )
        .is_empty()
    );
    assert!(
        ok(store.lease_expiry("w2", next.id).await, "lease_expiry w2").is_some(),
        "w2 holds the next execution's lease"
    );

    // Finishing an execution ends its lease.
    ok(
        store
            .transition_execution(
                &acme,
                next.id,
                Transition::Complete {
                    output: json!("ok"),
                },
            )
            .await,
        "complete",
    );
    let done = ok(store.get_execution(&acme, next.id).await, "get_execution").expect("next");
    assert_eq!(
        done.lease_expires_at, None,
        "a finished execution has no lease"
    );
    let lost = ok(
        store.renew_leases("w2", vec![next.id], LEASE).await,
        "renew finished",
    );
    assert_eq!(lost, vec![next.id]);
    assert_eq!(
        ok(
            store.lease_expiry("w2", next.id).await,
            "lease_expiry finished"
        ),
        None,
        "a finished execution's lease is no one's"
    );
    clock.advance_days(1);
    assert!(
        claim(&store, "w3").await.is_none(),
        "finished executions are never claimed"
    );
}

/// Pause and resume: a paused execution leaves the queue; Resume puts it back and the
/// claim carries the user's answer.
pub async fn queue_resume<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let session = create_session(&store, &acme, Some("ask")).await;
    let execution =
        create_execution(&store, &acme, Some(session.id), ExecutionStatus::Pending).await;
    assert_eq!(claimed_id(claim(&store, "w1").await, "claim"), execution.id);

    let paused = ok(
        store
            .transition_execution(
                &acme,
                execution.id,
                Transition::Pause {
                    question: "What should I use?".into(),
                },
            )
            .await,
        "pause",
    );
    assert_eq!(paused.status, ExecutionStatus::Paused);
    assert!(
        claim(&store, "w2").await.is_none(),
        "a paused execution is not claimable"
    );
    let lost = ok(
        store.renew_leases("w1", vec![execution.id], LEASE).await,
        "renew paused",
    );
    assert_eq!(lost, vec![execution.id], "pausing ends the worker's hold");

    let answer = json!({"text": "the blue one", "n": 2});
    let resumed = ok(
        store
            .transition_execution(
                &acme,
                execution.id,
                Transition::Resume {
                    answer: answer.clone(),
                },
            )
            .await,
        "resume",
    );
    assert_eq!(resumed.status, ExecutionStatus::Pending);
    assert_eq!(ok(store.queue_depth().await, "queue_depth"), 1);
    let claim_back = claim(&store, "w2")
        .await
        .expect("a resumed execution is claimable");
    assert_eq!(
        claim_back.execution.id, execution.id,
        "the same execution continues"
    );
    assert_eq!(
        claim_back.resume_answer,
        Some(answer),
        "the claim carries the user's answer"
    );
    assert_eq!(claim_back.execution.status, ExecutionStatus::Running);
    assert_eq!(claim_back.tenant, acme);

    let done = ok(
        store
            .transition_execution(
                &acme,
                execution.id,
                Transition::Complete {
                    output: json!("You said: the blue one"),
                },
            )
            .await,
        "complete",
    );
    assert_eq!(done.status, ExecutionStatus::Completed);

    // An ordinary claim has no answer.
    let plain = create_execution(&store, &acme, Some(session.id), ExecutionStatus::Pending).await;
    let claim_plain = claim(&store, "w1").await.expect("claim plain");
    assert_eq!(claim_plain.execution.id, plain.id);
    assert_eq!(
        claim_plain.resume_answer, None,
        "only a resumed execution carries an answer"
    );
}

/// One pending execution in each of 24 sessions of tenant `acme`: their ids.
async fn pending_in_24_sessions<S: Store>(store: &S) -> HashSet<Id> {
    let acme = tenant("acme");
    let mut pending = HashSet::new();
    for i in 0..24 {
        let session = create_session(store, &acme, Some(&format!("c{i}"))).await;
        pending.insert(
            create_execution(store, &acme, Some(session.id), ExecutionStatus::Pending)
                .await
                .id,
        );
    }
    pending
}

/// Every execution of `expected` was claimed, none twice.
#[track_caller]
fn assert_claimed_once(claimed: &[Id], expected: &HashSet<Id>) {
    let unique: HashSet<Id> = claimed.iter().copied().collect();
    assert_eq!(
        unique.len(),
        claimed.len(),
        "no execution was claimed twice"
    );
    assert_eq!(&unique, expected, "every execution was claimed");
}

/// Workers claiming at the same time never get the same execution.
pub async fn queue_concurrent_claims<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let expected = pending_in_24_sessions(&store).await;
    let mut workers = Vec::new();
    for w in 0..6 {
        let store = store.clone();
        workers.push(tokio::spawn(async move {
            let worker = format!("worker-{w}");
            let mut mine = Vec::new();
            while let Some(claim) = ok(
                store.claim_next(&worker, LEASE, MAX_ATTEMPTS).await,
                "claim_next",
            ) {
                mine.push(claim.execution.id);
            }
            mine
        }));
    }
    let mut claimed = Vec::new();
    for worker in workers {
        claimed.extend(ok(worker.await, "worker task"));
    }
    assert_claimed_once(&claimed, &expected);
    assert_eq!(ok(store.queue_depth().await, "queue_depth"), 0);
}

/// Pausing ends a claim cleanly: it is not an interruption. An execution paused and resumed
/// more times than `max_attempts` still runs, and a crash after that (the lease expiring)
/// is handed to another worker rather than failed.
pub async fn queue_pause_is_not_an_attempt<H: Harness>(harness: &H) {
    let (store, clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let session = create_session(&store, &acme, Some("questions")).await;
    let execution =
        create_execution(&store, &acme, Some(session.id), ExecutionStatus::Pending).await;
    for round in 0..(MAX_ATTEMPTS + 4) {
        let taken = claim(&store, "w1")
            .await
            .unwrap_or_else(|| panic!("round {round}: the resumed execution is claimable"));
        assert_eq!(taken.execution.id, execution.id);
        assert_eq!(
            taken.execution.attempts, 1,
            "round {round}: a claim after a pause is the first attempt of that run"
        );
        let paused = ok(
            store
                .transition_execution(
                    &acme,
                    execution.id,
                    Transition::Pause {
                        question: format!("question {round}?"),
                    },
                )
                .await,
            "pause",
        );
        assert_eq!(paused.attempts, 0, "pausing clears the interruption count");
        ok(
            store
                .transition_execution(
                    &acme,
                    execution.id,
                    Transition::Resume {
                        answer: json!({"round": round}),
                    },
                )
                .await,
            "resume",
        );
    }
    // The worker now crashes mid-run: its lease expires and another worker takes over.
    assert_eq!(claimed_id(claim(&store, "w1").await, "claim"), execution.id);
    clock.advance_secs(31);
    let takeover = claim(&store, "w2")
        .await
        .expect("after many pauses, a crash is still only the first interruption");
    assert_eq!(takeover.execution.id, execution.id);
    assert_eq!(takeover.execution.attempts, 2);
    assert_eq!(takeover.execution.status, ExecutionStatus::Running);
}

async fn claim_batch<S: Store>(store: &S, workers: &[&str]) -> Vec<Claim> {
    let workers: Vec<String> = workers.iter().map(|w| w.to_string()).collect();
    ok(
        store.claim_batch(&workers, LEASE, MAX_ATTEMPTS).await,
        "claim_batch",
    )
}

/// One call claims for several workers: an expired lease first, then the oldest pending
/// execution of each session with nothing running, the `k`th claim held by the `k`th
/// worker; fewer claims than workers when nothing else can run.
pub async fn queue_claim_batch<H: Harness>(harness: &H) {
    let (store, clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let globex = tenant("globex");
    assert!(
        claim_batch(&store, &["w1", "w2"]).await.is_empty(),
        "an empty queue has nothing to claim"
    );
    let session_d = create_session(&store, &acme, Some("d")).await;
    let d1 = create_execution(&store, &acme, Some(session_d.id), ExecutionStatus::Pending).await;
    assert_eq!(claimed_id(claim(&store, "gone").await, "d1"), d1.id);
    clock.advance_secs(31); // past the 30 s lease

    let session_a = create_session(&store, &acme, Some("a")).await;
    let session_b = create_session(&store, &globex, Some("b")).await;
    let a1 = create_execution(&store, &acme, Some(session_a.id), ExecutionStatus::Pending).await;
    let b1 = create_execution(
        &store,
        &globex,
        Some(session_b.id),
        ExecutionStatus::Pending,
    )
    .await;
    let a2 = create_execution(&store, &acme, Some(session_a.id), ExecutionStatus::Pending).await;

    let workers = ["w1", "w2", "w3", "w4"];
    let claims = claim_batch(&store, &workers).await;
    let ids: Vec<Id> = claims.iter().map(|c| c.execution.id).collect();
    assert_eq!(
        ids,
        vec![d1.id, a1.id, b1.id],
        "the expired lease, then one execution per session, oldest first (a2 waits behind a1)"
    );
    assert_eq!(
        claims[0].execution.attempts, 2,
        "a taken-over lease is a new attempt"
    );
    assert_eq!(claims[2].tenant, globex, "each claim names its tenant");
    for (claim, worker) in claims.iter().zip(workers) {
        assert_eq!(claim.execution.status, ExecutionStatus::Running);
        let lost = ok(
            store
                .renew_leases(worker, vec![claim.execution.id], LEASE)
                .await,
            "renew_leases",
        );
        assert!(
            lost.is_empty(),
            "{worker} holds the lease of the claim it was given"
        );
    }
    let lost = ok(
        store.renew_leases("w4", vec![a1.id], LEASE).await,
        "renew foreign",
    );
    assert_eq!(
        lost,
        vec![a1.id],
        "a worker left without a claim holds nothing"
    );
    assert!(
        claim_batch(&store, &["w4", "w5"]).await.is_empty(),
        "a2 waits while a1 runs"
    );

    ok(
        store
            .transition_execution(&acme, a1.id, Transition::Complete { output: json!(1) })
            .await,
        "complete a1",
    );
    let claims = claim_batch(&store, &["w4", "w5"]).await;
    assert_eq!(
        claims.iter().map(|c| c.execution.id).collect::<Vec<_>>(),
        vec![a2.id],
        "FIFO within a session"
    );
    assert_eq!(ok(store.queue_depth().await, "queue_depth"), 0);
}

/// Batches claimed at the same time never share an execution, and together take them all.
pub async fn queue_concurrent_claim_batches<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let expected = pending_in_24_sessions(&store).await;
    let mut claimers = Vec::new();
    for c in 0..3 {
        let store = store.clone();
        claimers.push(tokio::spawn(async move {
            let workers: Vec<String> = (0..4).map(|w| format!("claimer-{c}-{w}")).collect();
            let mut mine = Vec::new();
            loop {
                let claims = ok(
                    store.claim_batch(&workers, LEASE, MAX_ATTEMPTS).await,
                    "claim_batch",
                );
                if claims.is_empty() {
                    break;
                }
                mine.extend(claims.into_iter().map(|c| c.execution.id));
            }
            mine
        }));
    }
    let mut claimed = Vec::new();
    for claimer in claimers {
        claimed.extend(ok(claimer.await, "claimer task"));
    }
    assert_claimed_once(&claimed, &expected);
}
