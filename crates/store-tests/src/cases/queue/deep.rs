//! The queue under load: a deep queue drained by concurrent claimers, and a seeded random
//! run checked against a model of what is runnable.

// The cases share the helpers of `queue.rs` (claims, the lease, attempts).
use super::*;

/// A deep queue keeps every rule: executions queued into many sessions (interleaved, a
/// few cancelled while pending, one session blocked by an external execution running,
/// executions without a session), drained by concurrent claimers that finish what they
/// claim, run each session's executions one at a time and in the order they were queued,
/// and every execution exactly once.
pub async fn queue_deep<H: Harness>(harness: &H) {
    use std::sync::{Arc, Mutex};

    const SESSIONS: usize = 12;
    const PER_SESSION: usize = 40;
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let mut sessions = Vec::with_capacity(SESSIONS);
    for s in 0..SESSIONS {
        sessions.push(
            create_session(&store, &acme, Some(&format!("deep-{s}")))
                .await
                .id,
        );
    }
    // Session 0 has an external execution running: nothing of it may be claimed until it
    // ends.
    let blocker =
        create_execution(&store, &acme, Some(sessions[0]), ExecutionStatus::Running).await;
    // Queued round-robin, so the sessions' executions interleave in time.
    let mut order: std::collections::HashMap<Id, Vec<Id>> = std::collections::HashMap::new();
    let mut cancelled = HashSet::new();
    for n in 0..PER_SESSION {
        for (s, session) in sessions.iter().enumerate() {
            let e = create_execution(&store, &acme, Some(*session), ExecutionStatus::Pending).await;
            // Every seventh one is cancelled while it waits (the head of its session, often).
            if (n * SESSIONS + s) % 7 == 3 {
                ok(
                    store
                        .transition_execution(&acme, e.id, Transition::Cancel)
                        .await,
                    "cancel a pending execution",
                );
                cancelled.insert(e.id);
            } else {
                order.entry(*session).or_default().push(e.id);
            }
        }
    }
    let mut sessionless = HashSet::new();
    for _ in 0..3 {
        sessionless.insert(
            create_execution(&store, &acme, None, ExecutionStatus::Pending)
                .await
                .id,
        );
    }
    let expected_depth = (SESSIONS * PER_SESSION - cancelled.len() + sessionless.len()) as u64;
    assert_eq!(
        ok(store.queue_depth().await, "queue_depth"),
        expected_depth,
        "the queue holds every pending execution"
    );

    // The executions of the blocked session are not claimable while its run goes on.
    let blocked: HashSet<Id> = order[&sessions[0]].iter().copied().collect();
    let probers = ["p1", "p2", "p3", "p4"];
    let probe = claim_batch(&store, &probers).await;
    assert_eq!(
        probe.len(),
        probers.len(),
        "other sessions have work to claim"
    );
    assert!(
        probe.iter().all(|c| !blocked.contains(&c.execution.id)),
        "a session with an execution running has nothing claimed"
    );
    // Hand the probe's claims back (the kth claim is the kth worker's; a release does not
    // count as an attempt).
    for (claim, worker) in probe.iter().zip(probers) {
        ok(store.release(worker, claim.execution.id).await, "release");
    }
    ok(
        store
            .transition_execution(
                &acme,
                blocker.id,
                Transition::Complete {
                    output: json!("done"),
                },
            )
            .await,
        "complete the external execution",
    );

    // Concurrent claimers: each claims a batch, checks no session runs twice, finishes.
    let running: Arc<Mutex<HashSet<Option<Id>>>> = Arc::new(Mutex::new(HashSet::new()));
    // (session, execution) in the order claimed.
    type Claimed = Arc<Mutex<Vec<(Option<Id>, Id)>>>;
    let claimed: Claimed = Arc::new(Mutex::new(Vec::new()));
    let mut claimers = Vec::new();
    for c in 0..3 {
        let (store, running, claimed, acme) = (
            store.clone(),
            running.clone(),
            claimed.clone(),
            acme.clone(),
        );
        claimers.push(tokio::spawn(async move {
            let workers: Vec<String> = (0..4).map(|w| format!("deep-{c}-{w}")).collect();
            loop {
                let claims = ok(
                    store.claim_batch(&workers, LEASE, MAX_ATTEMPTS).await,
                    "claim_batch",
                );
                if claims.is_empty() {
                    break;
                }
                for claim in &claims {
                    let session = claim.execution.session_id;
                    if session.is_some() {
                        let fresh = running
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(session);
                        assert!(fresh, "two executions of session {session:?} ran at once");
                    }
                    claimed
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((session, claim.execution.id));
                }
                for claim in claims {
                    // No longer running once the transition starts: the next claim of the
                    // session can only come after it commits.
                    running
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&claim.execution.session_id);
                    ok(
                        store
                            .transition_execution(
                                &acme,
                                claim.execution.id,
                                Transition::Complete {
                                    output: json!("ok"),
                                },
                            )
                            .await,
                        "complete a claimed execution",
                    );
                }
            }
        }));
    }
    for claimer in claimers {
        ok(claimer.await, "claimer task");
    }
    let claimed = claimed.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut per_session: std::collections::HashMap<Id, Vec<Id>> = std::collections::HashMap::new();
    let mut claimed_sessionless = HashSet::new();
    for (session, id) in &claimed {
        match session {
            Some(s) => per_session.entry(*s).or_default().push(*id),
            None => {
                claimed_sessionless.insert(*id);
            }
        }
    }
    for session in &sessions {
        assert_eq!(
            per_session.get(session),
            order.get(session),
            "session {session}: every execution claimed once, in the order queued"
        );
    }
    assert_eq!(
        claimed_sessionless, sessionless,
        "executions without a session are claimed too"
    );
    assert!(
        claimed.iter().all(|(_, id)| !cancelled.contains(id)),
        "a cancelled execution is never claimed"
    );
    assert_eq!(ok(store.queue_depth().await, "queue_depth"), 0);
}

