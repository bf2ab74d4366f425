//! The one writer thread. Every write is a job sent over a bounded channel; the thread
//! takes whatever is queued (up to `max_batch`), runs the jobs in one transaction, each
//! inside a savepoint so one failing job rolls back alone, commits once (group commit),
//! and only then answers the callers and publishes the committed events.
//!
//! Two lanes: new work (a user's message queueing an execution) comes over
//! an intake channel of its own, everything else (claims, steps, finishing executions,
//! events) over the work channel. A batch takes every queued work job first and intake
//! jobs only up to a share of them (half as many, at least [`MIN_INTAKE_PER_BATCH`]; all of
//! them when no work waits), so a burst of messages slows its own senders, not the
//! executions already running: they keep their turn at every commit.
//!
//! A step append, most of the writes, needs no savepoint: it checks everything before it
//! writes ([`Writer::submit_checked`]), so when it fails it has written nothing, unless
//! the database itself failed. Then the batch stops, rolls back and answers that error to
//! the jobs it ran; the jobs after it run in the next batch. (A savepoint copies every page
//! a job touches into the sub-journal first: about a third of a batched append's time.)

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use stepwise_core::Event;
use stepwise_store::{Ack, EventHub, Result, StoreError, Tenant};
use tokio::sync::mpsc;

/// What a job leaves behind for after the commit.
pub(crate) struct Outcome {
    /// Whether the job's writes stay (false rolls back to its savepoint).
    keep: bool,
    /// Whether the job failed because the disk is full.
    full: bool,
    /// The database error a job run without a savepoint failed with: it may have written
    /// part of its rows, so nothing of its batch may commit.
    partial: Option<StoreError>,
    /// Called with the commit's result once the batch is over.
    finish: Box<dyn FnOnce(Result<()>) + Send>,
}

/// How the writer keeps the WAL small.
#[derive(Clone, Debug)]
pub(crate) struct WalPolicy {
    /// The `-wal` file beside the database.
    pub(crate) wal_path: PathBuf,
    /// Past this size the writer checkpoints the whole WAL and truncates it (TRUNCATE)
    /// itself, between two batches, instead of leaving it to the PASSIVE checkpoints.
    pub(crate) limit_bytes: u64,
    /// After this long without a commit the WAL is checkpointed and truncated to zero.
    pub(crate) idle_truncate: Duration,
}

/// Events a batch publishes once it has committed.
pub(crate) type Published = Vec<(Tenant, Arc<Event>)>;

/// What a job runs on the writer's connection.
type RunJob = Box<dyn FnOnce(&Connection, &mut Published) -> Outcome + Send>;

/// A queued write.
pub(crate) struct Job {
    run: RunJob,
    /// Came over the intake lane.
    intake: bool,
    /// Runs inside a savepoint of its own (else it has written nothing when it fails,
    /// unless the database failed).
    savepoint: bool,
}

/// Whether a failed job may have left writes behind: the database failed under it (a
/// refusal, such as a missing row or a conflict, is decided before anything is written).
pub(crate) fn database_failed(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::Backend(_) | StoreError::StorageFull(_) | StoreError::Unavailable(_)
    )
}

pub(crate) struct Writer {
    tx: mpsc::Sender<Job>,
    intake_tx: mpsc::Sender<Job>,
    capacity: usize,
    pub(crate) save_errors: Arc<AtomicU64>,
    /// False from a write that failed for a full disk until a write succeeds again.
    pub(crate) writable: Arc<AtomicBool>,
}

