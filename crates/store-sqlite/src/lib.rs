//! The embedded SQLite store: one database file in WAL mode, one writer thread that
//! commits queued writes in batches, and a small pool of reader connections used from
//! `spawn_blocking`. With [`Durability::Full`] (the default) each batch's commit is synced
//! to disk before any of its writes is acknowledged (`synchronous=FULL`: an acknowledged
//! write survives a power cut); with [`Durability::Process`] it survives a crash of the
//! process but not of the machine (`synchronous=NORMAL`). Group commit makes one sync
//! cover every write of a batch.
//!
//! This file holds the store type, opening and connecting; the [`Store`] methods are
//! one-line calls into a file per domain (the domains of the conformance suite), each with
//! its statements as named constants at the top, and the rules from
//! [`stepwise_store::rules`].

mod cache_reads;
mod checkpoints;
mod events;
mod executions;
mod import;
mod keys;
mod langgraph_store;
mod messages;
mod mirrored;
mod operations;
mod queue;
mod retention;
mod rows;
mod sessions;
mod snapshots;
mod steps;
mod workers;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use stepwise_core::codec;
use stepwise_core::codec::DEFAULT_COMPRESS_THRESHOLD;
use stepwise_core::{Execution, Id, SharedClock, Timestamp, system_clock};
use stepwise_store::{Ack, Ending, EventHub, Result, Store, StoreError, Tenant, message_created};

pub(crate) use crate::retention::delete_session_rows;
use crate::writer::{Published, WalPolicy, Writer, map_sqlite};

mod embedded {
    refinery::embed_migrations!("migrations");
}

#[derive(Clone)]
pub struct SqliteOptions {
    /// Server time (injected in tests).
    pub clock: SharedClock,
    /// Step and snapshot payloads larger than this are zstd-compressed.
    pub compress_threshold: usize,
    /// Writes that may wait in the queue before callers are slowed down.
    pub queue_capacity: usize,
    /// Most writes committed in one transaction.
    pub max_batch: usize,
    /// Idle reader connections kept open.
    pub readers: usize,
    /// How long a write waits for another process holding the database lock.
    pub busy_timeout: Duration,
    /// When an acknowledged write is safe: synced to disk, or handed to the OS.
    pub durability: Durability,
    /// The WAL file is checkpointed and truncated by the writer once it passes this size.
    pub wal_limit_bytes: u64,
    /// After this long without a write the WAL is checkpointed and truncated to zero.
    pub wal_idle_truncate: Duration,
    /// Bytes of decoded agent memory the hot-session cache keeps (0: no cache).
    pub session_cache_bytes: usize,
}

/// What an acknowledged write survives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// A power cut or an OS crash: each group commit is synced (fsync) before its writes
    /// are acknowledged (`PRAGMA synchronous = FULL`).
    #[default]
    Full,
    /// A crash of the process, not of the machine: commits reach the OS, which writes them
    /// out later (`PRAGMA synchronous = NORMAL`).
    Process,
}

impl Durability {
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Full => "full",
            Durability::Process => "process",
        }
    }

    fn synchronous(self) -> &'static str {
        match self {
            Durability::Full => "FULL",
            Durability::Process => "NORMAL",
        }
    }
}

/// The WAL size past which the writer checkpoints and truncates it (64 MiB).
pub const DEFAULT_WAL_LIMIT_BYTES: u64 = 64 * 1024 * 1024;
/// How long without a write before the WAL is truncated to zero. Longer than the pause
/// between an agent's steps while its model answers: a truncated WAL makes the next commit
/// grow the file again, sync the new WAL's header, and read its pages afresh (the
/// truncation is another connection's change). See docs/operations.md for what it saves.
pub const DEFAULT_WAL_IDLE_TRUNCATE: Duration = Duration::from_secs(10);

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            clock: system_clock(),
            compress_threshold: DEFAULT_COMPRESS_THRESHOLD,
            queue_capacity: 4096,
            max_batch: 512,
            readers: 4,
            busy_timeout: Duration::from_secs(5),
            durability: Durability::Full,
            wal_limit_bytes: DEFAULT_WAL_LIMIT_BYTES,
            wal_idle_truncate: DEFAULT_WAL_IDLE_TRUNCATE,
            session_cache_bytes: stepwise_store::DEFAULT_SESSION_CACHE_BYTES,
        }
    }
}

