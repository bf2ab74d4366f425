//! Picks the storage backend once, from the database URL's scheme.
//!
//! `Store` has async methods, so it is not dyn-compatible: commands are generic over
//! `S: Store`, and [`with_store!`] opens the backend the URL names and runs the command
//! body with it, then closes the store so queued writes are drained before exit.

mod dispatch;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use stepwise_store_files::FileStore;
use stepwise_store_sqlite::{Durability, SqliteOptions, SqliteStore};

/// The file name of the default SQLite database inside the data directory.
pub const DEFAULT_DB_FILE: &str = "stepwise.db";

/// The WAL size (MiB) past which the SQLite writer checkpoints and truncates it.
pub const DEFAULT_WAL_LIMIT_MB: u64 =
    stepwise_store_sqlite::DEFAULT_WAL_LIMIT_BYTES / (1024 * 1024);

/// How long `serve` keeps trying to reach PostgreSQL before giving up.
pub const DEFAULT_SERVE_DB_WAIT_SECS: u64 = 60;

/// `--durability`: what an acknowledged SQLite write survives.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurabilityArg {
    /// Power loss: each group commit is synced before it is acknowledged.
    Full,
    /// A crash of the process only: the OS writes commits out later.
    Process,
}

impl From<DurabilityArg> for Durability {
    fn from(arg: DurabilityArg) -> Self {
        match arg {
            DurabilityArg::Full => Durability::Full,
            DurabilityArg::Process => Durability::Process,
        }
    }
}

/// How a command opens its store.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    pub durability: Durability,
    pub wal_limit_bytes: u64,
    /// How long to keep trying to reach a PostgreSQL that does not answer (zero: once).
    pub wait: Duration,
    /// The bound of the hot-session cache (bytes of decoded agent memory; 0: none).
    pub session_cache_bytes: usize,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            durability: Durability::Full,
            wal_limit_bytes: stepwise_store_sqlite::DEFAULT_WAL_LIMIT_BYTES,
            wait: Duration::ZERO,
            session_cache_bytes: stepwise_store::DEFAULT_SESSION_CACHE_BYTES,
        }
    }
}

impl OpenOptions {
    pub fn sqlite(&self) -> SqliteOptions {
        SqliteOptions {
            durability: self.durability,
            wal_limit_bytes: self.wal_limit_bytes,
            session_cache_bytes: self.session_cache_bytes,
            ..SqliteOptions::default()
        }
    }
}

/// The lock `serve` holds on a SQLite database for its whole life: `<db>.serve.lock`
/// beside the file, locked exclusively (an advisory lock the OS drops when the process
/// ends, however it ends). Other commands do not take it, so `stepwise sessions`,
/// `keys` and the like still work beside a running server.
pub fn lock_for_serve(db: &Path) -> anyhow::Result<std::fs::File> {
    if let Some(parent) = db.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create the directory {}", parent.display()))?;
    }
    let mut path = db.as_os_str().to_owned();
    path.push(".serve.lock");
    let path = PathBuf::from(path);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open the lock file {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => bail!(
            "another `stepwise serve` is already running on the SQLite database {} (it holds {}). \
             One SQLite file serves one server process: stop the other one, or give this one \
             another --database. To run several servers on one store, use PostgreSQL \
             (--database postgres://...). CLI commands such as `stepwise sessions` can still \
             use the file while the server runs.",
            db.display(),
            path.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("cannot lock {}", path.display()))
        }
    }
}

/// A parsed `--database` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    Sqlite(PathBuf),
    Postgres(String),
    Files(PathBuf),
}

