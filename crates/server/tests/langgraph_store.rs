//! LangGraph's store at `/langgraph/store/...` over real HTTP, as `langgraph-sdk` calls it:
//! the SDK's `x-api-key`, its bodies and answers, and the roles (a `user` is refused, its
//! tenant's admin and workers reach the tenant's store).

mod common;

use common::{TestServer, assert_error};
use serde_json::{Value, json};
use stepwise_store::AccessRole;

async fn key(server: &TestServer, tenant: &str, user: &str, role: AccessRole) -> String {
    server.api_key(tenant, user, role).await
}

/// A call with the SDK's header: (status, body, or `Value::Null` when empty).
async fn call(
    server: &TestServer,
    api_key: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let request = server
        .client
        .request(method, server.url(path))
        .header("x-api-key", api_key);
    let request = match body {
        Some(body) => request.json(&body),
        None => request,
    };
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdks_calls_put_get_search_list_and_delete() {
    let server = TestServer::start().await;
    let admin = key(&server, "acme", "boss", AccessRole::Admin).await;

    let (status, body) = call(
        &server,
        &admin,
        "PUT",
        "/langgraph/store/items",
        Some(json!({"namespace": ["users", "u1"], "key": "prefs", "value": {"theme": "dark", "size": 3}, "ttl": 60})),
    )
    .await;
    assert_eq!(status, 204, "{body}");
    for (key, size) in [("a", 1), ("b", 5)] {
        let (status, _) = call(
            &server,
            &admin,
            "PUT",
            "/langgraph/store/items",
            Some(json!({"namespace": ["users", "u2"], "key": key, "value": {"size": size}, "index": false})),
        )
        .await;
        assert_eq!(status, 204);
    }

    let (status, item) = call(
        &server,
        &admin,
        "GET",
        "/langgraph/store/items?namespace=users.u1&key=prefs&refresh_ttl=true",
        None,
    )
    .await;
    assert_eq!(status, 200, "{item}");
    assert_eq!(item["namespace"], json!(["users", "u1"]));
    assert_eq!(item["key"], "prefs");
    assert_eq!(item["value"], json!({"theme": "dark", "size": 3}));
    assert!(
        item["created_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    assert!(item["updated_at"].is_string());

    let (status, missing) = call(
        &server,
        &admin,
        "GET",
        "/langgraph/store/items?namespace=users.u1&key=nope",
        None,
    )
    .await;
    assert_eq!(
        (status, missing),
        (200, Value::Null),
        "a missing item is null"
    );

    let (status, found) = call(
        &server,
        &admin,
        "POST",
        "/langgraph/store/items/search",
        Some(json!({"namespace_prefix": ["users"], "filter": {"size": {"$gte": 3}}, "limit": 10, "offset": 0})),
    )
    .await;
    assert_eq!(status, 200, "{found}");
    let keys: Vec<&str> = found["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["key"].as_str().expect("key"))
        .collect();
    assert_eq!(keys, ["b", "prefs"]);
    assert!(
        found["items"][0].get("score").is_some(),
        "a search item has a score"
    );
    let (_, paged) = call(
        &server,
        &admin,
        "POST",
        "/langgraph/store/items/search",
        Some(json!({"namespace_prefix": ["users"], "limit": 1, "offset": 1})),
    )
    .await;
    assert_eq!(paged["items"].as_array().map(Vec::len), Some(1));

    let (status, namespaces) = call(
        &server,
        &admin,
        "POST",
        "/langgraph/store/namespaces",
        Some(json!({"prefix": ["users"], "max_depth": 2, "limit": 100, "offset": 0})),
    )
    .await;
    assert_eq!(status, 200, "{namespaces}");
    assert_eq!(
        namespaces,
        json!({"namespaces": [["users", "u1"], ["users", "u2"]]})
    );

    let (status, _) = call(
        &server,
        &admin,
        "DELETE",
        "/langgraph/store/items",
        Some(json!({"namespace": ["users", "u1"], "key": "prefs"})),
    )
    .await;
    assert_eq!(status, 204);
    let (_, gone) = call(
        &server,
        &admin,
        "GET",
        "/langgraph/store/items?namespace=users.u1&key=prefs",
        None,
    )
    .await;
    assert_eq!(gone, Value::Null);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_4xx_in_the_error_shape() {
    let server = TestServer::start().await;
    let admin = key(&server, "acme", "boss", AccessRole::Admin).await;
    let cases = [
        (
            "PUT",
            "/langgraph/store/items",
            json!({"namespace": ["a.b"], "key": "k", "value": {}}),
            "namespace",
        ),
        (
            "PUT",
            "/langgraph/store/items",
            json!({"namespace": ["a"], "key": "", "value": {}}),
            "key",
        ),
        (
            "PUT",
            "/langgraph/store/items",
            json!({"namespace": ["a"], "key": "k", "value": [1]}),
            "value",
        ),
        (
            "PUT",
            "/langgraph/store/items",
            json!({"namespace": ["a"], "key": "k", "value": {}, "ttl": -1}),
            "ttl",
        ),
        (
            "POST",
            "/langgraph/store/items/search",
            json!({"namespace_prefix": ["a"], "query": "what did I like?"}),
            "query",
        ),
        (
            "POST",
            "/langgraph/store/items/search",
            json!({"namespace_prefix": ["a"], "limit": 5000}),
            "limit",
        ),
        (
            "POST",
            "/langgraph/store/items/search",
            json!({"filter": {"n": {"$regex": "x"}}}),
            "filter",
        ),
        (
            "POST",
            "/langgraph/store/namespaces",
            json!({"max_depth": 0}),
            "max_depth",
        ),
    ];
    for (method, path, body, field) in cases {
        let (status, answer) = call(&server, &admin, method, path, Some(body.clone())).await;
        assert_error(status, &answer, 400, "invalid_request", &format!("{body}"));
        assert_eq!(answer["error"]["field"], field, "{body}: {answer}");
    }
    let (status, answer) = call(
        &server,
        &admin,
        "GET",
        "/langgraph/store/items?namespace=a",
        None,
    )
    .await;
    assert_error(status, &answer, 400, "invalid_request", "no key");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_is_forbidden_and_the_store_is_the_tenants() {
    let server = TestServer::start().await;
    let admin = key(&server, "acme", "boss", AccessRole::Admin).await;
    let worker = key(&server, "acme", "bot", AccessRole::Worker).await;
    let user = key(&server, "acme", "alice", AccessRole::User).await;
    let other = key(&server, "globex", "boss", AccessRole::Admin).await;
    // An end-user token minted by the deployment, sent as the SDK sends its key.
    let response = server
        .client
        .post(server.url("/v1/tokens"))
        .bearer_auth(&admin)
        .json(&json!({"user_id": "bob", "ttl_s": 600}))
        .send()
        .await
        .expect("mint");
    let (status, minted) = common::read(response).await;
    assert_eq!(status, 201, "{minted}");
    let token = minted["token"].as_str().expect("token").to_string();
    let put = json!({"namespace": ["mem"], "key": "k", "value": {"n": 1}});
    let calls = [
        ("PUT", "/langgraph/store/items", Some(put.clone()), 204),
        (
            "GET",
            "/langgraph/store/items?namespace=mem&key=k",
            None,
            200,
        ),
        (
            "POST",
            "/langgraph/store/items/search",
            Some(json!({"namespace_prefix": ["mem"]})),
            200,
        ),
        ("POST", "/langgraph/store/namespaces", Some(json!({})), 200),
        (
            "DELETE",
            "/langgraph/store/items",
            Some(json!({"namespace": ["mem"], "key": "other"})),
            204,
        ),
    ];
    for (method, path, body, ok) in calls {
        for end_user in [&user, &token] {
            let (status, answer) = call(&server, end_user, method, path, body.clone()).await;
            assert_error(
                status,
                &answer,
                403,
                "forbidden",
                &format!("user {method} {path}"),
            );
        }
        let (status, answer) = call(&server, &admin, method, path, body.clone()).await;
        assert_eq!(status, ok, "admin {method} {path}: {answer}");
        let (status, answer) = call(&server, &worker, method, path, body).await;
        assert_eq!(status, ok, "worker {method} {path}: {answer}");
    }
    // The worker sees what the admin put: one store per tenant.
    let (_, item) = call(
        &server,
        &worker,
        "GET",
        "/langgraph/store/items?namespace=mem&key=k",
        None,
    )
    .await;
    assert_eq!(item["value"], json!({"n": 1}));
    // Another tenant does not.
    let (status, item) = call(
        &server,
        &other,
        "GET",
        "/langgraph/store/items?namespace=mem&key=k",
        None,
    )
    .await;
    assert_eq!((status, item), (200, Value::Null));
    // Authorization: Bearer works too; no credential at all is 401 once keys exist.
    let response = server
        .client
        .get(server.url("/langgraph/store/items?namespace=mem&key=k"))
        .bearer_auth(&admin)
        .send()
        .await
        .expect("request");
    assert_eq!(response.status().as_u16(), 200);
    let response = server
        .client
        .get(server.url("/langgraph/store/items?namespace=mem&key=k"))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status().as_u16(), 401);
    server.stop().await;
}
