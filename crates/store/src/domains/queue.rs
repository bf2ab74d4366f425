//! The execution queue: claims, leases, release and requeue. Every tenant's executions:
//! runners serve every tenant (a claim filter narrows what one takes). Which worker
//! processes a tenant has is [`crate::WorkerStore`].

use std::future::Future;
use std::time::Duration;

use stepwise_core::{Id, Timestamp};

use crate::{Claim, ClaimFilter, Result};

crate::domain! {
    $
    pub trait QueueStore, pass PassQueue, methods queue_store_methods {
        /// Claims up to one execution for each of `workers` among those `filter` allows, in
        /// one transaction where the backend can: the `k`th claim's lease owner is
        /// `workers[k]`. A claim takes a `running` execution whose worker's lease expired
        /// first (attempts over `max_attempts` fail it instead), else the oldest `pending`
        /// top-level execution of a session with no other execution running (subagents are
        /// run inline by their parent's worker, never claimed). Fewer claims than workers
        /// means nothing else was runnable.
        fn claim_matching(&self, filter: &ClaimFilter, workers: &[String], lease: Duration, max_attempts: u32) -> Result<Vec<Claim>>;

        /// Extends the leases this worker holds on these executions; returns the ids it no
        /// longer holds (cancelled, finished, or taken over).
        fn renew_leases(&self, worker: &str, ids: Vec<Id>, lease: Duration) -> Result<Vec<Id>>;

        /// When `worker`'s lease on this running execution runs out, if it holds it
        /// (`None`: cancelled, paused, finished, back in the queue, taken over, or never
        /// this worker's). A read, nothing written: an agent's writes check their lease
        /// with it and renew only a lease that has aged (see the engine's `keep_lease`).
        fn lease_expiry(&self, worker: &str, id: Id) -> Result<Option<Timestamp>>;

        /// Gives a claimed execution back to the queue at once (graceful shutdown); the
        /// attempt it was claimed with does not count.
        fn release(&self, worker: &str, id: Id) -> Result<()>;

        /// Puts a claimed execution back in the queue to be tried again (its agent failed
        /// and asked for a retry); unlike [`Self::release`], the attempt counts.
        fn requeue(&self, worker: &str, id: Id) -> Result<()>;

        /// Executions waiting to run.
        fn queue_depth(&self) -> Result<u64>;

        /// Resolves when another process may have queued work for the workers (PostgreSQL:
        /// a `NOTIFY` on the queue channel). Stores without such a doorbell never resolve
        /// (`std::future::pending()`): their workers rely on the in-process doorbell and the
        /// fallback poll. Required, so that a layer forwards the backend's own.
        fn queue_signal(&self) -> ();
    }
}

/// The claims every queue answers through [`QueueStore::claim_matching`]: derived for every
/// store, so no backend or layer has one of its own to forward or to shadow.
pub trait QueueStoreExt: QueueStore {
    /// Claims the next runnable execution of any agent type and tenant (see
    /// [`Self::claim_matching`]); `None` when there is nothing to do.
    fn claim_next(
        &self,
        worker: &str,
        lease: Duration,
        max_attempts: u32,
    ) -> impl Future<Output = Result<Option<Claim>>> + Send {
        async move {
            let workers = [worker.to_string()];
            let mut claims = self
                .claim_matching(&ClaimFilter::any(), &workers, lease, max_attempts)
                .await?;
            Ok(claims.pop())
        }
    }

    /// Claims up to one execution of any agent type and tenant for each of `workers`
    /// (see [`Self::claim_matching`]).
    fn claim_batch(
        &self,
        workers: &[String],
        lease: Duration,
        max_attempts: u32,
    ) -> impl Future<Output = Result<Vec<Claim>>> + Send {
        async move {
            self.claim_matching(&ClaimFilter::any(), workers, lease, max_attempts)
                .await
        }
    }
}

impl<T: QueueStore + ?Sized> QueueStoreExt for T {}