impl Writer {
    /// Starts the writer thread on `conn`, and the checkpoint thread on `checkpoints` (a
    /// second connection to the same file): the writer never checkpoints itself, so no
    /// save waits for the WAL to be copied into the database and synced.
    pub(crate) fn start(
        conn: Connection,
        checkpoints: Connection,
        hub: EventHub,
        capacity: usize,
        max_batch: usize,
        wal: WalPolicy,
    ) -> std::io::Result<(Writer, JoinHandle<()>)> {
        let (tx, rx) = mpsc::channel::<Job>(capacity);
        let (intake_tx, intake_rx) = mpsc::channel::<Job>(capacity);
        let save_errors = Arc::new(AtomicU64::new(0));
        let writable = Arc::new(AtomicBool::new(true));
        let state = WriterState {
            save_errors: save_errors.clone(),
            writable: writable.clone(),
            wal: wal.clone(),
            next_escalation: Instant::now(),
        };
        let (wake, woken) = std::sync::mpsc::sync_channel(1);
        let idle_truncate = wal.idle_truncate;
        let checkpointer = std::thread::Builder::new()
            .name("stepwise-sqlite-checkpoint".into())
            .spawn(move || run_checkpoints(checkpoints, woken, idle_truncate))?;
        let handle = std::thread::Builder::new()
            .name("stepwise-sqlite-writer".into())
            .spawn(move || {
                let mut conn = conn;
                let lanes = Lanes {
                    work: rx,
                    intake: intake_rx,
                    waiter: None,
                };
                run(&mut conn, lanes, hub, max_batch.max(1), state, &wake);
                drop(wake);
                let _ = checkpointer.join();
                // Every sender is gone: the queue is drained. Fold the WAL back so the
                // files at rest are small; failing that is harmless.
                let _ = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);");
            })?;
        Ok((
            Writer {
                tx,
                intake_tx,
                capacity,
                save_errors,
                writable,
            },
            handle,
        ))
    }

    /// Queues `work`; waits only while the queue is full. The returned [`Ack`] resolves
    /// with the job's result once its batch has committed.
    pub(crate) async fn submit<T, F>(&self, work: F) -> Result<Ack<T>>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &mut Published) -> Result<T> + Send + 'static,
    {
        self.submit_with(work, true, Lane::Work).await
    }

    /// [`submit`](Self::submit) for `work` that makes all its checks before its first
    /// write, so that a refusal leaves nothing behind: it runs without a savepoint.
    pub(crate) async fn submit_checked<T, F>(&self, work: F) -> Result<Ack<T>>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &mut Published) -> Result<T> + Send + 'static,
    {
        self.submit_with(work, false, Lane::Work).await
    }

    /// [`write`](Self::write) on the intake lane: new work (a message that queues an
    /// execution), which yields to the work already running.
    pub(crate) async fn write_intake<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &mut Published) -> Result<T> + Send + 'static,
    {
        self.submit_with(work, true, Lane::Intake).await?.await
    }

    async fn submit_with<T, F>(&self, work: F, savepoint: bool, lane: Lane) -> Result<Ack<T>>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &mut Published) -> Result<T> + Send + 'static,
    {
        let (mut job, ack) = job(work, savepoint);
        job.intake = lane == Lane::Intake;
        let sender = match lane {
            Lane::Work => &self.tx,
            Lane::Intake => &self.intake_tx,
        };
        sender
            .send(job)
            .await
            .map_err(|_| StoreError::Unavailable("the store is closed".into()))?;
        Ok(ack)
    }

    /// Queues `work` and waits until it is durable.
    pub(crate) async fn write<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &mut Published) -> Result<T> + Send + 'static,
    {
        self.submit(work).await?.await
    }

    /// Closes the queue: the thread commits what is queued, then stops.
    pub(crate) fn close(&mut self) {
        let (closed, _) = mpsc::channel(1);
        drop(std::mem::replace(&mut self.tx, closed.clone()));
        drop(std::mem::replace(&mut self.intake_tx, closed));
    }

    pub(crate) fn depth(&self) -> u64 {
        (2 * self.capacity - self.tx.capacity() - self.intake_tx.capacity()) as u64
    }
}

/// The queue a job goes to: the work already running, or new work that yields to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lane {
    Work,
    Intake,
}

