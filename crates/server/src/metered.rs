//! [`Metered`]: a [`Store`] that times the saves and loads going through it, for
//! `/metrics`. `stepwise serve` wraps its store in it, so the engine, the HTTP handlers and
//! the cleaner all go through the same timings.
//!
//! - Save latency: from the call that queues a step, snapshot or event until its write is
//!   durable (the [`Ack`] resolves) — whether or not the caller awaits the `Ack`. Messages
//!   are written directly; their latency is the call's.
//! - Load latency: restoring a session's agent memory (`list_session_steps`) and reading
//!   its messages.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use stepwise_core::{Event, Execution, Id, Message, Snapshot, Step, Timestamp};
use stepwise_store::{
    Ack, Claim, ClaimFilter, EventStore, ExecutionStore, IfBusy, Layer, Loaded, MessageQuery,
    MessageStore, NewEvent, NewExecution, NewMessage, NewSnapshot, NewStep, PassKeys,
    PassOperations, PassRetention, PassSessions, PassWorkers, QueueStore, Result, SnapshotStore,
    StepAppend, StepMirror, StepStore, Store, Tenant, Transition,
};
use tokio::sync::broadcast;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// What a histogram sample measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Timed {
    SaveStep,
    SaveSnapshot,
    SaveEvent,
    SaveMessage,
    LoadMemory,
    LoadMessages,
}

impl Timed {
    const ALL: [Timed; 6] = [
        Timed::SaveStep,
        Timed::SaveSnapshot,
        Timed::SaveEvent,
        Timed::SaveMessage,
        Timed::LoadMemory,
        Timed::LoadMessages,
    ];

    fn kind(self) -> &'static str {
        match self {
            Timed::SaveStep => "step",
            Timed::SaveSnapshot => "snapshot",
            Timed::SaveEvent => "event",
            Timed::SaveMessage => "message",
            Timed::LoadMemory => "memory",
            Timed::LoadMessages => "messages",
        }
    }

    fn is_save(self) -> bool {
        !matches!(self, Timed::LoadMemory | Timed::LoadMessages)
    }
}

#[derive(Clone, Copy)]
struct Histogram {
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum_secs: f64,
}

const EMPTY: Histogram = Histogram {
    buckets: [0; BUCKETS.len()],
    count: 0,
    sum_secs: 0.0,
};

/// One histogram per [`Timed`], for the whole process.
static HISTOGRAMS: Mutex<[Histogram; 6]> = Mutex::new([EMPTY; 6]);

/// Adds one sample.
pub fn observe(what: Timed, took: Duration) {
    let secs = took.as_secs_f64();
    let mut all = HISTOGRAMS.lock().unwrap_or_else(|p| p.into_inner());
    let Some(index) = Timed::ALL.iter().position(|t| *t == what) else {
        return;
    };
    let h = &mut all[index];
    h.count += 1;
    h.sum_secs += secs;
    for (bucket, bound) in h.buckets.iter_mut().zip(BUCKETS) {
        if secs <= bound {
            *bucket += 1;
        }
    }
}

/// Claim queries the workers sent (one per `claim_matching` call), for
/// `stepwise_claim_queries_total`.
static CLAIM_QUERIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Appends the save and load histograms in Prometheus text format.
pub fn write_metrics(text: &mut String) {
    text.push_str(&format!(
        "# HELP stepwise_claim_queries_total Queries the workers sent to claim queued executions.\n\
         # TYPE stepwise_claim_queries_total counter\nstepwise_claim_queries_total {}\n",
        CLAIM_QUERIES.load(std::sync::atomic::Ordering::Relaxed)
    ));
    let all = *HISTOGRAMS.lock().unwrap_or_else(|p| p.into_inner());
    for (name, help, saves) in [
        (
            "stepwise_save_duration_seconds",
            "Time from queuing a save until it is durable, by kind.",
            true,
        ),
        (
            "stepwise_load_duration_seconds",
            "Time to load a session's agent memory or messages, by kind.",
            false,
        ),
    ] {
        text.push_str(&format!("# HELP {name} {help}\n# TYPE {name} histogram\n"));
        for (what, h) in Timed::ALL.iter().zip(all.iter()) {
            if what.is_save() != saves {
                continue;
            }
            let labels = format!("kind=\"{}\"", what.kind());
            for (bound, count) in BUCKETS.iter().zip(h.buckets) {
                text.push_str(&format!(
                    "{name}_bucket{{{labels},le=\"{bound}\"}} {count}\n"
                ));
            }
            text.push_str(&format!(
                "{name}_bucket{{{labels},le=\"+Inf\"}} {}\n{name}_sum{{{labels}}} {}\n{name}_count{{{labels}}} {}\n",
                h.count, h.sum_secs, h.count
            ));
        }
    }
}

