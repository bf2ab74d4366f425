//! The one writer thread. Every write is a job sent over a bounded channel; the thread
//! takes whatever is queued (up to `max_batch`), runs the jobs in one transaction, each
//! inside a savepoint so one failing job rolls back alone, commits once (group commit),
//! and only then answers the callers and publishes the committed events.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// Called with the commit's result once the batch is over.
    finish: Box<dyn FnOnce(Result<()>) + Send>,
}

/// Events a batch publishes once it has committed.
pub(crate) type Published = Vec<(Tenant, Arc<Event>)>;

pub(crate) type Job = Box<dyn FnOnce(&Connection, &mut Published) -> Outcome + Send>;

pub(crate) struct Writer {
    tx: mpsc::Sender<Job>,
    capacity: usize,
    pub(crate) save_errors: Arc<AtomicU64>,
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
    ) -> std::io::Result<(Writer, JoinHandle<()>)> {
        let (tx, rx) = mpsc::channel::<Job>(capacity);
        let save_errors = Arc::new(AtomicU64::new(0));
        let errors = save_errors.clone();
        let (wake, woken) = std::sync::mpsc::sync_channel(1);
        let checkpointer = std::thread::Builder::new()
            .name("stepwise-sqlite-checkpoint".into())
            .spawn(move || run_checkpoints(checkpoints, woken))?;
        let handle = std::thread::Builder::new()
            .name("stepwise-sqlite-writer".into())
            .spawn(move || {
                let mut conn = conn;
                run(&mut conn, rx, hub, max_batch.max(1), errors, &wake);
                drop(wake);
                let _ = checkpointer.join();
                // Every sender is gone: the queue is drained. Fold the WAL back so the
                // files at rest are small; failing that is harmless.
                let _ = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);");
            })?;
        Ok((
            Writer {
                tx,
                capacity,
                save_errors,
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
        let (ack_tx, ack) = Ack::channel();
        let job: Job = Box::new(move |conn, published| {
            let before = published.len();
            let result = work(conn, published);
            let keep = result.is_ok();
            if !keep {
                published.truncate(before);
            }
            Outcome {
                keep,
                finish: Box::new(move |committed| {
                    let _ = ack_tx.send(committed.and(result));
                }),
            }
        });
        self.tx
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
        drop(std::mem::replace(&mut self.tx, closed));
    }

    pub(crate) fn depth(&self) -> u64 {
        (self.capacity - self.tx.capacity()) as u64
    }
}

fn run(
    conn: &mut Connection,
    mut rx: mpsc::Receiver<Job>,
    hub: EventHub,
    max_batch: usize,
    save_errors: Arc<AtomicU64>,
    checkpoint: &std::sync::mpsc::SyncSender<()>,
) {
    let mut jobs: Vec<Job> = Vec::with_capacity(max_batch);
    while let Some(first) = rx.blocking_recv() {
        jobs.push(first);
        while jobs.len() < max_batch {
            match rx.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        let mut published = Published::new();
        let (finishes, committed) = run_batch(conn, jobs.drain(..), &mut published);
        if committed.is_err() {
            save_errors.fetch_add(finishes.len() as u64, Ordering::Relaxed);
            published.clear();
        }
        // Publish before answering: an acknowledged event has already reached subscribers.
        for (tenant, event) in published {
            hub.publish_scoped(&tenant, event);
        }
        for finish in finishes {
            finish(committed.clone());
        }
        if committed.is_ok() {
            // A checkpoint is due (or already pending: then this is a no-op).
            let _ = checkpoint.try_send(());
        }
    }
}

/// The shortest time between two checkpoints: the WAL holds at most about this much
/// writing beyond the database file, and a busy store does not sync all the time.
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(1000);

/// Copies committed pages from the WAL into the database file after commits, on a thread
/// of its own: a PASSIVE checkpoint never blocks the writer or the readers, and it lets
/// SQLite start the WAL over from its beginning once every page is copied. Ends when the
/// writer goes away.
fn run_checkpoints(conn: Connection, woken: std::sync::mpsc::Receiver<()>) {
    while woken.recv().is_ok() {
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(error = %e, "a WAL checkpoint failed; the next commit tries again");
        }
        let until = Instant::now() + CHECKPOINT_INTERVAL;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match woken.recv_timeout(left) {
                // Commits during the pause are covered by the next checkpoint.
                Ok(()) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => break,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

type Finish = Box<dyn FnOnce(Result<()>) + Send>;

fn run_batch(
    conn: &mut Connection,
    jobs: impl ExactSizeIterator<Item = Job>,
    published: &mut Published,
) -> (Vec<Finish>, Result<()>) {
    let mut finishes = Vec::with_capacity(jobs.len());
    let single = jobs.len() == 1;
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
        // Nothing ran: tell every caller why (database locked for too long, disk gone).
        for job in jobs {
            let _ = job; // dropping the job drops its Ack sender: callers see Unavailable
        }
        return (finishes, Err(map_sqlite(e)));
    }
    let mut failed_statement = None;
    for job in jobs {
        // A lone job needs no savepoint: if it fails the whole transaction rolls back.
        if !single && let Err(e) = exec_cached(conn, "SAVEPOINT job") {
            failed_statement = Some(e);
        }
        let outcome = job(conn, published);
        if !single {
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
        } else if !outcome.keep {
            let _ = conn.execute_batch("ROLLBACK");
            (outcome.finish)(Ok(()));
            return (finishes, Ok(()));
        }
        finishes.push(outcome.finish);
    }
    let committed = match failed_statement {
        Some(e) => Err(e),
        None => conn.execute_batch("COMMIT").map_err(map_sqlite),
    };
    if committed.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
        tracing::error!(error = ?committed, jobs = finishes.len(), "a write batch failed to commit");
    }
    (finishes, committed)
}

fn exec_cached(conn: &Connection, sql: &str) -> Result<()> {
    conn.prepare_cached(sql)
        .and_then(|mut stmt| stmt.execute([]))
        .map(|_| ())
        .map_err(map_sqlite)
}

/// Maps a SQLite error to the store's error kinds: a full disk or a locked database is
/// `Unavailable` (the caller may retry), everything else a backend error.
pub(crate) fn map_sqlite(e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode;
    match e.sqlite_error_code() {
        Some(
            ErrorCode::DiskFull
            | ErrorCode::DatabaseBusy
            | ErrorCode::DatabaseLocked
            | ErrorCode::CannotOpen
            | ErrorCode::ReadOnly
            | ErrorCode::SystemIoFailure,
        ) => StoreError::Unavailable(e.to_string()),
        _ => StoreError::Backend(e.to_string()),
    }
}