/// A job running `work`, and the [`Ack`] its caller waits on.
fn job<T, F>(work: F, savepoint: bool) -> (Job, Ack<T>)
where
    T: Send + 'static,
    F: FnOnce(&Connection, &mut Published) -> Result<T> + Send + 'static,
{
    let (ack_tx, ack) = Ack::channel();
    let run = Box::new(move |conn: &Connection, published: &mut Published| {
        let before = published.len();
        let result = work(conn, published);
        let keep = result.is_ok();
        let full = matches!(result, Err(StoreError::StorageFull(_)));
        if !keep {
            published.truncate(before);
        }
        let partial = match &result {
            Err(e) if !savepoint && database_failed(e) => Some(e.clone()),
            _ => None,
        };
        Outcome {
            keep,
            full,
            partial,
            finish: Box::new(move |committed| {
                let _ = ack_tx.send(committed.and(result));
            }),
        }
    });
    (
        Job {
            run,
            savepoint,
            intake: false,
        },
        ack,
    )
}

/// What the writer thread keeps between batches.
struct WriterState {
    save_errors: Arc<AtomicU64>,
    writable: Arc<AtomicBool>,
    wal: WalPolicy,
    /// No escalated checkpoint before this (set after one could not finish).
    next_escalation: Instant,
}

/// How many intake jobs a batch takes for each work job in it (when work is waiting).
/// An execution of a built-in agent makes a handful of writes (its claim, its start, its
/// steps, its end) and a message that queues one makes one: at one intake job per two
/// work jobs, running executions keep up with what is queued (the mixed run of `stepwise
/// bench queue` measures it), while a store with no work waiting takes all intake at once.
const INTAKE_PER_WORK_JOB: f64 = 0.5;

/// Intake jobs a batch may take however little work waits: one or two workers' jobs must not
/// cut intake to one message a commit (it would lose group commit). How much intake reaches the
/// writer at all is the engine's to hold (`--intake-concurrency`).
const MIN_INTAKE_PER_BATCH: usize = 16;

/// The writer's two inputs (see the module's docs).
struct Lanes {
    work: mpsc::Receiver<Job>,
    intake: mpsc::Receiver<Job>,
    /// Waits on both channels at once when the writer sleeps.
    waiter: Option<tokio::runtime::Runtime>,
}

impl Lanes {
    /// Fills `jobs` for the next batch: every queued work job (up to `max_batch`), then
    /// intake jobs up to their share.
    fn fill(&mut self, jobs: &mut VecDeque<Job>, max_batch: usize) {
        while jobs.len() < max_batch {
            match self.work.try_recv() {
                Ok(job) => jobs.push_back(job),
                Err(_) => break,
            }
        }
        let intake = jobs.iter().filter(|j| j.intake).count();
        let work = jobs.len() - intake;
        let share = if work == 0 {
            max_batch
        } else {
            ((work as f64 * INTAKE_PER_WORK_JOB).ceil() as usize).max(MIN_INTAKE_PER_BATCH)
        };
        let mut taken = intake;
        while taken < share && jobs.len() < max_batch {
            match self.intake.try_recv() {
                Ok(job) => {
                    jobs.push_back(job);
                    taken += 1;
                }
                Err(_) => break,
            }
        }
    }

    /// The next job of either lane: taken at once if one is queued within [`LINGER`], else
    /// after sleeping until one comes. `None` once every sender of both is gone.
    fn next(&mut self) -> Option<Job> {
        let started = Instant::now();
        loop {
            let work = self.work.try_recv();
            if let Ok(job) = work {
                return Some(job);
            }
            let intake = self.intake.try_recv();
            if let Ok(job) = intake {
                return Some(job);
            }
            let closed = matches!(work, Err(mpsc::error::TryRecvError::Disconnected))
                && matches!(intake, Err(mpsc::error::TryRecvError::Disconnected));
            if closed {
                return None;
            }
            if started.elapsed() < LINGER {
                std::thread::yield_now();
                continue;
            }
            return self.sleep();
        }
    }