/// A store that records save and load latency; everything else passes straight through. A
/// step it saves is also handed to the front-end streams as soon as it is stored
/// ([`crate::step_cache::remember_step`]), so their viewers need not read it back.
#[derive(Clone)]
pub struct Metered<S: Store> {
    inner: S,
}

impl<S: Store> Metered<S> {
    pub fn new(inner: S) -> Self {
        Metered { inner }
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }
}

/// Hands back an `Ack` that resolves with `ack`, timing `ack` from `started` on the way,
/// even when the caller drops its `Ack` (fire-and-forget saves are timed too).
fn timed_ack<T: Send + 'static>(what: Timed, started: Instant, ack: Ack<T>) -> Ack<T> {
    timed_ack_then(what, started, ack, |_| {})
}

/// [`timed_ack`], calling `stored` with the value once the save is acknowledged.
fn timed_ack_then<T: Send + 'static>(
    what: Timed,
    started: Instant,
    ack: Ack<T>,
    stored: impl FnOnce(&T) + Send + 'static,
) -> Ack<T> {
    let (tx, out) = Ack::channel();
    tokio::spawn(async move {
        let result = ack.await;
        if let Ok(value) = &result {
            observe(what, started.elapsed());
            stored(value);
        }
        let _ = tx.send(result);
    });
    out
}

/// [`timed_ack`] for a step, which is also handed to the front-end streams once stored.
fn timed_step(tenant: &Tenant, started: Instant, ack: Ack<StepAppend>) -> Ack<StepAppend> {
    let tenant = tenant.clone();
    timed_ack_then(Timed::SaveStep, started, ack, move |append| {
        crate::step_cache::remember_step(&tenant, &append.step);
    })
}

/// Awaits a save or a load, timing it when it succeeds.
async fn timed<T>(what: Timed, load: impl Future<Output = Result<T>>) -> Result<T> {
    let started = Instant::now();
    let value = load.await?;
    observe(what, started.elapsed());
    Ok(value)
}

impl<S: Store> Layer for Metered<S> {
    type Inner = S;

    fn layer_inner(&self) -> &S {
        &self.inner
    }
}

// Not timed: passed straight through.
impl<S: Store> PassSessions for Metered<S> {}
impl<S: Store> PassRetention for Metered<S> {}
impl<S: Store> PassKeys for Metered<S> {}
impl<S: Store> PassOperations for Metered<S> {}
impl<S: Store> PassWorkers for Metered<S> {}
impl<S: Store> stepwise_store::PassLangGraphStore for Metered<S> {}

impl<S: Store> Store for Metered<S> {
    type Checkpoints = S::Checkpoints;

    fn checkpoints(&self) -> Option<&S::Checkpoints> {
        self.inner.checkpoints()
    }

    fn session_cache(&self) -> Option<&stepwise_store::SessionCache> {
        self.inner.session_cache()
    }

    fn write_backlog(&self) -> u64 {
        self.inner.write_backlog()
    }

    fn orders_transitions(&self) -> bool {
        self.inner.orders_transitions()
    }

