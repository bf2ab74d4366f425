//! The in-process runners of built-in agents (not worker processes: those are `leases.rs`):
//! one claimer loop that claims executions from the queue (woken by the
//! doorbell, the store's queue signal or a jittered fallback poll) and hands each to a
//! runner, and the heartbeat that keeps a claim's lease alive.

use std::sync::atomic::Ordering;
use std::time::Duration;

use stepwise_core::{Id, new_id};
use stepwise_store::{Claim, Store, Tenant};
use tokio_util::sync::CancellationToken;

use super::{EXTERNAL_AGENT, Engine, RunControl, RunEnd};

impl<S: Store> Engine<S> {
    /// Starts the workers: one claimer that sleeps on the doorbell and hands what it
    /// claims to a bounded pool of runners (`workers` executions at a time).
    pub fn spawn_runners(&self) {
        let prefix = format!(
            "{}-{}",
            std::process::id(),
            &new_id().simple().to_string()[20..]
        );
        let engine = self.clone();
        self.inner
            .tracker
            .spawn(async move { engine.claimer_loop(prefix).await });
    }

    /// Stops taking work; running executions stop at their next step boundary and go back
    /// to the queue (resumable). Waits up to `grace` for the workers to finish.
    pub async fn shutdown(&self, grace: Duration) -> bool {
        self.inner.shutdown.cancel();
        self.inner.tracker.close();
        tokio::time::timeout(grace, self.inner.tracker.wait())
            .await
            .is_ok()
    }

    /// Claims work for every free runner at once while there is some, then sleeps until the
    /// doorbell rings (a message queued here, a run ended here, another node's `NOTIFY`)
    /// or the jittered fallback poll is due (leases of crashed workers, lost notifications).
    /// An idle node so sends one claim query per fallback interval, not one per worker.
    async fn claimer_loop(self, prefix: String) {
        let config = &self.inner.config;
        let shutdown = self.inner.shutdown.clone();
        let filter = self.builtin_claims();
        let (free_tx, mut free_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        for n in 0..config.workers.max(1) {
            let _ = free_tx.send(format!("worker-{prefix}-{n}"));
        }
        tracing::debug!(workers = config.workers.max(1), "workers started");
        loop {
            // Every free runner: its name is a claim's lease owner. Wait for the first.
            let mut free = vec![tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                worker = free_rx.recv() => match worker {
                    Some(worker) => worker,
                    None => break,
                },
            }];
            while let Ok(worker) = free_rx.try_recv() {
                free.push(worker);
            }
            // One query claims for all of them (several executions at once).
            let retry_soon = match self
                .inner
                .store
                .claim_matching(&filter, &free, config.lease, config.max_attempts)
                .await
            {
                Ok(claims) => {
                    let all_busy = claims.len() == free.len();
                    let mut free = free.into_iter();
                    for (claim, worker) in claims.into_iter().zip(free.by_ref()) {
                        let engine = self.clone();
                        let free_tx = free_tx.clone();
                        self.inner.tracker.spawn(async move {
                            engine.run_claim(&worker, claim).await;
                            let _ = free_tx.send(worker);
                        });
                    }
                    for worker in free {
                        let _ = free_tx.send(worker);
                    }
                    if all_busy {
                        // More may be pending: look again as soon as a runner is free.
                        continue;
                    }
                    false
                }
                Err(e) => {
                    tracing::warn!(workers = free.len(), error = %e, "claiming work failed");
                    for worker in free {
                        let _ = free_tx.send(worker);
                    }
                    true
                }
            };
            // A crashed worker's lease expires at most `lease` after its last heartbeat.
            let wait = if retry_soon {
                config.poll_interval.min(Duration::from_secs(1))
            } else {
                jittered(config.poll_interval).min(config.lease)
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.inner.doorbell.notified() => {}
                _ = self.inner.store.queue_signal() => {
                    // Another node queued work: the worker processes waiting here look too.
                    self.inner.worker_bell.notify_waiters();
                }
                _ = tokio::time::sleep(wait) => {}
            }
        }
        tracing::debug!("workers stopped");
    }