/// A handle to one SQLite database; cheap to clone. The writer thread stops, after
/// committing everything queued, when the last handle is dropped.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    writer: Writer,
    writer_thread: Mutex<Option<JoinHandle<()>>>,
    readers: Mutex<Vec<Connection>>,
    options: SqliteOptions,
    hub: EventHub,
    decode_errors: AtomicU64,
    applied_migrations: Vec<String>,
    owned_sessions: Mutex<std::collections::HashSet<Id>>,
    session_cache: stepwise_store::SessionCache,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Close the queue, then wait for the writer to commit what is left in it.
        self.writer.close();
        let handle = self
            .writer_thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }
}

impl SqliteStore {
    pub fn open(path: &Path) -> Result<SqliteStore> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens (creating if needed) and migrates the database at `path`.
    pub fn open_with(path: &Path, options: SqliteOptions) -> Result<SqliteStore> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                StoreError::Unavailable(format!("cannot create {}: {e}", dir.display()))
            })?;
        }
        let mut conn = connect(path, &options, true)?;
        let report = embedded::migrations::runner()
            .run(&mut conn)
            .map_err(|e| StoreError::Backend(format!("migrating {}: {e}", path.display())))?;
        let applied_migrations = report
            .applied_migrations()
            .iter()
            .map(|m| m.to_string())
            .collect();
        let hub = EventHub::new();
        let checkpoints = connect(path, &options, false)?;
        let mut wal_path = path.as_os_str().to_owned();
        wal_path.push("-wal");
        let (writer, handle) = Writer::start(
            conn,
            checkpoints,
            hub.clone(),
            options.queue_capacity,
            options.max_batch,
            WalPolicy {
                wal_path: PathBuf::from(wal_path),
                limit_bytes: options.wal_limit_bytes,
                idle_truncate: options.wal_idle_truncate,
            },
        )
        .map_err(|e| StoreError::Backend(format!("cannot start the writer thread: {e}")))?;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                writer,
                writer_thread: Mutex::new(Some(handle)),
                readers: Mutex::new(Vec::new()),
                session_cache: stepwise_store::SessionCache::new(options.session_cache_bytes),
                options,
                hub,
                decode_errors: AtomicU64::new(0),
                applied_migrations,
                owned_sessions: Mutex::new(Default::default()),
            }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The migrations this open applied (empty when the schema was already current).
    pub fn applied_migrations(&self) -> &[String] {
        &self.inner.applied_migrations
    }

    fn now(&self) -> Timestamp {
        self.inner.options.clock.now()
    }

    async fn read<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &Inner) -> Result<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let conn = inner.take_reader()?;
            let result = work(&conn, &inner);
            inner.put_reader(conn);
            result
        })
        .await
        .map_err(|e| StoreError::Backend(format!("a read task failed: {e}")))?
    }

    /// A read of one row by its key, run on the calling thread: a point lookup takes a few
    /// microseconds, less than handing it to a blocking thread and waking the caller again
    /// (two thread switches per read). WAL readers do not wait for the writer. Reads that
    /// may touch many rows go through [`SqliteStore::read`].
    fn read_point<T, F>(&self, work: F) -> Result<T>
    where
        F: FnOnce(&Connection) -> Result<T>,
    {
        let conn = self.inner.take_reader()?;
        let result = work(&conn);
        self.inner.put_reader(conn);
        result
    }

    async fn write<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &mut Published) -> Result<T> + Send + 'static,
    {
        self.inner.writer.write(work).await
    }
}

impl Inner {
    fn take_reader(&self) -> Result<Connection> {
        let idle = self.readers.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match idle {
            Some(conn) => Ok(conn),
            None => connect(&self.path, &self.options, false),
        }
    }

    fn put_reader(&self, conn: Connection) {
        let mut idle = self.readers.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.options.readers {
            idle.push(conn);
        }
    }
}

/// WAL pages after which the writer's commit checkpoints what the checkpoint thread has not
/// copied yet (SQLite's own default). Once the whole WAL is copied the next commit starts it
/// over from its beginning: commits then overwrite blocks the file already has, where a WAL
/// that only grows makes every sync also record the file system's new blocks.
const WAL_RESTART_PAGES: u32 = 1000;