/// The queue against a model: a seeded random run of what changes the queue (executions
/// queued, opened running, claimed, released, paused, resumed, completed, failed,
/// cancelled; in several sessions and without one), and after each step a claim for many
/// workers must return exactly what the model says is runnable: the oldest pending
/// top-level execution of each session with nothing running, and every pending one
/// without a session. The claims are then released (or finished) and the run goes on.
pub async fn queue_model<H: Harness>(harness: &H) {
    #[derive(Clone, Copy, PartialEq, Debug)]
    enum St {
        Pending,
        Running,
        Paused,
        Done,
    }
    struct Exec {
        id: Id,
        session: Option<Id>,
        status: St,
    }
    let (store, clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let mut sessions = Vec::new();
    for s in 0..4 {
        sessions.push(
            create_session(&store, &acme, Some(&format!("model-{s}")))
                .await
                .id,
        );
    }
    // In creation order, which is the queue's order (the clock moves between them).
    let mut model: Vec<Exec> = Vec::new();
    let mut seed: u64 = 0x5eed_cafe;
    let mut rand = |n: usize| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((seed >> 33) as usize) % n
    };
    let workers: Vec<String> = (0..32).map(|w| format!("model-{w}")).collect();
    let worker_refs: Vec<&str> = workers.iter().map(String::as_str).collect();
    for round in 0..120i64 {
        // A millisecond a round: ordered, and far inside every lease.
        clock.set(stepwise_core::Timestamp(T0.0 + (round + 1) * 1_000));
        let pick = |model: &Vec<Exec>, st: St, r: usize| -> Option<usize> {
            let of: Vec<usize> = (0..model.len())
                .filter(|&i| model[i].status == st)
                .collect();
            (!of.is_empty()).then(|| of[r % of.len()])
        };
        match rand(10) {
            0..=3 => {
                let session = if rand(8) == 0 {
                    None
                } else {
                    Some(sessions[rand(sessions.len())])
                };
                let e = create_execution(&store, &acme, session, ExecutionStatus::Pending).await;
                model.push(Exec {
                    id: e.id,
                    session,
                    status: St::Pending,
                });
            }
            4 => {
                let session = Some(sessions[rand(sessions.len())]);
                let e = create_execution(&store, &acme, session, ExecutionStatus::Running).await;
                model.push(Exec {
                    id: e.id,
                    session,
                    status: St::Running,
                });
            }
            5 => {
                if let Some(i) = pick(&model, St::Running, rand(1000)) {
                    let t = match rand(3) {
                        0 => Transition::Complete {
                            output: json!("ok"),
                        },
                        1 => Transition::Fail {
                            error_message: "failed".into(),
                        },
                        _ => Transition::Cancel,
                    };
                    ok(
                        store.transition_execution(&acme, model[i].id, t).await,
                        "finish a running execution",
                    );
                    model[i].status = St::Done;
                }
            }
            6 => {
                if let Some(i) = pick(&model, St::Pending, rand(1000)) {
                    ok(
                        store
                            .transition_execution(&acme, model[i].id, Transition::Cancel)
                            .await,
                        "cancel a pending execution",
                    );
                    model[i].status = St::Done;
                }
            }
            7 => {
                if let Some(i) = pick(&model, St::Running, rand(1000)) {
                    ok(
                        store
                            .transition_execution(
                                &acme,
                                model[i].id,
                                Transition::Pause {
                                    question: "?".into(),
                                },
                            )
                            .await,
                        "pause",
                    );
                    model[i].status = St::Paused;
                }
            }
            _ => {
                if let Some(i) = pick(&model, St::Paused, rand(1000)) {
                    ok(
                        store
                            .transition_execution(
                                &acme,
                                model[i].id,
                                Transition::Resume {
                                    answer: json!("yes"),
                                },
                            )
                            .await,
                        "resume",
                    );
                    model[i].status = St::Pending;
                }
            }
        }
        // What the model says may run now.
        let mut runnable = HashSet::new();
        let busy: HashSet<Id> = model
            .iter()
            .filter(|e| e.status == St::Running)
            .filter_map(|e| e.session)
            .collect();
        let mut headed = HashSet::new();
        for e in model.iter().filter(|e| e.status == St::Pending) {
            match e.session {
                None => {
                    runnable.insert(e.id);
                }
                Some(s) if !busy.contains(&s) && headed.insert(s) => {
                    runnable.insert(e.id);
                }
                Some(_) => {}
            }
        }
        let claims = claim_batch(&store, &worker_refs).await;
        let claimed: HashSet<Id> = claims.iter().map(|c| c.execution.id).collect();
        assert_eq!(
            claimed.len(),
            claims.len(),
            "round {round}: no execution claimed twice"
        );
        if claimed != runnable {
            let states: Vec<String> = model
                .iter()
                .map(|e| format!("{} {:?} {:?}", e.id, e.session, e.status))
                .collect();
            panic!(
                "round {round}: the claim took {claimed:?}, the model says {runnable:?} may run; executions:\n{}",
                states.join("\n")
            );
        }
        // Hand most back (a release is not an attempt); keep some running.
        for (claim, worker) in claims.iter().zip(&worker_refs) {
            let i = model
                .iter()
                .position(|e| e.id == claim.execution.id)
                .unwrap_or_else(|| panic!("round {round}: claimed an unknown execution"));
            if rand(3) == 0 {
                model[i].status = St::Running;
            } else {
                ok(store.release(worker, claim.execution.id).await, "release");
            }
        }
    }
}