    /// Blocks until either lane has a job (or both are closed).
    fn sleep(&mut self) -> Option<Job> {
        if self.waiter.is_none() {
            match tokio::runtime::Builder::new_current_thread().build() {
                Ok(runtime) => self.waiter = Some(runtime),
                Err(e) => {
                    tracing::error!(error = %e, "the writer cannot wait for jobs; polling instead");
                    std::thread::sleep(Duration::from_millis(1));
                    return self.next();
                }
            }
        }
        let Lanes {
            work,
            intake,
            waiter,
        } = self;
        let runtime = waiter.as_ref()?;
        runtime.block_on(async {
            tokio::select! {
                biased;
                job = work.recv() => match job {
                    Some(job) => Some(job),
                    None => intake.recv().await,
                },
                job = intake.recv() => match job {
                    Some(job) => Some(job),
                    None => work.recv().await,
                },
            }
        })
    }
}

fn run(
    conn: &mut Connection,
    mut lanes: Lanes,
    hub: EventHub,
    max_batch: usize,
    mut state: WriterState,
    checkpoint: &std::sync::mpsc::SyncSender<()>,
) {
    // Jobs a stopped batch did not reach stay here for the next one.
    let mut jobs: VecDeque<Job> = VecDeque::with_capacity(max_batch);
    loop {
        if jobs.is_empty() {
            match lanes.next() {
                Some(first) => jobs.push_back(first),
                None => break,
            }
        }
        lanes.fill(&mut jobs, max_batch);
        let mut published = Published::new();
        let changes_before = conn.total_changes();
        let queued = jobs.len();
        let (finishes, committed, full) = run_batch(conn, &mut jobs, &mut published);
        if committed.is_err() {
            // The jobs this batch took (a stopped batch leaves the rest queued).
            let taken = queued - jobs.len();
            state.save_errors.fetch_add(taken as u64, Ordering::Relaxed);
            published.clear();
        }
        let full = full || matches!(committed, Err(StoreError::StorageFull(_)));
        if full {
            if state.writable.swap(false, Ordering::Relaxed) {
                tracing::error!("the disk is full: writes fail until space is freed");
            }
        } else if committed.is_ok() && !state.writable.swap(true, Ordering::Relaxed) {
            tracing::info!("a write succeeded again: the store can save");
        }
        // Publish before answering: an acknowledged event has already reached subscribers.
        for (tenant, event) in published {
            hub.publish_scoped(&tenant, event);
        }
        for finish in finishes {
            finish(committed.clone());
        }
        // Only a batch that changed rows wrote to the WAL (the workers' queue polls are
        // write transactions that usually change nothing; they must not keep the
        // checkpointer from seeing the store idle).
        if committed.is_ok() && conn.total_changes() != changes_before {
            // A checkpoint is due (or already pending: then this is a no-op).
            let _ = checkpoint.try_send(());
            keep_wal_bounded(conn, &mut state);
        }
    }
}

/// How long the writer looks for the next job before it sleeps: a caller that awaits each
/// save sends its next one within microseconds of its answer, and waking a sleeping thread
/// costs about as much as the save itself. Only right after a batch, so an idle store
/// spends nothing.
const LINGER: Duration = Duration::from_micros(50);

/// How long after an escalated checkpoint that could not finish the writer tries again.
const ESCALATION_RETRY: Duration = Duration::from_millis(100);