fn connect(path: &Path, options: &SqliteOptions, writer: bool) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags)
        .map_err(|e| StoreError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
    conn.busy_timeout(options.busy_timeout)
        .map_err(map_sqlite)?;
    // `synchronous` is per connection: the writer's decides when a commit is synced; the
    // checkpoint connection's, that checkpoints sync the database file (both do at
    // NORMAL and FULL). `journal_size_limit` cuts a WAL that SQLite starts over back to
    // the limit.
    let pragmas = if writer {
        format!(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = {}; PRAGMA foreign_keys = OFF; \
             PRAGMA wal_autocheckpoint = {}; PRAGMA journal_size_limit = {}; \
             PRAGMA temp_store = MEMORY; PRAGMA cache_size = -16000;",
            options.durability.synchronous(),
            WAL_RESTART_PAGES,
            options.wal_limit_bytes.min(i64::MAX as u64)
        )
    } else {
        format!(
            "PRAGMA synchronous = {}; PRAGMA temp_store = MEMORY; PRAGMA cache_size = -16000; \
             PRAGMA mmap_size = 268435456;",
            options.durability.synchronous()
        )
    };
    conn.execute_batch(&pragmas).map_err(map_sqlite)?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

/// A part of a run's end that the store refused (its session or parent gone: nothing of
/// it written) is logged and left out; a database failure fails the whole end.
fn left_out<T>(written: Result<T>, execution: Id, what: &str) -> Result<()> {
    match written {
        Ok(_) => Ok(()),
        Err(e) if writer::database_failed(&e) => Err(e),
        Err(e) => {
            tracing::warn!(execution = %execution, error = %e, "a run's end was written without {what}");
            Ok(())
        }
    }
}

pub(crate) fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::ConstraintViolation)
}

/// The one number a `SELECT COUNT(*)` answers.
pub(crate) fn count(conn: &Connection, sql: &str, param: impl rusqlite::Params) -> Result<u64> {
    conn.prepare_cached(sql)
        .and_then(|mut s| s.query_row(param, |r| r.get::<_, i64>(0)))
        .map(|n| n.max(0) as u64)
        .map_err(map_sqlite)
}

impl Store for SqliteStore {
    type Checkpoints = Self;

    fn checkpoints(&self) -> Option<&Self> {
        Some(self)
    }

    fn session_cache(&self) -> Option<&stepwise_store::SessionCache> {
        Some(&self.inner.session_cache)
    }

    fn write_backlog(&self) -> u64 {
        self.inner.writer.depth()
    }

    /// One writer thread takes every write in the order queued, and a run's end is one of
    /// its jobs: it commits in the batch of the run's last writes or a later one.
    fn orders_transitions(&self) -> bool {
        true
    }

    async fn queue_ending(
        &self,
        tenant: &Tenant,
        id: Id,
        ending: Ending,
    ) -> Result<Ack<Execution>> {
        let tenant = tenant.clone();
        let now = self.now();
        let Ending {
            answer,
            snapshot,
            transition,
            event,
        } = ending;
        let answer = answer.map(|new| new.into_message(now));
        let snapshot = snapshot.map(|new| {
            let state = codec::encode_value(&new.state, self.inner.options.compress_threshold);
            let replace = new.replace;
            (new.into_snapshot(now), state, replace)
        });
        self.inner
            .writer
            .submit(move |conn, published| {
                // The move is checked first: a refused one writes nothing.
                executions::check_move(conn, tenant.as_str(), id, &transition)?;
                if let Some(message) = &answer {
                    let written = messages::write_message(conn, tenant.as_str(), message, now)
                        .and_then(|()| {
                            events::insert_event(
                                conn,
                                &tenant,
                                message_created(message),
                                now,
                                published,
                            )
                        });
                    left_out(written, id, "the answer")?;
                }
                if let Some((snapshot, state, replace)) = &snapshot {
                    let written = snapshots::insert_snapshot(
                        conn,
                        tenant.as_str(),
                        snapshot,
                        state,
                        *replace,
                        now,
                    );
                    left_out(written, id, "the snapshot")?;
                }
                let moved = executions::write_move(conn, tenant.as_str(), id, &transition, now)?;
                if let Some(event) = event {
                    let written = events::insert_event(conn, &tenant, event, now, published);
                    left_out(written, id, "the execution's event")?;
                }
                Ok(moved)
            })
            .await
    }

    fn backend_name(&self) -> &'static str {
        "sqlite"
    }
}
