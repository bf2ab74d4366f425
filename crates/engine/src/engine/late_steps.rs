//! Test support: a store that acknowledges the first step of each execution last, as a
//! backend may that commits one execution's steps out of order (PostgreSQL's writers,
//! when an execution's saves move to another writer during its run).

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stepwise_core::{ExecutionStatus, Id, Step};
use stepwise_store::prelude::*;
use stepwise_store::{
    Ack, Layer, Loaded, NewStep, PassEvents, PassExecutions, PassKeys, PassLangGraphStore,
    PassMessages, PassOperations, PassQueue, PassRetention, PassSessions, PassSnapshots,
    PassWorkers, Result, SessionCache, StepAppend, StepMirror, StepsAfter, Tenant,
};

/// How long the first step's ack is held past its commit.
const HOLD: Duration = Duration::from_millis(100);

/// Wraps a store: the ack of an execution's first step resolves [`HOLD`] after the step
/// is durable, so later steps' acks resolve first. When it resolves, it checks whether the
/// execution had already changed status; [`Self::early`] counts those that had (a status
/// a client could read while a step the engine wrote was, as far as it knew, not saved).
#[derive(Clone)]
pub(super) struct LateFirstStep<S> {
    inner: S,
    held: Arc<Mutex<HashSet<Id>>>,
    early: Arc<AtomicUsize>,
    holding: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl<S: Store> LateFirstStep<S> {
    pub fn new(inner: S) -> Self {
        LateFirstStep {
            inner,
            held: Arc::default(),
            early: Arc::default(),
            holding: Arc::default(),
        }
    }

    /// Executions no longer running when their first step's ack resolved, once every
    /// held ack has.
    pub async fn early(&self) -> usize {
        let holding = std::mem::take(&mut *self.holding.lock().unwrap_or_else(|e| e.into_inner()));
        for task in holding {
            task.await.expect("a held ack's task ends");
        }
        self.early.load(Ordering::SeqCst)
    }

    /// `ack`, held when it is the execution's first step.
    fn hold(&self, tenant: &Tenant, execution_id: Id, ack: Ack<StepAppend>) -> Ack<StepAppend> {
        let first = self
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(execution_id);
        if !first {
            return ack;
        }
        let (tx, held) = Ack::channel();
        let (store, tenant, early) = (self.inner.clone(), tenant.clone(), self.early.clone());
        let task = tokio::spawn(async move {
            let result = ack.await;
            tokio::time::sleep(HOLD).await;
            let moved_on = store
                .get_execution(&tenant, execution_id)
                .await
                .ok()
                .flatten()
                .is_some_and(|e| e.status != ExecutionStatus::Running);
            if moved_on {
                early.fetch_add(1, Ordering::SeqCst);
            }
            let _ = tx.send(result);
        });
        self.holding
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(task);
        held
    }
}

impl<S: Store> Layer for LateFirstStep<S> {
    type Inner = S;

    fn layer_inner(&self) -> &S {
        &self.inner
    }
}

impl<S: Store> PassSessions for LateFirstStep<S> {}
impl<S: Store> PassMessages for LateFirstStep<S> {}
impl<S: Store> PassExecutions for LateFirstStep<S> {}
impl<S: Store> PassQueue for LateFirstStep<S> {}
impl<S: Store> PassWorkers for LateFirstStep<S> {}
impl<S: Store> PassSnapshots for LateFirstStep<S> {}
impl<S: Store> PassEvents for LateFirstStep<S> {}
impl<S: Store> PassRetention for LateFirstStep<S> {}
impl<S: Store> PassKeys for LateFirstStep<S> {}
impl<S: Store> PassLangGraphStore for LateFirstStep<S> {}
impl<S: Store> PassOperations for LateFirstStep<S> {}

// `orders_transitions` is left at its default (`false`): a store whose acks resolve out of
// order is one where the engine must await a run's acks before the status moves, the path
// these tests check. (Over SQLite, the status would otherwise ride the writer's queue.)
impl<S: Store> Store for LateFirstStep<S> {
    type Checkpoints = S::Checkpoints;

    fn checkpoints(&self) -> Option<&S::Checkpoints> {
        self.inner.checkpoints()
    }

    fn session_cache(&self) -> Option<&SessionCache> {
        self.inner.session_cache()
    }

    fn write_backlog(&self) -> u64 {
        self.inner.write_backlog()
    }

    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }
}

impl<S: Store> StepStore for LateFirstStep<S> {
    async fn append_step(&self, tenant: &Tenant, new: NewStep) -> Result<Ack<StepAppend>> {
        let execution_id = new.execution_id;
        let ack = self.inner.append_step(tenant, new).await?;
        Ok(self.hold(tenant, execution_id, ack))
    }

    async fn append_step_mirrored(
        &self,
        tenant: &Tenant,
        new: NewStep,
        mirror: StepMirror,
    ) -> Result<Ack<StepAppend>> {
        let execution_id = new.execution_id;
        let ack = self.inner.append_step_mirrored(tenant, new, mirror).await?;
        Ok(self.hold(tenant, execution_id, ack))
    }

    async fn list_steps(&self, tenant: &Tenant, execution_id: Id) -> Result<Loaded<Step>> {
        self.inner.list_steps(tenant, execution_id).await
    }

    async fn list_session_steps(&self, tenant: &Tenant, session_id: Id) -> Result<Loaded<Step>> {
        self.inner.list_session_steps(tenant, session_id).await
    }

    async fn list_session_steps_after(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
    ) -> Result<StepsAfter> {
        self.inner
            .list_session_steps_after(tenant, session_id, after)
            .await
    }
}