    async fn queue_ending(
        &self,
        tenant: &Tenant,
        id: Id,
        ending: stepwise_store::Ending,
    ) -> Result<Ack<Execution>> {
        // The end's answer and snapshot are saves like any other: timed as such.
        let started = Instant::now();
        let answer = ending.answer.is_some();
        let what = match ending.snapshot {
            Some(_) => Timed::SaveSnapshot,
            None => Timed::SaveEvent,
        };
        let ack = self.inner.queue_ending(tenant, id, ending).await?;
        Ok(timed_ack_then(what, started, ack, move |_| {
            if answer {
                observe(Timed::SaveMessage, started.elapsed());
            }
        }))
    }

    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }
}

impl<S: Store> MessageStore for Metered<S> {
    async fn append_message(&self, tenant: &Tenant, new: NewMessage) -> Result<Message> {
        timed(Timed::SaveMessage, self.inner.append_message(tenant, new)).await
    }

    async fn queue_message(
        &self,
        tenant: &Tenant,
        new: NewMessage,
    ) -> Result<(Message, Ack<Message>)> {
        let started = Instant::now();
        let (message, ack) = self.inner.queue_message(tenant, new).await?;
        Ok((message, timed_ack(Timed::SaveMessage, started, ack)))
    }

    async fn list_messages(
        &self,
        tenant: &Tenant,
        session_id: Id,
        query: MessageQuery,
    ) -> Result<Vec<Message>> {
        timed(
            Timed::LoadMessages,
            self.inner.list_messages(tenant, session_id, query),
        )
        .await
    }

    async fn list_session_messages_after(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
    ) -> Result<stepwise_store::MessagesAfter> {
        timed(
            Timed::LoadMessages,
            self.inner
                .list_session_messages_after(tenant, session_id, after),
        )
        .await
    }
}

impl<S: Store> ExecutionStore for Metered<S> {
    async fn create_execution(&self, tenant: &Tenant, new: NewExecution) -> Result<Execution> {
        self.inner.create_execution(tenant, new).await
    }

    async fn create_execution_with_messages(
        &self,
        tenant: &Tenant,
        new: NewExecution,
        messages: Vec<NewMessage>,
        events: Vec<NewEvent>,
        if_busy: IfBusy,
    ) -> Result<(Execution, Vec<Message>)> {
        timed(
            Timed::SaveMessage,
            self.inner
                .create_execution_with_messages(tenant, new, messages, events, if_busy),
        )
        .await
    }

    async fn get_execution(&self, tenant: &Tenant, id: Id) -> Result<Option<Execution>> {
        self.inner.get_execution(tenant, id).await
    }

    async fn list_executions(&self, tenant: &Tenant, session_id: Id) -> Result<Vec<Execution>> {
        self.inner.list_executions(tenant, session_id).await
    }

    async fn transition_execution(
        &self,
        tenant: &Tenant,
        id: Id,
        transition: Transition,
    ) -> Result<Execution> {
        self.inner
            .transition_execution(tenant, id, transition)
            .await
    }

    async fn remove_executions(
        &self,
        tenant: &Tenant,
        session_id: Id,
        ids: Vec<Id>,
    ) -> Result<u64> {
        self.inner.remove_executions(tenant, session_id, ids).await
    }
}

impl<S: Store> QueueStore for Metered<S> {
    async fn claim_matching(
        &self,
        filter: &ClaimFilter,
        workers: &[String],
        lease: Duration,
        max_attempts: u32,
    ) -> Result<Vec<Claim>> {
        CLAIM_QUERIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner
            .claim_matching(filter, workers, lease, max_attempts)
            .await
    }

    async fn renew_leases(&self, worker: &str, ids: Vec<Id>, lease: Duration) -> Result<Vec<Id>> {
        self.inner.renew_leases(worker, ids, lease).await
    }

    async fn lease_expiry(&self, worker: &str, id: Id) -> Result<Option<Timestamp>> {
        self.inner.lease_expiry(worker, id).await
    }

    async fn release(&self, worker: &str, id: Id) -> Result<()> {
        self.inner.release(worker, id).await
    }

    async fn requeue(&self, worker: &str, id: Id) -> Result<()> {
        self.inner.requeue(worker, id).await
    }

