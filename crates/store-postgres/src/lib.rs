//! The PostgreSQL store, for several `stepwise serve` nodes on one database.
//!
//! - Statements are sent with their parameter types and no prepared statements, and no
//!   session state is kept between statements outside a transaction, so the pool may sit
//!   behind a transaction-pooling proxy. The LISTEN connection and the migration lock
//!   need a session: they use their own direct connections.
//! - Steps, snapshots and events go through the group-commit writer (see `writer`).
//! - Executions are claimed with `FOR UPDATE SKIP LOCKED` and leases, so two workers on
//!   any nodes never hold the same execution.
//! - Live events cross nodes with LISTEN/NOTIFY and a polling fallback (see `relay`).
//! - Migrations run under `pg_advisory_lock`, so nodes starting together take turns.
//!
//! This file holds the handle, connecting and migrating; the `impl Store` delegates each
//! method to the file of its domain (`sessions`, `messages`, `executions`, `queue`,
//! `steps`, `snapshots`, `events`, `retention`, `keys`, `checkpoints`, `import`, `stats`),
//! which keeps its statements as named constants. `sql` holds the column lists, row
//! conversions and error mapping they share.

mod cache_reads;
mod checkpoints;
mod events;
mod executions;
mod import;
mod keys;
mod langgraph_store;
mod messages;
mod mirrored;
mod queue;
mod relay;
mod retention;
mod sessions;
mod snapshots;
mod sql;
mod stats;
mod steps;
mod workers;
mod writer;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use stepwise_core::codec::DEFAULT_COMPRESS_THRESHOLD;
use stepwise_core::{Execution, Id, SharedClock, Timestamp, system_clock};
use stepwise_store::{Ack, Ending, Result, Store, StoreError, Tenant, message_created};
use tokio::sync::watch;

use crate::relay::Relay;
use crate::sql::{args, map_pg, map_pool};
use crate::writer::Writer;

mod embedded {
    refinery::embed_migrations!("migrations");
}

/// The key of the advisory lock migrations run under ("stepwise" in ASCII).
const MIGRATION_LOCK: i64 = 0x7374_6570_7769_7365;
const LOCK_MIGRATIONS: &str = "SELECT pg_advisory_lock($1)";
const UNLOCK_MIGRATIONS: &str = "SELECT pg_advisory_unlock($1)";

/// How a [`PgStore`] connects, batches and listens.
#[derive(Clone)]
pub struct PgOptions {
    /// Server time (injected in tests).
    pub clock: SharedClock,
    /// Step and snapshot payloads larger than this are zstd-compressed.
    pub compress_threshold: usize,
    /// Saves that may wait in the queue before callers are slowed down.
    pub queue_capacity: usize,
    /// Most saves committed in one transaction.
    pub max_batch: usize,
    /// Writer tasks committing concurrently (each session's saves go to one of them).
    pub writers: usize,
    /// Connections in the pool (the LISTEN connection is extra).
    pub pool_size: usize,
    /// How often sessions with live subscribers are checked for events a lost
    /// notification did not announce.
    pub poll_interval: Duration,
    /// Whether to LISTEN for other nodes' events (off only to test the polling fallback).
    pub listen: bool,
    /// Bytes of decoded agent memory the hot-session cache keeps (0: no cache).
    pub session_cache_bytes: usize,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            clock: system_clock(),
            compress_threshold: DEFAULT_COMPRESS_THRESHOLD,
            queue_capacity: 4096,
            max_batch: 512,
            writers: 4,
            pool_size: 16,
            poll_interval: Duration::from_secs(1),
            listen: true,
            session_cache_bytes: stepwise_store::DEFAULT_SESSION_CACHE_BYTES,
        }
    }
}

