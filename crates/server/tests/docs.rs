//! The HTTP API reference (`docs/api.md`) and the served OpenAPI document agree: every
//! endpoint a table of the reference names is an operation of `/openapi.json`, and every
//! operation of the document is in the reference. A new endpoint that is not documented, or
//! a documented one that was removed or renamed, fails here.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;

const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

fn reference() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/api.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path:?}: {e}"))
}

/// `METHOD /path` of every table row whose first cell is one endpoint in backticks.
fn documented(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let Some(cell) = line.strip_prefix("| `") else {
            continue;
        };
        let Some((endpoint, _)) = cell.split_once('`') else {
            continue;
        };
        let Some((method, path)) = endpoint.split_once(' ') else {
            continue;
        };
        if METHODS.contains(&method) && path.starts_with('/') {
            found.insert(format!("{method} {path}"));
        }
    }
    found
}

/// `METHOD /path` of every operation in the OpenAPI document.
fn operations(doc: &Value) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let paths = doc["paths"].as_object().expect("the document has paths");
    for (path, item) in paths {
        let item = item.as_object().expect("a path item is an object");
        for method in item.keys() {
            let upper = method.to_ascii_uppercase();
            if METHODS.contains(&upper.as_str()) {
                found.insert(format!("{upper} {path}"));
            }
        }
    }
    found
}

#[test]
fn the_reference_and_the_openapi_document_list_the_same_endpoints() {
    let doc: Value = serde_json::from_str(&stepwise_protocols::openapi_json()).expect("valid JSON");
    let in_doc = operations(&doc);
    let in_reference = documented(&reference());

    let undocumented: Vec<_> = in_doc.difference(&in_reference).collect();
    let missing: Vec<_> = in_reference.difference(&in_doc).collect();
    assert!(
        undocumented.is_empty(),
        "in /openapi.json but not in docs/api.md: {undocumented:?}"
    );
    assert!(
        missing.is_empty(),
        "in docs/api.md but not in /openapi.json: {missing:?}"
    );
    assert!(
        in_doc.len() > 30,
        "expected the whole API, found {} operations",
        in_doc.len()
    );
}

#[test]
fn the_reference_names_every_event_type() {
    let doc: Value = serde_json::from_str(&stepwise_protocols::openapi_json()).expect("valid JSON");
    let types = doc["components"]["schemas"]["EventType"]["enum"]
        .as_array()
        .expect("EventType is an enum of strings");
    let text = reference();
    for event_type in types {
        let name = event_type.as_str().expect("a string");
        assert!(
            text.contains(&format!("`{name}`")),
            "docs/api.md does not name the event type {name}"
        );
    }
}

#[test]
fn the_table_parser_reads_endpoints_and_ignores_other_rows() {
    let text = "| `GET /v1/x/{id}` | | 200 |\n| `stepwise serve` | runs |\n| method | body |\n";
    let found = documented(text);
    assert_eq!(found, BTreeSet::from(["GET /v1/x/{id}".to_string()]));
}
