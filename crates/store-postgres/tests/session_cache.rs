//! The hot-session cache with two nodes on one database: a node whose cache holds a
//! session notices the steps and the messages another node appended, also when that
//! node's clock is behind.

mod common;

use common::{TestDatabases, postgres_or_skip};
use serde_json::json;
use stepwise_core::{
    ExecutionStatus, Id, ManualClock, Restored, Role, StepBody, StepKind, Timestamp, system_clock,
};
use stepwise_store::prelude::*;
use stepwise_store::{
    MessageQuery, NewExecution, NewMessage, NewSession, NewStep, Store, Tenant,
    list_session_messages, restore_memory,
};
use stepwise_store_postgres::PgStore;

fn run(test: impl std::future::Future<Output = ()>) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot start a tokio runtime: {e}"))
        .block_on(test);
}

async fn save(node: &PgStore, tenant: &Tenant, execution: Id, n: u32) {
    let new = NewStep {
        execution_id: execution,
        step_number: n,
        kind: StepKind::Action,
        body: StepBody {
            model_output: Some(format!("step {n}")),
            ..StepBody::default()
        },
    };
    let ack = node
        .append_step(tenant, new)
        .await
        .unwrap_or_else(|e| panic!("append_step {n}: {e}"));
    ack.await
        .unwrap_or_else(|e| panic!("step {n} not saved: {e}"));
}

/// The step numbers node restores, after checking them against an uncached read.
async fn restore(node: &PgStore, tenant: &Tenant, session: Id) -> Vec<u32> {
    let memory = restore_memory(node, tenant, session)
        .await
        .unwrap_or_else(|e| panic!("restore_memory: {e}"))
        .unwrap_or_else(|| panic!("the session is gone"));
    assert_eq!(memory.restored, Restored::Full);
    let stored = node
        .list_session_steps(tenant, session)
        .await
        .unwrap_or_else(|e| panic!("list_session_steps: {e}"));
    assert_eq!(
        memory.steps, stored.items,
        "the restore is what the database holds"
    );
    memory.steps.iter().map(|s| s.step_number).collect()
}

/// Two nodes on one database, a third whose clock is an hour behind, and a session.
struct Nodes {
    a: PgStore,
    b: PgStore,
    late: PgStore,
    acme: Tenant,
    session: stepwise_core::Session,
}

impl Nodes {
    async fn start(databases: &TestDatabases) -> Nodes {
        let url = databases.create().await;
        let a = TestDatabases::store(&url, system_clock()).await;
        let b = TestDatabases::store(&url, system_clock()).await;
        // A node whose clock is an hour behind: what it appends is stamped older than
        // anything node A has seen.
        let late = TestDatabases::store(
            &url,
            ManualClock::new(Timestamp(Timestamp::now().0 - 3_600_000_000)),
        )
        .await;
        let acme = Tenant::new("acme").unwrap_or_else(|e| panic!("tenant: {e}"));
        let session = a
            .create_session(
                &acme,
                NewSession {
                    user_id: "u".into(),
                    ..NewSession::default()
                },
            )
            .await
            .unwrap_or_else(|e| panic!("create_session: {e}"));
        Nodes {
            a,
            b,
            late,
            acme,
            session,
        }
    }

    async fn close(self) {
        for node in [self.a, self.b, self.late] {
            node.close().await.unwrap_or_else(|e| panic!("close: {e}"));
        }
    }
}

#[test]
fn a_node_with_a_warm_cache_sees_steps_another_node_appended() {
    let Some(admin) = postgres_or_skip() else {
        return;
    };
    run(async move {
        let databases = TestDatabases::new(admin);
        let nodes = Nodes::start(&databases).await;
        let (a, b, acme, session) = (&nodes.a, &nodes.b, &nodes.acme, nodes.session.id);
        let execution = a
            .create_execution(
                acme,
                NewExecution {
                    session_id: Some(session),
                    parent_execution_id: None,
                    user_id: "u".into(),
                    agent_type: "external".into(),
                    agent_config: json!({}),
                    input: json!({}),
                    metadata: json!({}),
                    status: ExecutionStatus::Running,
                    lease: None,
                },
            )
            .await
            .unwrap_or_else(|e| panic!("create_execution: {e}"));
        for n in 1..=3 {
            save(a, acme, execution.id, n).await;
        }
        assert_eq!(restore(a, acme, session).await, [1, 2, 3]);
        let cache = a.session_cache().unwrap_or_else(|| panic!("no cache"));
        let warm = cache.stats();

        save(b, acme, execution.id, 4).await;
        assert_eq!(restore(a, acme, session).await, [1, 2, 3, 4]);
        let after = cache.stats();
        assert_eq!(
            after.hits,
            warm.hits + 1,
            "the new row came on top of the entry"
        );
        assert_eq!(after.misses, warm.misses);

        // The late node's step is older than node A's position: the row count tells.
        save(&nodes.late, acme, execution.id, 5).await;
        assert_eq!(restore(a, acme, session).await, [1, 2, 3, 4, 5]);
        assert_eq!(restore(a, acme, session).await, [1, 2, 3, 4, 5]);
        // Node B never restored: its first restore reads the whole session.
        assert_eq!(restore(b, acme, session).await, [1, 2, 3, 4, 5]);

        nodes.close().await;
    });
}

async fn post(node: &PgStore, tenant: &Tenant, session: Id, text: &str) {
    node.append_message(tenant, NewMessage::new(session, Role::User, text))
        .await
        .unwrap_or_else(|e| panic!("append_message {text}: {e}"));
}

/// The messages node lists, after checking them against an uncached read.
async fn messages(node: &PgStore, tenant: &Tenant, session: Id) -> Vec<String> {
    let listed = list_session_messages(node, tenant, session, MessageQuery::default())
        .await
        .unwrap_or_else(|e| panic!("list_session_messages: {e}"));
    let stored = node
        .list_messages(tenant, session, MessageQuery::default())
        .await
        .unwrap_or_else(|e| panic!("list_messages: {e}"));
    assert_eq!(listed, stored, "the listing is what the database holds");
    listed.into_iter().map(|m| m.content).collect()
}

#[test]
fn a_node_with_warm_messages_sees_messages_another_node_appended() {
    let Some(admin) = postgres_or_skip() else {
        return;
    };
    run(async move {
        let databases = TestDatabases::new(admin);
        let nodes = Nodes::start(&databases).await;
        let (a, acme, session) = (&nodes.a, &nodes.acme, nodes.session.id);
        for text in ["one", "two"] {
            post(a, acme, session, text).await;
        }
        assert_eq!(messages(a, acme, session).await, ["one", "two"]);
        let cache = a.session_cache().unwrap_or_else(|| panic!("no cache"));
        let warm = cache.stats();

        post(&nodes.b, acme, session, "three").await;
        assert_eq!(messages(a, acme, session).await, ["one", "two", "three"]);
        let after = cache.stats();
        assert_eq!(
            after.message_hits,
            warm.message_hits + 1,
            "the new message came on top of the entry"
        );
        assert_eq!(after.message_misses, warm.message_misses);

        // The late node's message is older than node A's position: the count tells, and
        // it lists first (server time order).
        post(&nodes.late, acme, session, "late").await;
        let expected = ["late", "one", "two", "three"];
        assert_eq!(messages(a, acme, session).await, expected);
        assert_eq!(messages(a, acme, session).await, expected);
        assert_eq!(messages(&nodes.b, acme, session).await, expected);
        nodes.close().await;
    });
}
