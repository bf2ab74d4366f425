//! Group commit. Steps, snapshots, events and messages are queued on a bounded channel and return
//! an [`Ack`] at once; one writer task takes whatever is queued (up to `max_batch`) and
//! commits it in one transaction with a handful of set-based statements (multi-row
//! inserts from `unnest` arrays), so the cost per save falls as concurrency rises. Only
//! after the commit are the callers answered and the events handed to the live relay.
//!
//! Event ids: the batch locks the sessions' rows (`FOR NO KEY UPDATE`, in id order) and
//! moves `last_event_id` on; that row lock also orders writers on other nodes. Rows are
//! always locked executions first, then sessions, each in id order, so two nodes' batches
//! cannot deadlock each other; if PostgreSQL still reports one, the batch is retried.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use deadpool_postgres::Pool;
use stepwise_core::codec;
use stepwise_core::{
    Event, Execution, ExecutionStatus, Id, Message, Snapshot, Step, StepBody, Timestamp,
};
use stepwise_store::rules::check_transition;
use stepwise_store::{
    Ack, AckSender, NewEvent, NewStep, Result, StepAppend, StoreError, Transition,
};
use tokio::sync::{Notify, mpsc};

use crate::relay::Relay;
use crate::sql::{self, args, json_text, map_pg, map_pool};

pub(crate) struct StepJob {
    pub tenant: String,
    pub new: NewStep,
    pub payload: Vec<u8>,
    pub id: Id,
    pub now: Timestamp,
}

pub(crate) struct SnapshotJob {
    pub tenant: String,
    pub snapshot: Snapshot,
    pub state: Vec<u8>,
    /// The execution keeps this snapshot alone (see `NewSnapshot::replace`).
    pub replace: bool,
}

pub(crate) struct EventJob {
    pub tenant: String,
    pub new: NewEvent,
    pub metadata: String,
    pub now: Timestamp,
}

/// A message of a session, stamped before it is queued; the session's count moves with it.
pub(crate) struct MessageJob {
    pub tenant: String,
    pub message: Message,
}

/// A run's end ([`Store::queue_ending`](stepwise_store::Store::queue_ending)): its answer
/// with the answer's `message.created`, its snapshot, the move of execution `id` and the
/// execution's event, all committed in the batch that checks the move, or none of them.
pub(crate) struct EndingJob {
    pub tenant: String,
    pub id: Id,
    pub transition: Transition,
    pub answer: Option<(MessageJob, EventJob)>,
    pub snapshot: Option<SnapshotJob>,
    pub event: Option<EventJob>,
    pub now: Timestamp,
}

pub(crate) enum Job {
    Step(StepJob, AckSender<StepAppend>),
    Snapshot(SnapshotJob, AckSender<Snapshot>),
    Event(EventJob, AckSender<Event>),
    Message(MessageJob, AckSender<Message>),
    Ending(Box<EndingJob>, AckSender<Execution>),
    /// Answered once everything queued before it is committed.
    Flush(AckSender<()>),
}

/// Several writer tasks, each with its own queue, commit concurrently (PostgreSQL merges
/// their WAL flushes). A job goes to the writer of its session (see `PgStore::shard_key`),
/// so one session's saves stay in queue order: its events get ids in the order they were
/// appended, and a step lands before the event that announces it.
pub(crate) struct Writer {
    txs: Vec<mpsc::Sender<Job>>,
    capacity: usize,
    pub(crate) save_errors: Arc<AtomicU64>,
}

const MAX_ATTEMPTS: u32 = 5;

impl Writer {
    pub(crate) fn start(
        pool: Pool,
        relay: Arc<Relay>,
        queue_bell: Arc<Notify>,
        capacity: usize,
        max_batch: usize,
        writers: usize,
    ) -> Writer {
        let writers = writers.max(1);
        let capacity = (capacity / writers).max(1);
        let save_errors = Arc::new(AtomicU64::new(0));
        let mut txs = Vec::with_capacity(writers);
        for _ in 0..writers {
            let (tx, rx) = mpsc::channel::<Job>(capacity);
            tokio::spawn(run(
                pool.clone(),
                rx,
                relay.clone(),
                queue_bell.clone(),
                max_batch.max(1),
                save_errors.clone(),
            ));
            txs.push(tx);
        }
        Writer {
            txs,
            capacity,
            save_errors,
        }
    }

    async fn send(&self, key: Id, job: Job) -> Result<()> {
        // UUIDv7 ends in random bits: spread by those.
        let shard = (key.as_u128() % self.txs.len() as u128) as usize;
        self.txs[shard]
            .send(job)
            .await
            .map_err(|_| StoreError::Unavailable("the store is closed".into()))
    }

    pub(crate) async fn step(&self, key: Id, job: StepJob) -> Result<Ack<StepAppend>> {
        let (tx, ack) = Ack::channel();
        self.send(key, Job::Step(job, tx)).await?;
        Ok(ack)
    }

    pub(crate) async fn snapshot(&self, key: Id, job: SnapshotJob) -> Result<Ack<Snapshot>> {
        let (tx, ack) = Ack::channel();
        self.send(key, Job::Snapshot(job, tx)).await?;
        Ok(ack)
    }

    pub(crate) async fn event(&self, job: EventJob) -> Result<Ack<Event>> {
        let (tx, ack) = Ack::channel();
        self.send(job.new.session_id, Job::Event(job, tx)).await?;
        Ok(ack)
    }

    /// Queues a message on its session's writer: it commits with the session's events and
    /// the other writes of the batch, under one lock of the session's row.
    pub(crate) async fn message(&self, job: MessageJob) -> Result<Ack<Message>> {
        let (tx, ack) = Ack::channel();
        self.send(job.message.session_id, Job::Message(job, tx))
            .await?;
        Ok(ack)
    }

    /// Queues a run's end on the writer of `key` (its session's, where the run's events
    /// went): it commits after every write queued there before it.
    pub(crate) async fn ending(&self, key: Id, job: EndingJob) -> Result<Ack<Execution>> {
        let (tx, ack) = Ack::channel();
        self.send(key, Job::Ending(Box::new(job), tx)).await?;
        Ok(ack)
    }

