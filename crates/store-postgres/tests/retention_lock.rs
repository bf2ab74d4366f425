//! Only one node runs a retention pass at a time: two stores on one database, and the
//! second's attempt at the retention lock is refused while the first holds it.

mod common;

use std::time::{Duration, Instant};

use common::{TestDatabases, postgres_or_skip};
use stepwise_core::system_clock;
use stepwise_store::prelude::*;

const DEADLINE: Duration = Duration::from_secs(20);

#[test]
fn a_second_node_is_refused_the_retention_lock_while_the_first_holds_it() {
    let Some(admin) = postgres_or_skip() else {
        return;
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot start a tokio runtime: {e}"))
        .block_on(async move {
            let databases = TestDatabases::new(admin);
            let url = databases.create().await;
            let a = TestDatabases::store(&url, system_clock()).await;
            let b = TestDatabases::store(&url, system_clock()).await;

            let held = a
                .try_retention_lock()
                .await
                .unwrap_or_else(|e| panic!("first node: {e}"))
                .expect("the first node gets the lock on a quiet database");
            for node in [&b, &a] {
                let refused = node
                    .try_retention_lock()
                    .await
                    .unwrap_or_else(|e| panic!("second attempt: {e}"));
                assert!(
                    refused.is_none(),
                    "no second holder while the first holds the lock"
                );
            }

            // Released with its connection: the other node gets it next.
            drop(held);
            let started = Instant::now();
            let taken = loop {
                let attempt = b
                    .try_retention_lock()
                    .await
                    .unwrap_or_else(|e| panic!("after release: {e}"));
                if let Some(lock) = attempt {
                    break lock;
                }
                assert!(
                    started.elapsed() < DEADLINE,
                    "the lock was not released after its holder dropped it"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            let refused = a
                .try_retention_lock()
                .await
                .unwrap_or_else(|e| panic!("first node again: {e}"));
            assert!(refused.is_none(), "now the second node holds it");
            drop(taken);
            a.close().await.unwrap_or_else(|e| panic!("close a: {e}"));
            b.close().await.unwrap_or_else(|e| panic!("close b: {e}"));
        });
}