/// Under steady writes a PASSIVE checkpoint never catches up with the end of the WAL, so
/// SQLite never starts it over and the file grows without end. Past three quarters of the
/// limit the writer takes its own turn to checkpoint everything and truncate the file (the
/// queued writes wait for it, then go in one batch): the quarter left is the room the next
/// batches have, so the limit holds (a batch is at most a few MB). Readers still on an
/// older snapshot delay it up to the busy timeout; if it cannot finish, the next try is
/// [`ESCALATION_RETRY`] later.
fn keep_wal_bounded(conn: &Connection, state: &mut WriterState) {
    let size = std::fs::metadata(&state.wal.wal_path)
        .map(|m| m.len())
        .unwrap_or(0);
    let threshold = state.wal.limit_bytes - state.wal.limit_bytes / 4;
    if size <= threshold || Instant::now() < state.next_escalation {
        return;
    }
    let started = Instant::now();
    match conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
        row.get::<_, i64>(0)
    }) {
        Ok(0) => {
            tracing::debug!(
                wal_bytes = size,
                took_ms = started.elapsed().as_millis() as u64,
                "the WAL passed its limit: checkpointed and truncated"
            );
        }
        Ok(_) => {
            tracing::warn!(
                wal_bytes = size,
                "the WAL passed its limit but readers kept it from being truncated; trying again shortly"
            );
            state.next_escalation = Instant::now() + ESCALATION_RETRY;
        }
        // The checkpoint thread is running a PASSIVE one (SQLite then answers BUSY at
        // once): try again after it.
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => {
            state.next_escalation = Instant::now() + ESCALATION_RETRY;
        }
        Err(e) => {
            tracing::warn!(wal_bytes = size, error = %e, "a WAL checkpoint failed; trying again shortly");
            state.next_escalation = Instant::now() + ESCALATION_RETRY;
        }
    }
}

/// The shortest time between two checkpoints: the WAL holds at most about this much
/// writing beyond the database file, and a busy store does not sync all the time.
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(1000);

/// The fewest commits between two PASSIVE checkpoints. A checkpoint after every commit
/// of a store written every few seconds (an agent's steps between its model's answers)
/// made each next commit start the WAL over, and SQLite syncs a new WAL's header before
/// its first frame: two syncs a step instead of one. Left to collect this many commits,
/// such a WAL holds a few hundred KiB; a busy store reaches the count well within a
/// [`CHECKPOINT_INTERVAL`].
const CHECKPOINT_AFTER_COMMITS: u32 = 64;