impl DatabaseUrl {
    /// `sqlite://PATH` (also `sqlite:PATH`), `postgres://...` / `postgresql://...`,
    /// `files://DIR`; anything without a scheme is a SQLite file path.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let text = text.trim();
        if text.is_empty() {
            bail!("the database URL is empty");
        }
        if let Some(path) = text
            .strip_prefix("sqlite://")
            .or_else(|| text.strip_prefix("sqlite:"))
        {
            if path.is_empty() {
                bail!("`{text}` names no file: use sqlite://PATH");
            }
            return Ok(DatabaseUrl::Sqlite(PathBuf::from(path)));
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(DatabaseUrl::Postgres(text.to_string()));
        }
        if let Some(dir) = text.strip_prefix("files://") {
            if dir.is_empty() {
                // `files://` alone: the default folder of seed 004, ~/.stepwise/sessions.
                let Some(default) = FileStore::default_dir() else {
                    bail!("`{text}` names no directory and HOME is not set: use files://DIR");
                };
                return Ok(DatabaseUrl::Files(default));
            }
            return Ok(DatabaseUrl::Files(PathBuf::from(dir)));
        }
        if let Some((scheme, _)) = text.split_once("://") {
            bail!(
                "unknown database scheme `{scheme}://`: use sqlite://PATH, postgres://... or files://DIR"
            );
        }
        // A mistyped URL (`postgres:/db`, `postgresql:host`, `files:dir`) would otherwise be a
        // new SQLite file of that name: a node on a database of its own.
        if let Some((scheme, _)) = text.split_once(':')
            && ["postgres", "postgresql", "files"].contains(&scheme.to_ascii_lowercase().as_str())
        {
            bail!(
                "`{text}` is not a database URL: use {scheme}://... (two slashes), or ./{text} for a SQLite file of that name"
            );
        }
        Ok(DatabaseUrl::Sqlite(PathBuf::from(text)))
    }

    /// The URL from the settings, or `stepwise.db` in the data directory (created if missing).
    pub fn resolve(setting: Option<&str>, data_dir: Option<&Path>) -> anyhow::Result<Self> {
        match setting.filter(|s| !s.trim().is_empty()) {
            Some(text) => Self::parse(text),
            None => {
                let dir = crate::data_dir(data_dir)?;
                std::fs::create_dir_all(&dir).with_context(|| {
                    format!("cannot create the data directory {}", dir.display())
                })?;
                Ok(DatabaseUrl::Sqlite(dir.join(DEFAULT_DB_FILE)))
            }
        }
    }
}

impl std::fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DatabaseUrl::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
            // Never print a password from the URL.
            DatabaseUrl::Postgres(url) => f.write_str(&redact_password(url)),
            DatabaseUrl::Files(dir) => write!(f, "files://{}", dir.display()),
        }
    }
}

fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((userinfo, host)) = rest.split_once('@') else {
        return url.to_string();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

/// An opened backend. Each variant holds a concrete [`stepwise_store::Store`]; the enum is
/// a store too (`dispatch.rs`), the one type the commands and the server run on.
#[derive(Clone)]
pub enum OpenedStore {
    Sqlite(SqliteStore),
    Files(FileStore),
    Postgres(stepwise_store_postgres::PgStore),
}

/// Opens (and so migrates) the store the URL names.
pub async fn open(url: &DatabaseUrl, options: &OpenOptions) -> anyhow::Result<OpenedStore> {
    match url {
        DatabaseUrl::Sqlite(path) => Ok(OpenedStore::Sqlite(
            open_sqlite_with(path, options.sqlite()).await?,
        )),
        DatabaseUrl::Postgres(url) => Ok(OpenedStore::Postgres(
            open_postgres_waiting(url, options.wait, options.session_cache_bytes).await?,
        )),
        DatabaseUrl::Files(dir) => Ok(OpenedStore::Files(open_files(dir).await?)),
    }
}

pub async fn open_sqlite_with(path: &Path, options: SqliteOptions) -> anyhow::Result<SqliteStore> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create the directory {}", parent.display()))?;
    }
    let path = path.to_path_buf();
    // Opening runs the migrations on this thread; keep it off the async workers.
    let store = tokio::task::spawn_blocking(move || SqliteStore::open_with(&path, options))
        .await
        .context("the database open task failed")?
        .context("cannot open the SQLite database")?;
    Ok(store)
}

/// Connects to PostgreSQL and migrates the schema (under an advisory lock, so nodes that
/// start together take turns). While PostgreSQL cannot be reached (not up yet, restarting)
/// keeps trying for up to `wait`, with backoff from 0.25 s to 5 s, logging each try: a
/// server started beside its database comes up once the database does.
pub async fn open_postgres_waiting(
    url: &str,
    wait: Duration,
    session_cache_bytes: usize,
) -> anyhow::Result<stepwise_store_postgres::PgStore> {
    let shown = redact_password(url);
    let deadline = Instant::now() + wait;
    let mut delay = Duration::from_millis(250);
    let mut tries = 0u32;
    loop {
        tries += 1;
        let options = stepwise_store_postgres::PgOptions {
            session_cache_bytes,
            ..Default::default()
        };
        match stepwise_store_postgres::PgStore::connect_with(url, options).await {
            Ok(store) => {
                if tries > 1 {
                    tracing::info!(database = %shown, tries, "connected to PostgreSQL");
                }
                return Ok(store);
            }
            Err(stepwise_store::StoreError::Unavailable(reason)) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    let waited = if wait.is_zero() {
                        String::new()
                    } else {
                        format!(" after trying for {} s ({tries} tries)", wait.as_secs())
                    };
                    bail!(
                        "cannot reach PostgreSQL at {shown}{waited}: {reason}. Is it running \
                         and accepting connections? (--db-wait-secs sets how long to wait)"
                    );
                }
                let pause = delay.min(left);
                tracing::warn!(
                    database = %shown,
                    attempt = tries,
                    error = %reason,
                    retry_in_ms = pause.as_millis() as u64,
                    left_s = left.as_secs(),
                    "PostgreSQL is not reachable yet; trying again"
                );
                tokio::time::sleep(pause).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e).context("cannot open the PostgreSQL database"),
        }
    }
}

