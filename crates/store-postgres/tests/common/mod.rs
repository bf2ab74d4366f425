//! Test databases: every store a test opens gets its own fresh database
//! (`stepwise_test_<random>`), dropped when the test's [`TestDatabases`] goes away.
//!
//! The admin connection comes from `STEPWISE_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`). When PostgreSQL cannot be reached the
//! tests fail under CI (`CI` set) and are skipped loudly elsewhere.

#![allow(dead_code)]

use std::sync::Mutex;
use std::time::Duration;

use stepwise_core::SharedClock;
use stepwise_store_postgres::{PgOptions, PgStore};

pub const DEFAULT_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

pub fn admin_url() -> String {
    std::env::var("STEPWISE_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_ADMIN_URL.to_string())
}

/// `Some(admin url)` when PostgreSQL answers; `None` (after saying so loudly) when it does
/// not and this is not CI; a panic under CI.
pub fn postgres_or_skip() -> Option<String> {
    let url = admin_url();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot start a tokio runtime: {e}"));
    let reachable = runtime.block_on(async {
        let connect = admin_connect(&url);
        match tokio::time::timeout(Duration::from_secs(10), connect).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e),
            Err(_) => Err("no answer within 10 s".to_string()),
        }
    });
    match reachable {
        Ok(()) => Some(url),
        Err(reason) => {
            let reason = format!("cannot connect to {} ({reason})", redact(&url));
            if std::env::var_os("CI").is_some() {
                panic!("PostgreSQL is required under CI: {reason}");
            }
            eprintln!(
                "\n*** PostgreSQL suite SKIPPED: {reason}. Start PostgreSQL or set STEPWISE_TEST_POSTGRES_URL. ***\n"
            );
            None
        }
    }
}

fn redact(url: &str) -> String {
    match (url.split_once("://"), url.rsplit_once('@')) {
        (Some((scheme, _)), Some((_, host))) => format!("{scheme}://…@{host}"),
        _ => url.to_string(),
    }
}

async fn admin_connect(url: &str) -> Result<tokio_postgres::Client, String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// The URL of database `name` on the admin URL's server.
pub fn database_url(admin: &str, name: &str) -> String {
    let (base, query) = match admin.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (admin, None),
    };
    let (scheme, rest) = base.split_once("://").unwrap_or(("postgres", base));
    let host = rest.split_once('/').map_or(rest, |(host, _)| host);
    match query {
        Some(q) => format!("{scheme}://{host}/{name}?{q}"),
        None => format!("{scheme}://{host}/{name}"),
    }
}

/// The databases one test created; dropped (forcibly) with it.
pub struct TestDatabases {
    pub admin: String,
    created: Mutex<Vec<String>>,
}

impl TestDatabases {
    pub fn new(admin: String) -> Self {
        TestDatabases {
            admin,
            created: Mutex::new(Vec::new()),
        }
    }

    /// Creates an empty database and returns its URL.
    pub async fn create(&self) -> String {
        let name = format!("stepwise_test_{}", stepwise_core::new_id().simple());
        let client = admin_connect(&self.admin)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the admin database: {e}"));
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
        self.created
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(name.clone());
        database_url(&self.admin, &name)
    }

    pub async fn store(url: &str, clock: SharedClock) -> PgStore {
        let options = PgOptions {
            clock,
            ..PgOptions::default()
        };
        PgStore::connect_with(url, options)
            .await
            .unwrap_or_else(|e| panic!("cannot open the PostgreSQL store: {e}"))
    }
}

impl Drop for TestDatabases {
    fn drop(&mut self) {
        let names = std::mem::take(&mut *self.created.lock().unwrap_or_else(|e| e.into_inner()));
        if names.is_empty() {
            return;
        }
        let admin = self.admin.clone();
        // Dropping runs inside the test's runtime: do it on a thread with its own.
        let dropper = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                let Ok(client) = admin_connect(&admin).await else {
                    return;
                };
                for name in names {
                    if let Err(e) = client
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await
                    {
                        eprintln!("could not drop the test database {name}: {e}");
                    }
                }
            });
        });
        let _ = dropper.join();
    }
}