/// Copies committed pages from the WAL into the database file after commits, on a thread
/// of its own: a PASSIVE checkpoint (at most one a [`CHECKPOINT_INTERVAL`], and only once
/// [`CHECKPOINT_AFTER_COMMITS`] commits came since the last) never blocks the writer or
/// the readers, and it lets SQLite start the WAL over from its beginning once every page
/// is copied. After `idle_truncate` without a commit, a TRUNCATE checkpoint copies the
/// rest and cuts the file back to zero bytes, so a store at rest keeps no WAL. Ends when
/// the writer goes away.
fn run_checkpoints(
    conn: Connection,
    woken: std::sync::mpsc::Receiver<()>,
    idle_truncate: Duration,
) {
    use std::sync::mpsc::RecvTimeoutError;
    // Commits since the last TRUNCATE, commits (as far as their wake-ups tell: several
    // may come as one) since the last checkpoint, and when the last PASSIVE ran.
    let mut dirty = false;
    let mut commits: u32 = 0;
    let mut last_passive: Option<Instant> = None;
    loop {
        let woke = if dirty {
            woken.recv_timeout(idle_truncate)
        } else {
            woken.recv().map_err(|_| RecvTimeoutError::Disconnected)
        };
        match woke {
            Ok(()) => {
                dirty = true;
                commits = commits.saturating_add(1);
                // Commits within the interval, or before the count, are covered by the
                // next checkpoint, or by the TRUNCATE once they stop.
                if commits >= CHECKPOINT_AFTER_COMMITS
                    && last_passive.is_none_or(|at| at.elapsed() >= CHECKPOINT_INTERVAL)
                {
                    if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                    {
                        tracing::warn!(error = %e, "a WAL checkpoint failed; the next commit tries again");
                    }
                    last_passive = Some(Instant::now());
                    commits = 0;
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                match conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
                    row.get::<_, i64>(0)
                }) {
                    Ok(0) => {
                        dirty = false;
                        commits = 0;
                    }
                    // Busy (a reader or a new write): the next idle pause tries again.
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "truncating the idle WAL failed; trying again later")
                    }
                }
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

type Finish = Box<dyn FnOnce(Result<()>) + Send>;

/// Runs one batch from the front of `jobs`: the callers' answers, the commit's result,
/// and whether a job failed because the disk is full. A job without a savepoint that
/// the database failed under stops the batch (it rolls back); the jobs it did not reach
/// stay in `jobs`.
fn run_batch(
    conn: &mut Connection,
    jobs: &mut VecDeque<Job>,
    published: &mut Published,
) -> (Vec<Finish>, Result<()>, bool) {
    let mut finishes = Vec::with_capacity(jobs.len());
    let mut full = false;
    let single = jobs.len() == 1;
    // BEGIN and COMMIT are cached statements: parsing them again cost a few microseconds
    // a save.
    if let Err(e) = exec_cached(conn, "BEGIN IMMEDIATE") {
        // Nothing ran: tell every caller why (database locked for too long, disk gone).
        // Dropping a job drops its Ack sender: its caller sees Unavailable.
        jobs.clear();
        return (finishes, Err(e), false);
    }
    let mut failed_statement = None;
    while let Some(job) = jobs.pop_front() {
        // A lone job needs no savepoint: if it fails the whole transaction rolls back.
        let savepoint = job.savepoint && !single;
        if savepoint && let Err(e) = exec_cached(conn, "SAVEPOINT job") {
            failed_statement = Some(e);
        }
        let outcome = (job.run)(conn, published);
        full |= outcome.full;
        if savepoint {
            let end = if outcome.keep {
                "RELEASE job"
            } else {
                "ROLLBACK TO job; RELEASE job"
            };
            let step = if outcome.keep {
                exec_cached(conn, end)
            } else {
                conn.execute_batch(end).map_err(map_sqlite)
            };
            if let Err(e) = step {
                failed_statement = Some(e);
            }
        } else if single && !outcome.keep {
            let _ = conn.execute_batch("ROLLBACK");
            (outcome.finish)(Ok(()));
            return (finishes, Ok(()), full);
        } else if let Some(e) = outcome.partial {
            // Part of its rows may be written and there is no savepoint to undo them:
            // the batch rolls back, and the jobs not yet run wait for the next one.
            finishes.push(outcome.finish);
            failed_statement = Some(e);
            break;
        }
        finishes.push(outcome.finish);
    }
    let committed = match failed_statement {
        Some(e) => Err(e),
        None => exec_cached(conn, "COMMIT"),
    };
    if committed.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
        tracing::error!(error = ?committed, jobs = finishes.len(), "a write batch failed to commit");
    }
    (finishes, committed, full)
}

fn exec_cached(conn: &Connection, sql: &str) -> Result<()> {
    conn.prepare_cached(sql)
        .and_then(|mut stmt| stmt.execute([]))
        .map(|_| ())
        .map_err(map_sqlite)
}