/// A handle to one PostgreSQL database; cheap to clone. Background tasks (the writer,
/// the LISTEN connection, the live-event fetcher) stop when the last handle is dropped;
/// call [`OperationsStore::flush`] first so queued saves are committed.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    writer: Writer,
    relay: Arc<Relay>,
    /// Rung after an execution may have become claimable; `queue::run_ringer` sends the
    /// coalesced `NOTIFY`.
    queue_bell: Arc<tokio::sync::Notify>,
    options: PgOptions,
    decode_errors: AtomicU64,
    applied_migrations: Vec<String>,
    /// The session of executions this process has seen, so their saves go to the writer
    /// of their session (see `shard_key`).
    session_of: std::sync::Mutex<std::collections::HashMap<Id, Id>>,
    /// Executions some of whose saves went to the writer of their own id (their session
    /// unknown here then): their end first waits for every writer (see `queue_ending`).
    strays: std::sync::Mutex<Strays>,
    /// For connections of their own (the retention lock needs a session).
    config: tokio_postgres::Config,
    _stop: watch::Sender<bool>,
    session_cache: stepwise_store::SessionCache,
}

impl PgStore {
    /// Connects with the default options, migrating the schema first.
    pub async fn connect(url: &str) -> Result<PgStore> {
        Self::connect_with(url, PgOptions::default()).await
    }

    /// Connects to `url` (`postgres://user:pass@host:port/db`), migrates the schema under an
    /// advisory lock, and starts the writer and the live-event relay.
    pub async fn connect_with(url: &str, options: PgOptions) -> Result<PgStore> {
        let config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| StoreError::invalid("database", format!("not a PostgreSQL URL: {e}")))?;
        let applied_migrations = migrate(&config).await?;
        let manager = Manager::from_config(
            config.clone(),
            tokio_postgres::NoTls,
            ManagerConfig {
                // No query on checkout: nothing to reset, as no session state is kept.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(2))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(30)))
            .create_timeout(Some(Duration::from_secs(10)))
            .build()
            .map_err(|e| StoreError::Backend(format!("cannot build the connection pool: {e}")))?;
        let relay = Arc::new(Relay::new(options.clock.clone()));
        let queue_bell = Arc::new(tokio::sync::Notify::new());
        let writer = Writer::start(
            pool.clone(),
            relay.clone(),
            queue_bell.clone(),
            options.queue_capacity,
            options.max_batch,
            options.writers,
        );
        let (stop, stopped) = watch::channel(false);
        if options.listen {
            tokio::spawn(relay::run_listener(
                relay.clone(),
                config.clone(),
                stopped.clone(),
            ));
        }
        tokio::spawn(queue::run_ringer(
            pool.clone(),
            queue_bell.clone(),
            stopped.clone(),
        ));
        tokio::spawn(relay::run_announcer(
            relay.clone(),
            pool.clone(),
            stopped.clone(),
        ));
        tokio::spawn(relay::run_fetcher(
            relay.clone(),
            pool.clone(),
            options.poll_interval,
            stopped,
        ));
        Ok(PgStore {
            inner: Arc::new(Inner {
                pool,
                writer,
                relay,
                queue_bell,
                session_cache: stepwise_store::SessionCache::new(options.session_cache_bytes),
                options,
                decode_errors: AtomicU64::new(0),
                applied_migrations,
                session_of: std::sync::Mutex::new(std::collections::HashMap::new()),
                strays: std::sync::Mutex::new(Strays::default()),
                config: config.clone(),
                _stop: stop,
            }),
        })
    }

    /// The migrations this connect applied (empty when the schema was already current).
    pub fn applied_migrations(&self) -> &[String] {
        &self.inner.applied_migrations
    }

    /// Commits everything queued; the background tasks stop once every handle is dropped.
    pub async fn close(self) -> Result<()> {
        self.inner.writer.flush().await
    }

    /// The store's clock (injected in tests).
    fn now(&self) -> Timestamp {
        self.inner.options.clock.now()
    }

    /// Notes which session an execution belongs to (see `shard_key`); the map is bounded
    /// by clearing it when full.
    fn remember(&self, execution: &Execution) {
        const MAX_REMEMBERED: usize = 100_000;
        if let Some(session_id) = execution.session_id {
            let mut map = self
                .inner
                .session_of
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if map.len() >= MAX_REMEMBERED {
                map.clear();
            }
            map.insert(execution.id, session_id);
        }
    }

    /// Which writer an execution's saves go to: its session's when known (always for
    /// executions this process created, claimed or read), else its own id, and then the
    /// execution is noted as a stray.
    fn shard_key(&self, execution_id: Id) -> Id {
        let known = self
            .inner
            .session_of
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&execution_id)
            .copied();
        known.unwrap_or_else(|| {
            self.strays().note(execution_id);
            execution_id
        })
    }