    /// Waits until everything queued on every writer before this call is committed.
    pub(crate) async fn flush(&self) -> Result<()> {
        let mut acks = Vec::with_capacity(self.txs.len());
        for tx in &self.txs {
            let (ack_tx, ack) = Ack::channel();
            tx.send(Job::Flush(ack_tx))
                .await
                .map_err(|_| StoreError::Unavailable("the store is closed".into()))?;
            acks.push(ack);
        }
        for ack in acks {
            ack.await?;
        }
        Ok(())
    }

    pub(crate) fn depth(&self) -> u64 {
        self.txs
            .iter()
            .map(|tx| (self.capacity - tx.capacity()) as u64)
            .sum()
    }
}

async fn run(
    pool: Pool,
    mut rx: mpsc::Receiver<Job>,
    relay: Arc<Relay>,
    queue_bell: Arc<Notify>,
    max_batch: usize,
    save_errors: Arc<AtomicU64>,
) {
    let mut jobs: Vec<Job> = Vec::with_capacity(max_batch);
    while rx.recv_many(&mut jobs, max_batch).await > 0 {
        let mut steps = Vec::new();
        let mut snapshots = Vec::new();
        let mut events = Vec::new();
        let mut messages = Vec::new();
        let mut endings = Vec::new();
        let mut flushes = Vec::new();
        // A job's place in the queue orders what an ending adds among the batch's writes.
        for (seq, job) in jobs.drain(..).enumerate() {
            match job {
                Job::Step(job, ack) => steps.push((job, ack)),
                Job::Snapshot(job, ack) => snapshots.push((seq, job, ack)),
                Job::Event(job, ack) => events.push((seq, job, ack)),
                Job::Message(job, ack) => messages.push((seq, job, ack)),
                Job::Ending(job, ack) => endings.push((seq, job, ack)),
                Job::Flush(ack) => flushes.push(ack),
            }
        }
        let writes = steps.len() + snapshots.len() + events.len() + messages.len() + endings.len();
        let committed = if writes == 0 {
            Ok(Done::default())
        } else {
            let inputs = Inputs {
                steps: steps.iter().map(|(j, _)| j).collect(),
                snapshots: snapshots.iter().map(|(seq, j, _)| (*seq, j)).collect(),
                events: events.iter().map(|(seq, j, _)| (*seq, j)).collect(),
                messages: messages.iter().map(|(seq, j, _)| (*seq, j)).collect(),
                endings: endings.iter().map(|(seq, j, _)| (*seq, &**j)).collect(),
                wait_for_locks: false,
            };
            commit_with_retries(&pool, &inputs).await
        };
        match committed {
            Ok(mut done) => {
                publish(
                    &relay,
                    &queue_bell,
                    std::mem::take(&mut done.published),
                    done.ring,
                );
                for ((_, ack), result) in steps.into_iter().zip(done.steps) {
                    let _ = ack.send(result);
                }
                for ((_, _, ack), result) in snapshots.into_iter().zip(done.snapshots) {
                    let _ = ack.send(result);
                }
                for ((_, _, ack), result) in events.into_iter().zip(done.events) {
                    let _ = ack.send(result);
                }
                for ((_, job, ack), result) in messages.into_iter().zip(done.messages) {
                    let _ = ack.send(result.map(|()| job.message));
                }
                let mut put_off = Vec::new();
                for (ending, result) in endings.into_iter().zip(done.endings) {
                    match result {
                        Some(result) => {
                            let _ = ending.2.send(result);
                        }
                        None => put_off.push(ending),
                    }
                }
                if !put_off.is_empty() {
                    commit_put_off(&pool, &relay, &queue_bell, &save_errors, put_off).await;
                }
                // After the endings put off: they were queued before these flushes.
                for ack in flushes {
                    let _ = ack.send(Ok(()));
                }
            }
            Err(e) => {
                tracing::error!(error = %e, writes, "a write batch failed to commit");
                save_errors.fetch_add(writes as u64, Ordering::Relaxed);
                for (_, ack) in steps {
                    let _ = ack.send(Err(e.clone()));
                }
                for (_, _, ack) in snapshots {
                    let _ = ack.send(Err(e.clone()));
                }
                for (_, _, ack) in events {
                    let _ = ack.send(Err(e.clone()));
                }
                for (_, _, ack) in messages {
                    let _ = ack.send(Err(e.clone()));
                }
                for (_, _, ack) in endings {
                    let _ = ack.send(Err(e.clone()));
                }
                for ack in flushes {
                    let _ = ack.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Hands committed events to this node's subscribers (first: whoever awaited an event's
/// ack can count on them having it), then announces them to other nodes; rings the queue
/// when a move may have made a session's next execution runnable.
fn publish(relay: &Relay, queue_bell: &Notify, published: Vec<(String, Event)>, ring: bool) {
    let announced: Vec<(Id, i64)> = published
        .iter()
        .map(|(_, e)| (e.session_id, e.id))
        .collect();
    relay.committed_locally(
        published
            .into_iter()
            .map(|(tenant, event)| (tenant, Arc::new(event)))
            .collect(),
    );
    relay.announce(announced);
    if ring {
        queue_bell.notify_one();
    }
}

/// The endings a batch put off (another transaction held the queue head's lock a move
/// needs), written after the batch's commit, in a transaction of their own that waits for
/// those locks. The writer's next batch waits for it: the sessions' later writes stay after
/// their ends.
async fn commit_put_off(
    pool: &Pool,
    relay: &Relay,
    queue_bell: &Notify,
    save_errors: &AtomicU64,
    put_off: Vec<(usize, Box<EndingJob>, AckSender<Execution>)>,
) {
    let inputs = Inputs {
        endings: put_off.iter().map(|(seq, job, _)| (*seq, &**job)).collect(),
        wait_for_locks: true,
        ..Inputs::default()
    };
    match commit_with_retries(pool, &inputs).await {
        Ok(done) => {
            publish(relay, queue_bell, done.published, done.ring);
            for ((_, _, ack), result) in put_off.into_iter().zip(done.endings) {
                let _ = ack.send(result.unwrap_or_else(|| {
                    Err(StoreError::Backend("the run's end was not written".into()))
                }));
            }
        }
        Err(e) => {
            tracing::error!(error = %e, endings = put_off.len(), "could not write the runs' ends put off");
            save_errors.fetch_add(put_off.len() as u64, Ordering::Relaxed);
            for (_, _, ack) in put_off {
                let _ = ack.send(Err(e.clone()));
            }
        }
    }
}

/// One batch: each write with its place in the queue (see [`merged`]).
#[derive(Default)]
struct Inputs<'a> {
    steps: Vec<&'a StepJob>,
    snapshots: Vec<(usize, &'a SnapshotJob)>,
    events: Vec<(usize, &'a EventJob)>,
    messages: Vec<(usize, &'a MessageJob)>,
    endings: Vec<(usize, &'a EndingJob)>,
    /// Wait for the queue heads' locks the moves take, rather than try them (the endings
    /// a batch put off).
    wait_for_locks: bool,
}

#[derive(Default)]
struct Done {
    steps: Vec<Result<StepAppend>>,
    snapshots: Vec<Result<Snapshot>>,
    events: Vec<Result<Event>>,
    messages: Vec<Result<()>>,
    /// Each ending's moved execution or refusal; `None`: put off (see [`commit_put_off`]).
    endings: Vec<Option<Result<Execution>>>,
    /// Every event committed (the endings' too), with its tenant.
    published: Vec<(String, Event)>,
    /// Whether a move may have made a session's next execution runnable.
    ring: bool,
}

/// A batch failure: whether trying again may succeed, and the error for the callers.
struct Failed {
    retry: bool,
    error: StoreError,
}

impl From<tokio_postgres::Error> for Failed {
    fn from(e: tokio_postgres::Error) -> Self {
        Failed {
            retry: sql::is_retryable(&e),
            error: map_pg(e),
        }
    }
}

impl From<StoreError> for Failed {
    fn from(error: StoreError) -> Self {
        Failed {
            retry: false,
            error,
        }
    }
}

async fn commit_with_retries(pool: &Pool, inputs: &Inputs<'_>) -> Result<Done> {
    let mut attempt = 1;
    loop {
        match commit_batch(pool, inputs).await {
            Ok(done) => return Ok(done),
            Err(f) if f.retry && attempt < MAX_ATTEMPTS => {
                tracing::warn!(error = %f.error, attempt, "retrying a write batch");
                attempt += 1;
            }
            Err(f) => return Err(f.error),
        }
    }
}

struct ExecRow {
    tenant: String,
    session_id: Option<Id>,
    status: String,
}

struct SessionRow {
    tenant: String,
    last_event_id: i64,
}

/// Where a write of the merged lists came from: the batch's own jobs (in their order), or
/// ending `k`.
#[derive(Clone, Copy)]
enum Origin {
    Queued,
    Ending(usize),
}

/// The batch's writes of one kind and the accepted endings' writes of that kind, in queue
/// order (an ending's after everything queued before it).
fn merged<'a, T>(
    queued: &[(usize, &'a T)],
    endings: impl Iterator<Item = (usize, usize, &'a T)>,
) -> (Vec<&'a T>, Vec<Origin>) {
    let mut all: Vec<(usize, Origin, &'a T)> = queued
        .iter()
        .map(|(seq, job)| (*seq, Origin::Queued, *job))
        .chain(endings.map(|(seq, k, job)| (seq, Origin::Ending(k), job)))
        .collect();
    // Stable: one ending's answer event stays before its execution's event.
    all.sort_by_key(|(seq, _, _)| *seq);
    all.into_iter()
        .map(|(_, origin, job)| (job, origin))
        .unzip()
}

/// The results of the batch's own jobs; an ending's refused write is logged and left out
/// (the move and the rest of the end are written).
fn results_of_queued<T>(
    results: Vec<Result<T>>,
    origins: &[Origin],
    endings: &[(usize, &EndingJob)],
    what: &str,
) -> Vec<Result<T>> {
    let mut own = Vec::with_capacity(results.len());
    for (result, origin) in results.into_iter().zip(origins) {
        match origin {
            Origin::Queued => own.push(result),
            Origin::Ending(k) => {
                if let Err(e) = result {
                    let execution = endings[*k].1.id;
                    tracing::warn!(%execution, error = %e, "a run's end left out {what}");
                }
            }
        }
    }
    own
}

/// The advisory locks of `ids`' queue heads this transaction could take without waiting.
async fn try_head_locks(
    tx: &tokio_postgres::Transaction<'_>,
    ids: Vec<Id>,
) -> std::result::Result<HashSet<Id>, Failed> {
    let rows = tx
        .query_typed(
            "SELECT k, pg_try_advisory_xact_lock(queue_head_lock(k)) AS locked FROM unnest($1::uuid[]) AS u(k)",
            args![ids],
        )
        .await?;
    let mut held = HashSet::new();
    for row in &rows {
        if sql::get::<bool>(row, "locked")? {
            held.insert(sql::get::<Id>(row, "k")?);
        }
    }
    Ok(held)
}

async fn commit_batch(pool: &Pool, inputs: &Inputs<'_>) -> std::result::Result<Done, Failed> {
    let mut client = pool.get().await.map_err(map_pool)?;
    let pg: &mut tokio_postgres::Client = &mut client;
    let tx = pg.transaction().await?;
    let endings = &inputs.endings;

    // Lock the executions the steps, snapshots and moves touch, then the sessions the
    // events, messages and snapshots touch, each in id order. The two statements are
    // pipelined (sent together, run in order).
    let mut exec_ids: Vec<Id> = inputs
        .steps
        .iter()
        .map(|s| s.new.execution_id)
        .chain(
            inputs
                .snapshots
                .iter()
                .map(|(_, s)| s.snapshot.execution_id),
        )
        .chain(endings.iter().map(|(_, e)| e.id))
        .collect();
    exec_ids.sort_unstable();
    exec_ids.dedup();
    // The sessions whose rows the events (their ids) and the messages (their counts) move.
    let mut written_sessions: Vec<Id> = inputs
        .events
        .iter()
        .map(|(_, e)| e.new.session_id)
        .chain(inputs.messages.iter().map(|(_, m)| m.message.session_id))
        .chain(endings.iter().flat_map(|(_, e)| {
            let answer = e.answer.as_ref().map(|(m, _)| m.message.session_id);
            answer
                .into_iter()
                .chain(e.event.as_ref().map(|e| e.new.session_id))
        }))
        .collect();
    written_sessions.sort_unstable();
    written_sessions.dedup();
    let snapshot_execs: Vec<Id> = inputs
        .snapshots
        .iter()
        .map(|(_, s)| s.snapshot.execution_id)
        .chain(
            endings
                .iter()
                .filter_map(|(_, e)| e.snapshot.as_ref().map(|s| s.snapshot.execution_id)),
        )
        .collect();
    let lock_execs = async {
        if exec_ids.is_empty() {
            return Ok(Vec::new());
        }
        tx.query_typed(
            "SELECT id, tenant_id, session_id, status FROM executions WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE",
            args![exec_ids],
        )
        .await
    };
    let lock_sessions = async {
        if written_sessions.is_empty() && snapshot_execs.is_empty() {
            return Ok(Vec::new());
        }
        if snapshot_execs.is_empty() {
            // Events and messages only (most batches): the sessions by key.
            return tx
                .query_typed(
                    "SELECT id, tenant_id, last_event_id FROM sessions WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE",
                    args![written_sessions],
                )
                .await;
        }
        tx.query_typed(
            // The snapshots' sessions looked up by their executions' keys, in one array with
            // the events' sessions. (An `OR id IN (subquery)` was planned as a scan of every
            // execution, and an empty array of executions as a scan of every pending one:
            // 100 ms a batch with 100,000 queued.)
            "SELECT id, tenant_id, last_event_id FROM sessions \
             WHERE id = ANY($1::uuid[] || array_remove(ARRAY(SELECT session_id FROM executions WHERE id = ANY($2)), NULL)) \
             ORDER BY id FOR NO KEY UPDATE",
            args![written_sessions, snapshot_execs],
        )
        .await
    };
    let (exec_rows, session_rows) = tokio::try_join!(lock_execs, lock_sessions)?;
    let mut execs: HashMap<Id, ExecRow> = HashMap::new();
    for row in &exec_rows {
        execs.insert(
            sql::get(row, "id")?,
            ExecRow {
                tenant: sql::get(row, "tenant_id")?,
                session_id: sql::get(row, "session_id")?,
                status: sql::get(row, "status")?,
            },
        );
    }
    let exec_of = |id: Id, tenant: &str| execs.get(&id).filter(|e| e.tenant == tenant);
    let mut sessions: HashMap<Id, SessionRow> = HashMap::new();
    for row in &session_rows {
        sessions.insert(
            sql::get(row, "id")?,
            SessionRow {
                tenant: sql::get(row, "tenant_id")?,
                last_event_id: sql::get(row, "last_event_id")?,
            },
        );
    }

    // Each ending's move is checked against the locked status: a refused one writes
    // nothing. One whose queue head another transaction holds is put off (never waited
    // for with rows held: an intake holds its session's row while it waits for that lock).
    let mut ending_results: Vec<Option<Result<Execution>>> = endings.iter().map(|_| None).collect();
    let mut moving: Vec<usize> = Vec::new();
    for (k, (_, job)) in endings.iter().enumerate() {
        let checked = match exec_of(job.id, &job.tenant) {
            None => Err(StoreError::NotFound("execution")),
            Some(row) => match ExecutionStatus::parse(&row.status) {
                Some(status) => check_transition(status, &job.transition),
                None => Err(StoreError::Backend(format!(
                    "unknown execution status {:?}",
                    row.status
                ))),
            },
        };
        match checked {
            Ok(()) => moving.push(k),
            Err(e) => ending_results[k] = Some(Err(e)),
        }
    }
    // The heads a move's trigger refreshes: its session's and its own (a subagent's).
    let heads_of = |k: usize| {
        let job = endings[k].1;
        let session = execs.get(&job.id).and_then(|e| e.session_id);
        session.into_iter().chain(std::iter::once(job.id))
    };
    if !inputs.wait_for_locks && !moving.is_empty() {
        let held = try_head_locks(&tx, moving.iter().flat_map(|&k| heads_of(k)).collect()).await?;
        moving.retain(|&k| heads_of(k).all(|head| held.contains(&head)));
    }
    let accepted = |k: &usize| moving.contains(k);

    // The accepted endings' answers, snapshots and events join the batch's own, in queue
    // order.
    let (snapshot_jobs, snapshot_origins) = merged(
        &inputs.snapshots,
        endings
            .iter()
            .enumerate()
            .filter(|(k, _)| accepted(k))
            .filter_map(|(k, (seq, e))| e.snapshot.as_ref().map(|s| (*seq, k, s))),
    );
    let (message_jobs, message_origins) = merged(
        &inputs.messages,
        endings
            .iter()
            .enumerate()
            .filter(|(k, _)| accepted(k))
            .filter_map(|(k, (seq, e))| e.answer.as_ref().map(|(m, _)| (*seq, k, m))),
    );
    let (event_jobs, event_origins) = merged(
        &inputs.events,
        endings
            .iter()
            .enumerate()
            .filter(|(k, _)| accepted(k))
            .flat_map(|(k, (seq, e))| {
                let answered = e.answer.as_ref().map(|(_, event)| (*seq, k, event));
                answered
                    .into_iter()
                    .chain(e.event.as_ref().map(|event| (*seq, k, event)))
            }),
    );

    // The kinds touch different rows: their statements are pipelined too (the messages'
    // and the events' updates of a session's row run in the order they were sent).
    let messages = messages_of_sessions(&message_jobs, &sessions);
    let (steps, snapshots, events, ()) = tokio::try_join!(
        write_steps(&tx, &inputs.steps, &exec_of),
        write_snapshots(&tx, &snapshot_jobs, &exec_of),
        write_events(&tx, &event_jobs, &mut sessions),
        write_messages(&tx, &message_jobs, &messages),
    )?;
    // The moves last: the execution's row is read back with the batch's writes in it.
    let moved = futures_util::future::try_join_all(moving.iter().map(|&k| {
        let job = endings[k].1;
        crate::executions::move_row(&tx, &job.tenant, job.id, &job.transition, job.now)
    }))
    .await?;
    tx.commit().await?;

    let mut ring = false;
    for (&k, row) in moving.iter().zip(&moved) {
        let execution = sql::execution(row)?;
        ring |= crate::executions::move_rings(&execution, endings[k].1.transition.target());
        ending_results[k] = Some(Ok(execution));
    }
    let published = event_jobs
        .iter()
        .zip(&events)
        .filter_map(|(job, result)| {
            result
                .as_ref()
                .ok()
                .map(|event| (job.tenant.clone(), event.clone()))
        })
        .collect();
    Ok(Done {
        steps,
        snapshots: results_of_queued(snapshots, &snapshot_origins, endings, "its snapshot"),
        events: results_of_queued(events, &event_origins, endings, "an event"),
        messages: results_of_queued(messages, &message_origins, endings, "its answer"),
        endings: ending_results,
        published,
        ring,
    })
}

/// What is stored under one `(execution, step_number)` once the batch's inserts ran.
#[derive(Clone)]
enum Stored {
    /// Inserted by job `index` of this batch.
    Inserted(usize),
    Existing(Box<(Step, Vec<u8>)>),
    Refused(StoreError),
}

async fn write_steps<'a>(
    tx: &tokio_postgres::Transaction<'_>,
    jobs: &[&StepJob],
    exec_of: &impl Fn(Id, &str) -> Option<&'a ExecRow>,
) -> std::result::Result<Vec<Result<StepAppend>>, Failed> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    // The first job of each key tries to insert; later ones compare with what is stored.
    let mut first_of: HashMap<(Id, u32), usize> = HashMap::new();
    let mut missing: HashSet<usize> = HashSet::new();
    let mut candidates: Vec<usize> = Vec::new();
    let mut finished_keys: Vec<(Id, u32)> = Vec::new();
    for (i, job) in jobs.iter().enumerate() {
        let key = (job.new.execution_id, job.new.step_number);
        let Some(exec) = exec_of(job.new.execution_id, &job.tenant) else {
            missing.insert(i);
            continue;
        };
        if first_of.contains_key(&key) {
            continue;
        }
        first_of.insert(key, i);
        let finished =
            ExecutionStatus::parse(&exec.status).is_some_and(ExecutionStatus::is_finished);
        if finished {
            finished_keys.push(key);
        } else {
            candidates.push(i);
        }
    }

    let mut inserted: HashSet<(Id, u32)> = HashSet::new();
    if !candidates.is_empty() {
        let mut e_ids = Vec::with_capacity(candidates.len());
        let mut numbers = Vec::with_capacity(candidates.len());
        let mut ids = Vec::with_capacity(candidates.len());
        let mut tenants = Vec::with_capacity(candidates.len());
        let mut sessions: Vec<Option<Id>> = Vec::with_capacity(candidates.len());
        let mut kinds = Vec::with_capacity(candidates.len());
        let mut times = Vec::with_capacity(candidates.len());
        let mut payloads = Vec::with_capacity(candidates.len());
        for &i in &candidates {
            let job = jobs[i];
            e_ids.push(job.new.execution_id);
            numbers.push(job.new.step_number as i32);
            ids.push(job.id);
            tenants.push(job.tenant.clone());
            sessions.push(exec_of(job.new.execution_id, &job.tenant).and_then(|e| e.session_id));
            kinds.push(job.new.kind.as_str().to_string());
            times.push(job.now.0);
            payloads.push(job.payload.clone());
        }
        let rows = tx
            .query_typed(
                "INSERT INTO steps (execution_id, step_number, id, tenant_id, session_id, kind, created_at, payload) \
                 SELECT * FROM unnest($1::uuid[], $2::int4[], $3::uuid[], $4::text[], $5::uuid[], $6::text[], $7::int8[], $8::bytea[]) \
                 ON CONFLICT (execution_id, step_number) DO NOTHING RETURNING execution_id, step_number",
                args![e_ids, numbers, ids, tenants, sessions, kinds, times, payloads],
            )
            .await?;
        for row in &rows {
            let n: i32 = sql::get(row, "step_number")?;
            inserted.insert((sql::get(row, "execution_id")?, n.max(0) as u32));
        }
        // A step in an abandoned session makes it active again.
        let mut touched: Vec<Id> = sessions.iter().flatten().copied().collect();
        touched.sort_unstable();
        touched.dedup();
        if !rows.is_empty() && !touched.is_empty() {
            let now = times.iter().copied().max().unwrap_or_default();
            tx.execute_typed(
                "UPDATE sessions SET status = 'active', updated_at = $2 WHERE id = ANY($1) AND status = 'abandoned'",
                args![touched, now],
            )
            .await?;
        }
    }

    // Keys that were already stored before this batch (or whose execution is over).
    let mut lookup: Vec<(Id, u32)> = finished_keys.clone();
    for &i in &candidates {
        let key = (jobs[i].new.execution_id, jobs[i].new.step_number);
        if !inserted.contains(&key) {
            lookup.push(key);
        }
    }
    let mut existing: HashMap<(Id, u32), (Step, Vec<u8>)> = HashMap::new();
    if !lookup.is_empty() {
        let e_ids: Vec<Id> = lookup.iter().map(|k| k.0).collect();
        let numbers: Vec<i32> = lookup.iter().map(|k| k.1 as i32).collect();
        let rows = tx
            .query_typed(
                &format!(
                    "SELECT {} FROM steps s JOIN unnest($1::uuid[], $2::int4[]) AS k(e, n) ON s.execution_id = k.e AND s.step_number = k.n",
                    sql::STEP_COLS
                ),
                args![e_ids, numbers],
            )
            .await?;
        for row in &rows {
            let r = sql::step_row(row)?;
            let body: StepBody = codec::decode_step(&r.payload).unwrap_or_default();
            let step = Step::from_body(
                r.id,
                r.execution_id,
                r.session_id,
                r.step_number,
                r.kind,
                body,
                r.created_at,
            );
            existing.insert((r.execution_id, r.step_number), (step, r.payload));
        }
    }

    let mut stored: HashMap<(Id, u32), Stored> = HashMap::new();
    for (&key, &i) in &first_of {
        let value = if inserted.contains(&key) {
            Stored::Inserted(i)
        } else if let Some((step, payload)) = existing.get(&key) {
            Stored::Existing(Box::new((step.clone(), payload.clone())))
        } else {
            let status = exec_of(key.0, &jobs[i].tenant)
                .map(|e| e.status.clone())
                .unwrap_or_default();
            Stored::Refused(StoreError::InvalidState(format!(
                "the execution is {status}; no more steps can be added"
            )))
        };
        stored.insert(key, value);
    }

    // Advance each execution's step count and token usage by the steps inserted.
    let mut totals: HashMap<Id, (i64, i64, i64, i64)> = HashMap::new();
    for (key, value) in &stored {
        if let Stored::Inserted(i) = value {
            let t = &jobs[*i].new.body.token_usage;
            let entry = totals.entry(key.0).or_default();
            entry.0 = entry.0.max(i64::from(key.1));
            entry.1 += t.input as i64;
            entry.2 += t.output as i64;
            entry.3 += t.total as i64;
        }
    }
    if !totals.is_empty() {
        let mut ids: Vec<Id> = totals.keys().copied().collect();
        ids.sort_unstable();
        let pick = |f: fn(&(i64, i64, i64, i64)) -> i64| -> Vec<i64> {
            ids.iter()
                .map(|id| totals.get(id).map(f).unwrap_or(0))
                .collect()
        };
        let (counts, input, output, total) =
            (pick(|t| t.0), pick(|t| t.1), pick(|t| t.2), pick(|t| t.3));
        let now = jobs.iter().map(|j| j.now.0).max().unwrap_or(0);
        tx.execute_typed(
            "UPDATE executions e SET step_count = GREATEST(e.step_count, u.n), tokens_input = e.tokens_input + u.ti, \
             tokens_output = e.tokens_output + u.tout, tokens_total = e.tokens_total + u.tt, updated_at = $6 \
             FROM unnest($1::uuid[], $2::int8[], $3::int8[], $4::int8[], $5::int8[]) AS u(id, n, ti, tout, tt) WHERE e.id = u.id",
            args![ids, counts, input, output, total, now],
        )
        .await?;
    }

    let mut results = Vec::with_capacity(jobs.len());
    for (i, job) in jobs.iter().enumerate() {
        if missing.contains(&i) {
            results.push(Err(StoreError::NotFound("execution")));
            continue;
        }
        let key = (job.new.execution_id, job.new.step_number);
        let result = match stored.get(&key) {
            Some(Stored::Inserted(first)) if *first == i => {
                let session_id =
                    exec_of(job.new.execution_id, &job.tenant).and_then(|e| e.session_id);
                Ok(StepAppend {
                    step: Step::from_body(
                        job.id,
                        job.new.execution_id,
                        session_id,
                        job.new.step_number,
                        job.new.kind,
                        job.new.body.clone(),
                        job.now,
                    ),
                    created: true,
                })
            }
            Some(Stored::Inserted(first)) => {
                let winner = jobs[*first];
                let session_id =
                    exec_of(winner.new.execution_id, &winner.tenant).and_then(|e| e.session_id);
                let step = Step::from_body(
                    winner.id,
                    winner.new.execution_id,
                    session_id,
                    winner.new.step_number,
                    winner.new.kind,
                    winner.new.body.clone(),
                    winner.now,
                );
                same_or_conflict(job, step, &winner.payload)
            }
            Some(Stored::Existing(existing)) => {
                same_or_conflict(job, existing.0.clone(), &existing.1)
            }
            Some(Stored::Refused(e)) => Err(e.clone()),
            None => Err(StoreError::NotFound("execution")),
        };
        results.push(result);
    }
    Ok(results)
}

/// The same step again is a no-op answered with the stored step; another body conflicts.
fn same_or_conflict(job: &StepJob, stored: Step, stored_payload: &[u8]) -> Result<StepAppend> {
    let same = stored.kind == job.new.kind
        && (stored_payload == job.payload.as_slice()
            || codec::decode_step(stored_payload).is_ok_and(|b| b == job.new.body));
    if !same {
        return Err(StoreError::Conflict(format!(
            "step {} of this execution already exists with another body",
            job.new.step_number
        )));
    }
    Ok(StepAppend {
        step: stored,
        created: false,
    })
}

async fn write_snapshots<'a>(
    tx: &tokio_postgres::Transaction<'_>,
    jobs: &[&SnapshotJob],
    exec_of: &impl Fn(Id, &str) -> Option<&'a ExecRow>,
) -> std::result::Result<Vec<Result<Snapshot>>, Failed> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let parents: Vec<Id> = jobs
        .iter()
        .filter_map(|j| j.snapshot.parent_snapshot_id)
        .collect();
    let mut known_parents: HashSet<(Id, String)> = HashSet::new();
    if !parents.is_empty() {
        let rows = tx
            .query_typed(
                "SELECT id, tenant_id FROM snapshots WHERE id = ANY($1)",
                args![parents],
            )
            .await?;
        for row in &rows {
            known_parents.insert((sql::get(row, "id")?, sql::get(row, "tenant_id")?));
        }
    }
    let mut results = Vec::with_capacity(jobs.len());
    let mut accepted: Vec<usize> = Vec::new();
    for (i, job) in jobs.iter().enumerate() {
        let s = &job.snapshot;
        if exec_of(s.execution_id, &job.tenant).is_none() {
            results.push(Err(StoreError::NotFound("execution")));
            continue;
        }
        if let Some(parent) = s.parent_snapshot_id
            && !known_parents.contains(&(parent, job.tenant.clone()))
        {
            results.push(Err(StoreError::invalid(
                "parent_snapshot_id",
                "no such snapshot",
            )));
            continue;
        }
        // A later snapshot of this batch may name this one as its parent.
        known_parents.insert((s.id, job.tenant.clone()));
        accepted.push(i);
        results.push(Ok(s.clone()));
    }
    if accepted.is_empty() {
        return Ok(results);
    }
    let pick = |i: &usize| jobs[*i];
    let ids: Vec<Id> = accepted.iter().map(|i| pick(i).snapshot.id).collect();
    let tenants: Vec<String> = accepted.iter().map(|i| pick(i).tenant.clone()).collect();
    let execs: Vec<Id> = accepted
        .iter()
        .map(|i| pick(i).snapshot.execution_id)
        .collect();
    let sessions: Vec<Option<Id>> = accepted
        .iter()
        .map(|i| exec_of(pick(i).snapshot.execution_id, &pick(i).tenant).and_then(|e| e.session_id))
        .collect();
    let parents: Vec<Option<Id>> = accepted
        .iter()
        .map(|i| pick(i).snapshot.parent_snapshot_id)
        .collect();
    let agent_ids: Vec<Option<String>> = accepted
        .iter()
        .map(|i| pick(i).snapshot.agent_id.clone())
        .collect();
    let agent_names: Vec<Option<String>> = accepted
        .iter()
        .map(|i| pick(i).snapshot.agent_name.clone())
        .collect();
    let numbers: Vec<i32> = accepted
        .iter()
        .map(|i| pick(i).snapshot.step_number as i32)
        .collect();
    let finals: Vec<bool> = accepted.iter().map(|i| pick(i).snapshot.is_final).collect();
    let debugs: Vec<bool> = accepted
        .iter()
        .map(|i| pick(i).snapshot.debug_mode)
        .collect();
    let states: Vec<Vec<u8>> = accepted.iter().map(|i| pick(i).state.clone()).collect();
    let times: Vec<i64> = accepted
        .iter()
        .map(|i| pick(i).snapshot.created_at.0)
        .collect();
    tx.execute_typed(
        "INSERT INTO snapshots (id, tenant_id, execution_id, session_id, parent_snapshot_id, agent_id, agent_name, step_number, is_final, debug_mode, state, created_at) \
         SELECT * FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::uuid[], $5::uuid[], $6::text[], $7::text[], $8::int4[], $9::bool[], $10::bool[], $11::bytea[], $12::int8[])",
        args![ids, tenants, execs, sessions, parents, agent_ids, agent_names, numbers, finals, debugs, states, times],
    )
    .await?;
    // The last snapshot of each execution (and session) in queue order becomes its last.
    let mut last_of_exec: HashMap<Id, (Id, i64)> = HashMap::new();
    let mut last_of_session: HashMap<Id, Id> = HashMap::new();
    // Executions whose last snapshot of the batch replaces the earlier ones: (execution, kept).
    let mut replaced: HashMap<Id, Option<Id>> = HashMap::new();
    for (k, &i) in accepted.iter().enumerate() {
        last_of_exec.insert(execs[k], (ids[k], times[k]));
        replaced.insert(execs[k], jobs[i].replace.then_some(ids[k]));
        if let Some(session) = sessions[k] {
            last_of_session.insert(session, jobs[i].snapshot.id);
        }
    }
    let mut e_ids: Vec<Id> = last_of_exec.keys().copied().collect();
    e_ids.sort_unstable();
    let e_snaps: Vec<Id> = e_ids
        .iter()
        .filter_map(|e| last_of_exec.get(e).map(|v| v.0))
        .collect();
    let e_times: Vec<i64> = e_ids
        .iter()
        .filter_map(|e| last_of_exec.get(e).map(|v| v.1))
        .collect();
    tx.execute_typed(
        "UPDATE executions e SET last_snapshot_id = u.s, updated_at = u.t FROM unnest($1::uuid[], $2::uuid[], $3::int8[]) AS u(id, s, t) WHERE e.id = u.id",
        args![e_ids, e_snaps, e_times],
    )
    .await?;
    let (r_execs, r_kept): (Vec<Id>, Vec<Id>) = replaced
        .into_iter()
        .filter_map(|(execution, kept)| Some((execution, kept?)))
        .unzip();
    if !r_execs.is_empty() {
        tx.execute_typed(
            "DELETE FROM snapshots s USING unnest($1::uuid[], $2::uuid[]) AS r(e, kept) WHERE s.execution_id = r.e AND s.id <> r.kept",
            args![r_execs, r_kept],
        )
        .await?;
    }
    if !last_of_session.is_empty() {
        let mut s_ids: Vec<Id> = last_of_session.keys().copied().collect();
        s_ids.sort_unstable();
        let s_snaps: Vec<Id> = s_ids
            .iter()
            .filter_map(|s| last_of_session.get(s).copied())
            .collect();
        tx.execute_typed(
            "UPDATE sessions s SET last_snapshot_id = u.snap, updated_at = CASE WHEN s.status = 'abandoned' THEN $3 ELSE s.updated_at END, \
             status = CASE WHEN s.status = 'abandoned' THEN 'active' ELSE s.status END FROM unnest($1::uuid[], $2::uuid[]) AS u(id, snap) WHERE s.id = u.id",
            args![s_ids, s_snaps, times.iter().copied().max().unwrap_or_default()],
        )
        .await?;
    }
    Ok(results)
}

async fn write_events(
    tx: &tokio_postgres::Transaction<'_>,
    jobs: &[&EventJob],
    sessions: &mut HashMap<Id, SessionRow>,
) -> std::result::Result<Vec<Result<Event>>, Failed> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let mut results = Vec::with_capacity(jobs.len());
    let mut touched: Vec<Id> = Vec::new();
    for job in jobs {
        let new = &job.new;
        let Some(row) = sessions
            .get_mut(&new.session_id)
            .filter(|s| s.tenant == job.tenant)
        else {
            results.push(Err(StoreError::NotFound("session")));
            continue;
        };
        row.last_event_id += 1;
        if !touched.contains(&new.session_id) {
            touched.push(new.session_id);
        }
        results.push(Ok(new.clone().into_event(row.last_event_id, job.now)));
    }
    let written: Vec<(&EventJob, &Event)> = jobs
        .iter()
        .zip(&results)
        .filter_map(|(job, r)| r.as_ref().ok().map(|e| (*job, e)))
        .collect();
    if written.is_empty() {
        return Ok(results);
    }
    touched.sort_unstable();
    let lasts: Vec<i64> = touched
        .iter()
        .map(|id| sessions.get(id).map_or(0, |s| s.last_event_id))
        .collect();
    tx.execute_typed(
        "UPDATE sessions s SET last_event_id = u.last FROM unnest($1::uuid[], $2::int8[]) AS u(id, last) WHERE s.id = u.id",
        args![touched, lasts],
    )
    .await?;
    let session_ids: Vec<Id> = written.iter().map(|(_, e)| e.session_id).collect();
    let seqs: Vec<i64> = written.iter().map(|(_, e)| e.id).collect();
    let tenants: Vec<String> = written.iter().map(|(j, _)| j.tenant.clone()).collect();
    let message_ids: Vec<Option<Id>> = written.iter().map(|(_, e)| e.message_id).collect();
    let execution_ids: Vec<Option<Id>> = written.iter().map(|(_, e)| e.execution_id).collect();
    let types: Vec<String> = written
        .iter()
        .map(|(_, e)| e.event_type.as_str().to_string())
        .collect();
    let contents: Vec<String> = written.iter().map(|(_, e)| e.content.clone()).collect();
    let metadata: Vec<String> = written.iter().map(|(j, _)| j.metadata.clone()).collect();
    let times: Vec<i64> = written.iter().map(|(_, e)| e.timestamp.0).collect();
    tx.execute_typed(
        "INSERT INTO events (session_id, seq, tenant_id, message_id, execution_id, event_type, content, metadata, created_at) \
         SELECT * FROM unnest($1::uuid[], $2::int8[], $3::text[], $4::uuid[], $5::uuid[], $6::text[], $7::text[], $8::text[], $9::int8[])",
        args![session_ids, seqs, tenants, message_ids, execution_ids, types, contents, metadata, times],
    )
    .await?;
    // The other nodes' doorbell is sent after the commit (`relay::run_announcer`).
    Ok(results)
}

/// Each message's answer: written when its session exists for its tenant (the row the batch
/// locked), `NotFound` otherwise.
fn messages_of_sessions(
    jobs: &[&MessageJob],
    sessions: &HashMap<Id, SessionRow>,
) -> Vec<Result<()>> {
    jobs.iter()
        .map(|job| {
            sessions
                .get(&job.message.session_id)
                .filter(|s| s.tenant == job.tenant)
                .map(|_| ())
                .ok_or(StoreError::NotFound("session"))
        })
        .collect()
}

/// Inserts the accepted messages and moves each session's count, `updated_at` (its newest
/// message's time) and an abandoned session back to active, as one append does.
async fn write_messages(
    tx: &tokio_postgres::Transaction<'_>,
    jobs: &[&MessageJob],
    accepted: &[Result<()>],
) -> std::result::Result<(), Failed> {
    let written: Vec<&MessageJob> = jobs
        .iter()
        .zip(accepted)
        .filter(|(_, ok)| ok.is_ok())
        .map(|(job, _)| *job)
        .collect();
    if written.is_empty() {
        return Ok(());
    }
    let tenants: Vec<String> = written.iter().map(|job| job.tenant.clone()).collect();
    let written: Vec<&Message> = written.iter().map(|job| &job.message).collect();
    let mut per_session: HashMap<Id, (i64, i64)> = HashMap::new();
    for m in &written {
        let entry = per_session.entry(m.session_id).or_insert((0, i64::MIN));
        entry.0 += 1;
        entry.1 = entry.1.max(m.created_at.0);
    }
    let mut s_ids: Vec<Id> = per_session.keys().copied().collect();
    s_ids.sort_unstable();
    let counts: Vec<i64> = s_ids.iter().map(|id| per_session[id].0).collect();
    let times: Vec<i64> = s_ids.iter().map(|id| per_session[id].1).collect();
    let ids: Vec<Id> = written.iter().map(|m| m.id).collect();
    let sessions: Vec<Id> = written.iter().map(|m| m.session_id).collect();
    let roles: Vec<String> = written
        .iter()
        .map(|m| m.role.as_str().to_string())
        .collect();
    let contents: Vec<String> = written.iter().map(|m| m.content.clone()).collect();
    let executions: Vec<Option<Id>> = written.iter().map(|m| m.execution_id).collect();
    let related_types: Vec<Option<String>> =
        written.iter().map(|m| m.related_type.clone()).collect();
    let related_ids: Vec<Option<String>> = written.iter().map(|m| m.related_id.clone()).collect();
    let context_urls: Vec<Option<String>> = written.iter().map(|m| m.context_url.clone()).collect();
    let metadata: Vec<String> = written.iter().map(|m| json_text(&m.metadata)).collect();
    let created: Vec<i64> = written.iter().map(|m| m.created_at.0).collect();
    let bump = async {
        tx.execute_typed(
            "UPDATE sessions s SET message_count = s.message_count + u.n, updated_at = u.t, \
         status = CASE WHEN s.status = 'abandoned' THEN 'active' ELSE s.status END \
         FROM unnest($1::uuid[], $2::int8[], $3::int8[]) AS u(id, n, t) WHERE s.id = u.id",
            args![s_ids, counts, times],
        )
        .await
    };
    let insert = async {
        tx.execute_typed(
        "INSERT INTO messages (id, tenant_id, session_id, role, content, execution_id, related_type, related_id, context_url, metadata, created_at) \
         SELECT * FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::text[], $5::text[], $6::uuid[], $7::text[], $8::text[], $9::text[], $10::text[], $11::int8[])",
        args![ids, tenants, sessions, roles, contents, executions, related_types, related_ids, context_urls, metadata, created],
    )
        .await
    };
    tokio::try_join!(bump, insert)?;
    Ok(())
}