    async fn queue_depth(&self) -> Result<u64> {
        self.inner.queue_depth().await
    }

    async fn queue_signal(&self) {
        self.inner.queue_signal().await
    }
}

impl<S: Store> StepStore for Metered<S> {
    async fn append_step(&self, tenant: &Tenant, new: NewStep) -> Result<Ack<StepAppend>> {
        let started = Instant::now();
        let ack = self.inner.append_step(tenant, new).await?;
        Ok(timed_step(tenant, started, ack))
    }

    /// The inner store's own write (one transaction with its mirror where the backend has
    /// them), timed like [`Self::append_step`].
    async fn append_step_mirrored(
        &self,
        tenant: &Tenant,
        new: NewStep,
        mirror: StepMirror,
    ) -> Result<Ack<StepAppend>> {
        let started = Instant::now();
        let ack = self.inner.append_step_mirrored(tenant, new, mirror).await?;
        Ok(timed_step(tenant, started, ack))
    }

    async fn list_steps(&self, tenant: &Tenant, execution_id: Id) -> Result<Loaded<Step>> {
        self.inner.list_steps(tenant, execution_id).await
    }

    async fn list_session_steps(&self, tenant: &Tenant, session_id: Id) -> Result<Loaded<Step>> {
        timed(
            Timed::LoadMemory,
            self.inner.list_session_steps(tenant, session_id),
        )
        .await
    }

    async fn list_session_steps_after(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
    ) -> Result<stepwise_store::StepsAfter> {
        timed(
            Timed::LoadMemory,
            self.inner
                .list_session_steps_after(tenant, session_id, after),
        )
        .await
    }
}

impl<S: Store> SnapshotStore for Metered<S> {
    async fn save_snapshot(&self, tenant: &Tenant, new: NewSnapshot) -> Result<Ack<Snapshot>> {
        let started = Instant::now();
        let ack = self.inner.save_snapshot(tenant, new).await?;
        Ok(timed_ack(Timed::SaveSnapshot, started, ack))
    }

    async fn list_snapshots(&self, tenant: &Tenant, execution_id: Id) -> Result<Vec<Snapshot>> {
        self.inner.list_snapshots(tenant, execution_id).await
    }

    async fn get_snapshot(&self, tenant: &Tenant, id: Id) -> Result<Option<Snapshot>> {
        self.inner.get_snapshot(tenant, id).await
    }
}

impl<S: Store> EventStore for Metered<S> {
    async fn append_event(&self, tenant: &Tenant, new: NewEvent) -> Result<Ack<Event>> {
        let started = Instant::now();
        let ack = self.inner.append_event(tenant, new).await?;
        Ok(timed_ack(Timed::SaveEvent, started, ack))
    }

    async fn list_events(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Event>> {
        self.inner
            .list_events(tenant, session_id, after, limit)
            .await
    }

    fn subscribe(&self, tenant: &Tenant, session_id: Id) -> broadcast::Receiver<Arc<Event>> {
        self.inner.subscribe(tenant, session_id)
    }

    fn publish_live(&self, tenant: &Tenant, event: Event) {
        self.inner.publish_live(tenant, event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_land_in_their_kind_and_bucket() {
        observe(Timed::LoadMemory, Duration::from_micros(300));
        let mut text = String::new();
        write_metrics(&mut text);
        assert!(text.contains("# TYPE stepwise_save_duration_seconds histogram\n"));
        assert!(text.contains("# TYPE stepwise_load_duration_seconds histogram\n"));
        let count_line = text
            .lines()
            .find(|l| l.starts_with("stepwise_load_duration_seconds_count{kind=\"memory\"}"))
            .expect("a count line for memory loads");
        let count: u64 = count_line
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .expect("a number");
        assert!(count >= 1);
        assert!(text.contains("stepwise_save_duration_seconds_count{kind=\"step\"} "));
        assert!(!text.contains("stepwise_load_duration_seconds_count{kind=\"step\"}"));
    }
}