    /// A take-over of an execution this node still runs (the process was frozen past the
    /// lease, say, and the earlier run's heartbeat has not told it yet): the earlier run
    /// stops as one that lost its lease, and what it queued is saved, before this run reads
    /// the steps, so no step runs twice and none is announced twice.
    async fn stop_earlier_run_here(&self, tenant: &Tenant, id: Id) {
        let Some(earlier) = self.running_map().get(&id).cloned() else {
            return;
        };
        tracing::warn!(execution = %id, tenant = tenant.as_str(), "this node still ran the execution it takes over; stopping that run first");
        earlier.lost.store(true, Ordering::SeqCst);
        earlier.cancel.cancel();
        let started = std::time::Instant::now();
        while self.running_map().contains_key(&id) && started.elapsed() < EARLIER_RUN_WAIT {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if let Err(e) = self.inner.store.flush().await {
            tracing::warn!(execution = %id, error = %e, "could not wait for the earlier run's saves");
        }
    }

    /// Runs one claimed execution: a built-in agent's step loop under a heartbeat.
    pub(super) async fn run_claim(&self, worker: &str, claim: Claim) {
        let Claim {
            execution,
            tenant,
            resume_answer,
        } = claim;
        let id = execution.id;
        if execution.attempts > 1 && resume_answer.is_none() {
            tracing::warn!(execution = %id, attempt = execution.attempts, agent = %execution.agent_type, worker, "taking the execution over: its previous lease expired");
        }
        tracing::info!(execution = %id, attempts = execution.attempts, agent = %execution.agent_type, "running execution");
        self.stop_earlier_run_here(&tenant, id).await;
        let ctl = RunControl::new(worker, 0);
        self.running_map().insert(id, ctl.clone());
        let _run = self.working();
        let heartbeat_done = CancellationToken::new();
        let heartbeat_task = tokio::spawn(heartbeat(
            self.inner.store.clone(),
            worker.to_string(),
            id,
            self.inner.config.lease,
            ctl.clone(),
            heartbeat_done.clone(),
        ));

        let end = if execution.agent_type == EXTERNAL_AGENT
            && resume_answer.is_none()
            && execution.attempts <= 1
        {
            // A recorder's lease ran out (the first take-over of an execution its recorder
            // opened leased): the recorder stopped. Its saved steps stay; the session's
            // queue moves on. (A resumed pause held by a server starts a take-over at
            // attempt 2 and is held again below.)
            tracing::warn!(execution = %id, session = ?execution.session_id, "failing an external execution: its recorder stopped renewing its lease");
            self.fail_unstarted(
                &tenant,
                &execution,
                &super::external::recorder_stopped(self.inner.config.lease),
                None,
            )
            .await
        } else if execution.parent_execution_id.is_some() {
            // A subagent whose parent's worker died: the parent runs the subagent again
            // when it resumes, so this one is closed.
            self.fail_unstarted(
                &tenant,
                &execution,
                "the parent execution's worker stopped; the parent runs the subagent again",
                None,
            )
            .await
        } else if execution.agent_type == EXTERNAL_AGENT {
            // A paused external execution resumed by the user's message: it is running
            // again, driven over HTTP by its agent. Keep its lease alive (without holding a
            // worker) until the agent finishes it or this server stops.
            let store = self.inner.store.clone();
            let (worker, lease, shutdown) = (
                worker.to_string(),
                self.inner.config.lease,
                self.inner.shutdown.clone(),
            );
            let hold = RunControl::new(&worker, 0);
            self.inner
                .tracker
                .spawn(heartbeat(store, worker, id, lease, hold, shutdown));
            RunEnd::Lost
        } else {
            self.drive(tenant.clone(), execution, resume_answer, ctl.clone(), None)
                .await
        };

        heartbeat_done.cancel();
        let _ = heartbeat_task.await;
        self.running_map().remove(&id);
        if end == RunEnd::Released {
            // The session's next queued execution may run now (a finished run rang already).
            self.ring();
        }
    }
}

/// Renews the claim's lease every third of it; a lost lease (cancelled or taken over
/// elsewhere) marks the run lost and cancels it.
async fn heartbeat<S: Store>(
    store: S,
    worker: String,
    id: Id,
    lease: Duration,
    ctl: RunControl,
    done: CancellationToken,
) {
    let period = (lease / 3).max(Duration::from_millis(50));
    loop {
        tokio::select! {
            _ = done.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
        }
        match store.renew_leases(&worker, vec![id], lease).await {
            Ok(lost) if lost.contains(&id) => {
                tracing::info!(execution = %id, "lost the lease (cancelled or taken over); stopping this run");
                ctl.lost.store(true, Ordering::SeqCst);
                ctl.cancel.cancel();
                return;
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(execution = %id, error = %e, "could not renew the lease"),
        }
    }
}

/// How long a take-over waits for this node's earlier run of the execution to stop.
const EARLIER_RUN_WAIT: Duration = Duration::from_secs(30);

/// `base` plus a random part of it (so nodes started together do not poll together).
fn jittered(base: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(base.as_nanos() as u64);
    let fraction = (hasher.finish() % 1_000) as u32;
    base + base * fraction / 1_000
}