pub async fn open_files(dir: &Path) -> anyhow::Result<FileStore> {
    let dir = dir.to_path_buf();
    let store = tokio::task::spawn_blocking(move || FileStore::open(&dir))
        .await
        .context("the database open task failed")?
        .context("cannot open the session files folder")?;
    for skipped in &store.open_report().skipped {
        tracing::warn!(
            file = %skipped.path.display(),
            reason = %skipped.reason,
            "a session file could not be read; it was left as it is"
        );
    }
    Ok(store)
}

impl OpenedStore {
    /// The migrations opening the database applied (empty when it was up to date).
    pub fn applied_migrations(&self) -> Vec<String> {
        match self {
            OpenedStore::Sqlite(store) => store.applied_migrations().to_vec(),
            // Session files have no schema; each document carries its own version.
            OpenedStore::Files(_) => Vec::new(),
            OpenedStore::Postgres(store) => store.applied_migrations().to_vec(),
        }
    }

    /// Drains the save queue and stops the backend's background work.
    pub async fn close(self) -> anyhow::Result<()> {
        match self {
            OpenedStore::Sqlite(store) => close_sqlite(store).await?,
            OpenedStore::Files(store) => {
                store.close().await.context("closing the session files")?
            }
            OpenedStore::Postgres(store) => store
                .close()
                .await
                .context("flushing the PostgreSQL store")?,
        }
        Ok(())
    }
}

/// Waits for every queued write to be durable, then lets the writer thread stop: dropping
/// the last handle joins it, so that happens off the async workers.
pub async fn close_sqlite(store: SqliteStore) -> anyhow::Result<()> {
    stepwise_store::OperationsStore::flush(&store)
        .await
        .context("flushing the SQLite database")?;
    tokio::task::spawn_blocking(move || drop(store))
        .await
        .context("closing the SQLite database")?;
    Ok(())
}

/// Runs `$body` with `$store` bound to the opened store, then closes the store whatever the
/// body returned. Evaluates to the body's `anyhow::Result`.
#[macro_export]
macro_rules! with_store {
    ($opened:expr, |$store:ident| $body:expr) => {{
        let opened: $crate::db::OpenedStore = $opened;
        let result: anyhow::Result<_> = {
            let $store = opened.clone();
            $body.await
        };
        $crate::db::first_error(result, opened.close().await)
    }};
}
pub use with_store;

/// The command's result, unless it succeeded and closing the store failed.
pub fn first_error<T>(result: anyhow::Result<T>, closed: anyhow::Result<()>) -> anyhow::Result<T> {
    match (result, closed) {
        (Ok(value), Ok(())) => Ok(value),
        (Err(e), _) => Err(e),
        (Ok(_), Err(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_pick_the_backend() {
        assert_eq!(
            DatabaseUrl::parse("sqlite:///tmp/a.db").unwrap(),
            DatabaseUrl::Sqlite("/tmp/a.db".into())
        );
        assert_eq!(
            DatabaseUrl::parse("sqlite://rel.db").unwrap(),
            DatabaseUrl::Sqlite("rel.db".into())
        );
        assert_eq!(
            DatabaseUrl::parse("data/x.db").unwrap(),
            DatabaseUrl::Sqlite("data/x.db".into())
        );
        assert!(matches!(
            DatabaseUrl::parse("postgres://u:p@h/db").unwrap(),
            DatabaseUrl::Postgres(_)
        ));
        assert_eq!(
            DatabaseUrl::parse("files://d").unwrap(),
            DatabaseUrl::Files("d".into())
        );
        if let Some(default) = FileStore::default_dir() {
            assert_eq!(
                DatabaseUrl::parse("files://").unwrap(),
                DatabaseUrl::Files(default)
            );
        }
        assert!(DatabaseUrl::parse("mysql://x").is_err());
        for typo in [
            "postgres:/bad",
            "postgresql:host/db",
            "Postgres:x",
            "files:dir",
        ] {
            let error = DatabaseUrl::parse(typo).expect_err(typo).to_string();
            assert!(error.contains("not a database URL"), "{typo}: {error}");
        }
        assert!(DatabaseUrl::parse("sqlite://").is_err());
        assert!(DatabaseUrl::parse("  ").is_err());
    }

    #[test]
    fn passwords_are_not_printed() {
        let url = DatabaseUrl::parse("postgres://me:secret@host/db").unwrap();
        assert_eq!(url.to_string(), "postgres://me:***@host/db");
    }
}
