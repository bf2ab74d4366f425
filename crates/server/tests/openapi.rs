//! The OpenAPI document and the router agree: every route the router answers has an
//! operation in `/openapi.json`, and every operation is a route (a method the router does
//! not have answers 405, a path it does not have 404 `no such endpoint`). Also: the
//! constraints a fuzzer relies on are on every operation that takes the parameter.

mod common;

use std::collections::BTreeSet;

use common::TestServer;
use serde_json::Value;

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// The paths of the router's `.route("...")` lines (the `/v1` ones get their prefix), with
/// those the front-end protocols mount in `/v1` (`stepwise_protocols::mounts`).
fn router_paths() -> BTreeSet<String> {
    let source = include_str!("../src/lib.rs");
    let (api, rest) = source
        .split_once("Router::new().nest(\"/v1\"")
        .unwrap_or((source, ""));
    let protocols = include_str!("../../protocols/src/lib.rs");
    let mounted = protocols
        .split_once("v1: |router|")
        .and_then(|(_, after)| after.split_once("nested:"))
        .map_or("", |(v1, _)| v1);
    let paths_of = |text: &str, prefix: &str| -> Vec<String> {
        text.split(".route(")
            .skip(1)
            .filter_map(|after| {
                let after = after.trim_start();
                let quoted = after.strip_prefix('"')?;
                let path = &quoted[..quoted.find('"')?];
                Some(format!("{prefix}{path}"))
            })
            .collect()
    };
    // The router of `app` only (the metrics listener's `/metrics` is the same route).
    let rest = rest.split("pub fn metrics_app").next().unwrap_or(rest);
    let api = api.rsplit("pub fn app<").next().unwrap_or(api);
    paths_of(api, "/v1")
        .into_iter()
        .chain(paths_of(mounted, "/v1"))
        .chain(paths_of(rest, ""))
        .collect()
}

/// A concrete URL path for a path template.
fn concrete(path: &str) -> String {
    path.replace("{id}", "0190b8c8-3e1c-7a42-9d6e-4c2b1f0a9e77")
        .replace("{thread_id}", "thread-x")
        .replace("{checkpoint_id}", "checkpoint-x")
}

/// Whether the router has `method` on `path`: anything but 405 and its 404 fallback.
async fn routed(server: &TestServer, method: &str, path: &str) -> bool {
    let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes())
        .unwrap_or_else(|e| panic!("{e}"));
    let request = server
        .client
        .request(method, server.url(&concrete(path)))
        .header("content-type", "application/json")
        .body("{}");
    let (status, body) = server.send(request).await;
    let fallback = status == 404 && body["error"]["message"] == "no such endpoint";
    status != 405 && !fallback
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_has_an_operation_and_every_operation_a_route() {
    let server = TestServer::start().await;
    let (status, doc) = server.get("/openapi.json").await;
    assert_eq!(status, 200);
    let documented = doc["paths"].as_object().cloned().unwrap_or_default();
    let routes = router_paths();
    assert!(routes.contains("/v1/sessions"), "{routes:?}");
    assert!(routes.contains("/openapi.json"), "{routes:?}");

    let mut all: BTreeSet<String> = documented.keys().cloned().collect();
    all.extend(routes.iter().cloned());
    let mut mismatches = Vec::new();
    for path in &all {
        for method in METHODS {
            let in_doc = documented
                .get(path)
                .is_some_and(|item| item.get(method).is_some());
            let in_router = routed(&server, method, path).await;
            if in_doc != in_router {
                mismatches.push(format!(
                    "{} {path}: router {in_router}, document {in_doc}",
                    method.to_uppercase()
                ));
            }
        }
    }
    assert!(mismatches.is_empty(), "{mismatches:#?}");
    server.stop().await;
}

/// Each operation's parameters, as (operation, parameter object).
fn parameters(doc: &Value) -> Vec<(String, Value)> {
    let mut found = Vec::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for method in METHODS {
            for parameter in item[method]["parameters"].as_array().into_iter().flatten() {
                found.push((format!("{method} {path}"), parameter.clone()));
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_pages_and_cursors_are_constrained_on_every_operation() {
    let server = TestServer::start().await;
    let (_, doc) = server.get("/openapi.json").await;
    let parameters = parameters(&doc);
    assert!(!parameters.is_empty());
    for (operation, parameter) in parameters {
        let schema = &parameter["schema"];
        match (parameter["in"].as_str(), parameter["name"].as_str()) {
            (Some("path"), Some("id")) => {
                assert_eq!(schema["format"], "uuid", "{operation}: {parameter}");
                assert!(schema["pattern"].is_string(), "{operation}: {parameter}");
            }
            (Some("query"), Some("limit")) => {
                assert!(schema["maximum"].is_u64(), "{operation}: {parameter}");
                assert!(schema["minimum"].is_u64(), "{operation}: {parameter}");
            }
            (Some("query"), Some("cursor")) => {
                assert!(schema["pattern"].is_string(), "{operation}: {parameter}");
            }
            _ => {}
        }
    }
    // Every `/v1` operation says it can answer 401 and 429 (with `Retry-After`).
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for method in METHODS {
            let operation = &item[method];
            if operation.is_null() {
                continue;
            }
            if path.starts_with("/v1/") {
                let responses = &operation["responses"];
                assert!(responses["401"].is_object(), "{method} {path}");
                assert_eq!(
                    responses["429"]["headers"]["Retry-After"]["required"], true,
                    "{method} {path}"
                );
            } else {
                assert_eq!(
                    operation["security"],
                    serde_json::json!([]),
                    "{method} {path}"
                );
            }
        }
    }
    server.stop().await;
}
