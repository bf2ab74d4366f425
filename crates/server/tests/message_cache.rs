//! `GET /v1/sessions/{id}/messages` through the hot-session cache: pages followed by
//! cursor, role filters and `after` answer what the database holds as the session grows,
//! and the listings after the first are counted as cache hits in `/metrics`.

mod common;

use serde_json::Value;
use stepwise_core::parse_id;
use stepwise_store::{MessageQuery, Tenant};

use common::{TestServer, metric, metrics_text};
use stepwise_store::prelude::*;

/// Every message of the session, two at a time by `next_cursor`, with `query` added.
async fn paged(server: &TestServer, session: &str, query: &str) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/sessions/{session}/messages?limit=2{query}");
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={cursor}"));
        }
        let (status, body) = server.get(&path).await;
        assert_eq!(status, 200, "{body}");
        items.extend(body["items"].as_array().cloned().unwrap_or_default());
        match body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => return items,
        }
    }
}

/// The session's messages as the store itself lists them (no cache), in the API's JSON.
async fn stored(server: &TestServer, session: &str) -> Vec<Value> {
    let tenant = Tenant::new("local").expect("tenant");
    let id = parse_id(session).expect("a session id");
    let messages = server
        .store
        .list_messages(&tenant, id, MessageQuery::default())
        .await
        .expect("list_messages");
    messages
        .iter()
        .map(|m| serde_json::to_value(m).expect("json"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_pages_from_the_cache_follow_the_session_as_it_grows() {
    let server = TestServer::start().await;
    let (session, execution) = server.message("steps: 2").await;
    server.wait_status(&execution, &["completed"]).await;

    let first = paged(&server, &session, "").await;
    assert_eq!(first, stored(&server, &session).await);
    assert!(
        first.len() >= 3,
        "the question, the steps' notes and the answer"
    );

    let more = server.message_to(&session, "steps: 1").await;
    let next = more["execution"]["id"].as_str().expect("execution id");
    server.wait_status(next, &["completed"]).await;
    let all = paged(&server, &session, "").await;
    assert_eq!(all, stored(&server, &session).await);
    assert!(
        all.len() > first.len(),
        "the new turn's messages are listed"
    );
    assert_eq!(
        all[..first.len()],
        first[..],
        "earlier messages stay in place"
    );

    // A role filter and an `after` inside the session, against the full list.
    let users: Vec<Value> = all
        .iter()
        .filter(|m| m["role"] == "user")
        .cloned()
        .collect();
    assert_eq!(paged(&server, &session, "&roles=user").await, users);
    let after = first.last().expect("a message")["id"].as_str().expect("id");
    assert_eq!(
        paged(&server, &session, &format!("&after={after}")).await,
        all[first.len()..]
    );

    let metrics = metrics_text(&server.client, &server.base).await;
    assert!(
        metric(&metrics, "stepwise_session_cache_message_hits_total") > 0.0,
        "pages after the first are answered from the cache"
    );
    server.stop().await;
}