    fn strays(&self) -> std::sync::MutexGuard<'_, Strays> {
        self.inner.strays.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A pooled connection.
    async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.inner.pool.get().await.map_err(map_pool)
    }
}

/// The executions whose saves went to the writer of their own id rather than their
/// session's. A run's end goes to its session's writer, so it is committed after every save
/// queued before it only if all of them went there: a stray's end first waits for every
/// writer. Bounded: when full it is cleared, and the next ends wait for every writer once,
/// for the saves of the strays it forgot.
#[derive(Default)]
struct Strays {
    ids: std::collections::HashSet<Id>,
    /// How many times the set was cleared, and how many of those a wait for every writer
    /// has covered since.
    cleared: u64,
    covered: u64,
}

impl Strays {
    const MAX: usize = 100_000;

    fn note(&mut self, execution_id: Id) {
        if self.ids.len() >= Self::MAX && !self.ids.contains(&execution_id) {
            self.ids.clear();
            self.cleared += 1;
        }
        self.ids.insert(execution_id);
    }

    /// Forgets the execution; `Some(clears)` when its end must first wait for every writer
    /// (pass `clears` to [`Strays::covered`] once it has).
    fn take(&mut self, execution_id: Id) -> Option<u64> {
        let stray = self.ids.remove(&execution_id);
        (stray || self.covered < self.cleared).then_some(self.cleared)
    }

    /// Forgets the execution once its move waited for its saves.
    fn forget(&mut self, execution_id: Id) {
        self.ids.remove(&execution_id);
    }

    fn covered(&mut self, clears: u64) {
        self.covered = self.covered.max(clears);
    }
}

/// Why a connection was refused. A database that does not exist or a user or password the
/// server refuses will not change by waiting: an error at once, with the server's own words
/// (the driver alone says "db error"). Anything else may pass (PostgreSQL still starting,
/// the network): `Unavailable`, tried again.
fn connect_error(e: tokio_postgres::Error) -> StoreError {
    let Some(db) = e.as_db_error() else {
        return StoreError::Unavailable(format!("cannot connect to PostgreSQL: {e}"));
    };
    let code = db.code().code();
    let message = format!(
        "PostgreSQL refused the connection: {} ({code})",
        db.message()
    );
    if code == "3D000" || code.starts_with("28") {
        StoreError::invalid("database", message)
    } else {
        StoreError::Unavailable(message)
    }
}

/// Runs the migrations on a direct connection holding a session advisory lock, so nodes
/// that start together migrate one after the other.
async fn migrate(config: &tokio_postgres::Config) -> Result<Vec<String>> {
    let (mut client, connection) = config
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(connect_error)?;
    let driver = tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "the migration connection failed");
        }
    });
    let result = async {
        client
            .execute_typed(LOCK_MIGRATIONS, args![MIGRATION_LOCK])
            .await
            .map_err(map_pg)?;
        let report = embedded::migrations::runner()
            .run_async(&mut client)
            .await
            .map_err(|e| StoreError::Backend(format!("migrating the PostgreSQL schema: {e}")));
        // Closing the connection would release the lock too; say it explicitly.
        let _ = client
            .execute_typed(UNLOCK_MIGRATIONS, args![MIGRATION_LOCK])
            .await;
        report
    }
    .await;
    drop(client);
    let _ = driver.await;
    Ok(result?
        .applied_migrations()
        .iter()
        .map(|m| m.to_string())
        .collect())
}