/// Maps a SQLite error to the store's error kinds: a full disk is `StorageFull`, a locked
/// or unreachable database `Unavailable` (the caller may retry), everything else a
/// backend error.
pub(crate) fn map_sqlite(e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode;
    match e.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => StoreError::StorageFull(e.to_string()),
        Some(
            ErrorCode::DatabaseBusy
            | ErrorCode::DatabaseLocked
            | ErrorCode::CannotOpen
            | ErrorCode::ReadOnly
            | ErrorCode::SystemIoFailure,
        ) => StoreError::Unavailable(e.to_string()),
        _ => StoreError::Backend(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Connection {
        let conn = Connection::open_in_memory().expect("open");
        conn.execute_batch("CREATE TABLE t (k TEXT PRIMARY KEY)")
            .expect("table");
        conn
    }

    fn insert(k: &'static str) -> impl FnOnce(&Connection, &mut Published) -> Result<()> {
        move |conn, _| {
            conn.execute("INSERT INTO t (k) VALUES (?1)", [k])
                .map(|_| ())
                .map_err(map_sqlite)
        }
    }

    fn rows(conn: &Connection) -> Vec<String> {
        let mut stmt = conn.prepare("SELECT k FROM t ORDER BY k").expect("select");
        stmt.query_map([], |r| r.get(0))
            .expect("rows")
            .collect::<rusqlite::Result<_>>()
            .expect("rows")
    }

    async fn answer<T: Send + 'static>(ack: Ack<T>) -> Result<T> {
        ack.await
    }

    /// A job without a savepoint that refuses before writing leaves the batch as it was:
    /// the others commit, it alone is refused.
    #[tokio::test]
    async fn a_refusal_without_a_savepoint_leaves_the_batch_committing() {
        let mut conn = table();
        let (a, a_ack) = job(insert("a"), false);
        let (b, b_ack) = job(
            |_: &Connection, _: &mut Published| -> Result<()> {
                Err(StoreError::Conflict("taken".into()))
            },
            false,
        );
        let (c, c_ack) = job(insert("c"), false);
        let mut jobs = VecDeque::from([a, b, c]);
        let (finishes, committed, _) = run_batch(&mut conn, &mut jobs, &mut Published::new());
        assert!(committed.is_ok());
        for finish in finishes {
            finish(committed.clone());
        }
        assert!(answer(a_ack).await.is_ok());
        assert!(matches!(answer(b_ack).await, Err(StoreError::Conflict(_))));
        assert!(answer(c_ack).await.is_ok());
        assert_eq!(rows(&conn), ["a", "c"]);
    }

    /// A job without a savepoint that the database fails after it wrote stops the batch:
    /// nothing of it commits (no partial write), the jobs it ran are told, and the jobs
    /// after it run in the next batch.
    #[tokio::test]
    async fn a_database_failure_without_a_savepoint_rolls_the_batch_back() {
        let mut conn = table();
        let (a, a_ack) = job(insert("a"), false);
        let (b, b_ack) = job(
            |conn: &Connection, published: &mut Published| -> Result<()> {
                insert("b")(conn, published)?;
                Err(StoreError::StorageFull("disk full".into()))
            },
            false,
        );
        let (c, c_ack) = job(insert("c"), false);
        let mut jobs = VecDeque::from([a, b, c]);
        let (finishes, committed, full) = run_batch(&mut conn, &mut jobs, &mut Published::new());
        assert!(matches!(committed, Err(StoreError::StorageFull(_))));
        assert!(full);
        assert_eq!(finishes.len(), 2, "the batch stopped at the failed job");
        assert_eq!(jobs.len(), 1, "the job after it waits for the next batch");
        for finish in finishes {
            finish(committed.clone());
        }
        assert!(matches!(
            answer(a_ack).await,
            Err(StoreError::StorageFull(_))
        ));
        assert!(matches!(
            answer(b_ack).await,
            Err(StoreError::StorageFull(_))
        ));
        assert!(
            rows(&conn).is_empty(),
            "nothing of the stopped batch was kept"
        );

        let (finishes, committed, _) = run_batch(&mut conn, &mut jobs, &mut Published::new());
        assert!(committed.is_ok());
        for finish in finishes {
            finish(committed.clone());
        }
        assert!(answer(c_ack).await.is_ok());
        assert_eq!(rows(&conn), ["c"]);
    }

    /// A job in a savepoint that fails after writing rolls back alone.
    #[tokio::test]
    async fn a_failure_inside_a_savepoint_rolls_back_alone() {
        let mut conn = table();
        let (a, a_ack) = job(insert("a"), false);
        let (b, b_ack) = job(
            |conn: &Connection, published: &mut Published| -> Result<()> {
                insert("b")(conn, published)?;
                Err(StoreError::Backend("failed after writing".into()))
            },
            true,
        );
        let mut jobs = VecDeque::from([a, b]);
        let (finishes, committed, _) = run_batch(&mut conn, &mut jobs, &mut Published::new());
        assert!(committed.is_ok());
        for finish in finishes {
            finish(committed.clone());
        }
        assert!(answer(a_ack).await.is_ok());
        assert!(matches!(answer(b_ack).await, Err(StoreError::Backend(_))));
        assert_eq!(rows(&conn), ["a"]);
    }
}