/// Each method delegates to the file of its domain; the SQL lives there.
impl Store for PgStore {
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

    /// A run's end goes to its session's writer, where its events went and (when the
    /// session is known here, see `shard_key`) its steps and snapshots: that writer's batch
    /// commits it after them.
    fn orders_transitions(&self) -> bool {
        true
    }

    /// One writer job (see `writer::EndingJob`), on the writer of the execution's session;
    /// an execution some of whose saves went elsewhere (a stray) first waits for every
    /// writer.
    async fn queue_ending(
        &self,
        tenant: &Tenant,
        id: Id,
        ending: Ending,
    ) -> Result<Ack<Execution>> {
        let Ending {
            answer,
            snapshot,
            transition,
            event,
        } = ending;
        let answer = match answer {
            Some(new) => {
                let message = crate::messages::message_job(tenant, new.into_message(self.now()))?;
                let created = self.event_job(tenant, message_created(&message.message))?;
                Some((message, created))
            }
            None => None,
        };
        let snapshot = snapshot
            .map(|new| self.snapshot_job(tenant, new))
            .transpose()?;
        let event = event.map(|new| self.event_job(tenant, new)).transpose()?;
        let session = event
            .as_ref()
            .map(|e| e.new.session_id)
            .or_else(|| answer.as_ref().map(|(m, _)| m.message.session_id));
        let wait = self.strays().take(id);
        if let (Some(_), Some(clears)) = (session, wait) {
            self.inner.writer.flush().await?;
            self.strays().covered(clears);
        }
        self.inner
            .writer
            .ending(
                session.unwrap_or(id),
                writer::EndingJob {
                    tenant: tenant.as_str().to_string(),
                    id,
                    transition,
                    answer,
                    snapshot,
                    event,
                    now: self.now(),
                },
            )
            .await
    }

    fn backend_name(&self) -> &'static str {
        "postgres"
    }
}

impl PgStore {
    /// Tells handles of the same store (clones) from handles of other stores.
    pub fn identity(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// Live subscribers in this process (for metrics).
    pub fn subscriber_count(&self) -> usize {
        self.inner.relay.subscriber_count()
    }

    /// Saves waiting in this process's queue (not yet committed).
    pub fn save_queue_depth(&self) -> u64 {
        self.inner.writer.depth()
    }
}

#[cfg(test)]
mod tests {
    use super::Strays;
    use stepwise_core::new_id;

    #[test]
    fn only_a_stray_waits_for_every_writer_and_only_once() {
        let mut strays = Strays::default();
        let (stray, known) = (new_id(), new_id());
        strays.note(stray);
        assert_eq!(
            strays.take(known),
            None,
            "an execution never noted waits for nothing"
        );
        assert_eq!(strays.take(stray), Some(0), "a stray waits");
        assert_eq!(strays.take(stray), None, "once: its end forgot it");
    }

    #[test]
    fn after_the_set_is_cleared_the_next_ends_wait_until_one_wait_covers_it() {
        let mut strays = Strays::default();
        let forgotten = new_id();
        strays.note(forgotten);
        for _ in 1..Strays::MAX {
            strays.note(new_id());
        }
        assert_eq!(strays.cleared, 0);
        strays.note(new_id()); // full: cleared, `forgotten` with the rest
        assert_eq!(strays.cleared, 1);
        let other = new_id();
        assert_eq!(
            strays.take(forgotten),
            Some(1),
            "a forgotten stray still waits"
        );
        assert_eq!(
            strays.take(other),
            Some(1),
            "so does any end until a wait covers the clear"
        );
        strays.covered(1);
        assert_eq!(
            strays.take(other),
            None,
            "after one wait for every writer, none"
        );
    }
}
