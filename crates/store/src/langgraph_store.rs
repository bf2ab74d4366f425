//! LangGraph's store (the cross-thread memory of `langgraph.store.base.BaseStore` and of the
//! LangGraph Server's `/store` API), kept per tenant: JSON objects by namespace and key, with
//! an optional time to live. Its request types and the rules every backend shares (limits,
//! expiry, the `filter` of a search, which namespaces a listing answers); a backend keeps
//! only its rows.
//!
//! A namespace is stored as its labels joined with `.` (LangGraph's own wire form: no label
//! may hold a `.`), so a namespace prefix is a text prefix.

use serde_json::{Map, Value};
use stepwise_core::Timestamp;

use crate::{Result, StoreError};

/// The most labels in a namespace.
pub const MAX_NAMESPACE_LABELS: usize = 10;
/// The longest label, in characters.
pub const MAX_LABEL_CHARS: usize = 256;
/// The longest key, in characters.
pub const MAX_KEY_CHARS: usize = 1024;
/// The most items or namespaces one search or listing answers.
pub const MAX_STORE_LIMIT: u32 = 1000;
/// The longest time to live, in minutes (ten years).
pub const MAX_TTL_MINUTES: f64 = 10.0 * 365.0 * 24.0 * 60.0;

const MICROS_PER_MINUTE: f64 = 60_000_000.0;

/// One stored item.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreItem {
    pub namespace: Vec<String>,
    pub key: String,
    /// Always a JSON object.
    pub value: Value,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// When the item stops being returned; `None` for an item without a time to live.
    pub expires_at: Option<Timestamp>,
    /// The time to live in microseconds, kept to push `expires_at` on a refreshing read.
    pub ttl_us: Option<i64>,
}

/// A put: the item is created or replaced (its `created_at` kept on a replace).
#[derive(Debug, Clone, PartialEq)]
pub struct StoreItemPut {
    pub namespace: Vec<String>,
    pub key: String,
    /// A JSON object.
    pub value: Value,
    /// Minutes until the item expires; `None` for never.
    pub ttl_minutes: Option<f64>,
}

/// A search of the items under a namespace prefix, newest update first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StoreItemSearch {
    /// Labels the item's namespace starts with; empty for every item of the tenant.
    pub namespace_prefix: Vec<String>,
    /// Conditions on the value's top-level fields (see [`check_filter`]).
    pub filter: Option<Map<String, Value>>,
    pub limit: u32,
    pub offset: u32,
    /// Whether the answered items' time to live starts again.
    pub refresh_ttl: bool,
}

/// A listing of the namespaces that hold items, in order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NamespaceQuery {
    /// Labels the namespace starts with (`*` matches any one label).
    pub prefix: Option<Vec<String>>,
    /// Labels the namespace ends with (`*` matches any one label).
    pub suffix: Option<Vec<String>>,
    /// Namespaces longer than this are cut to their first `max_depth` labels.
    pub max_depth: Option<u32>,
    pub limit: u32,
    pub offset: u32,
}

/// The namespace as stored: its labels joined with `.`.
pub fn namespace_text(namespace: &[String]) -> String {
    namespace.join(".")
}

/// The labels of a stored namespace.
pub fn namespace_labels(text: &str) -> Vec<String> {
    text.split('.').map(str::to_string).collect()
}

/// The text every stored namespace under `prefix` starts with (`""` for every namespace);
/// a namespace equal to the prefix itself is matched by [`namespace_text`].
pub fn namespace_prefix_text(prefix: &[String]) -> String {
    if prefix.is_empty() {
        String::new()
    } else {
        format!("{}.", namespace_text(prefix))
    }
}

/// Checks a namespace: at least one label (unless `may_be_empty`, for a prefix), at most
/// [`MAX_NAMESPACE_LABELS`], each non-empty, without `.`, at most [`MAX_LABEL_CHARS`].
pub fn check_namespace(
    field: &'static str,
    namespace: &[String],
    may_be_empty: bool,
) -> Result<()> {
    if namespace.is_empty() && !may_be_empty {
        return Err(StoreError::invalid(
            field,
            "a namespace needs at least one label",
        ));
    }
    if namespace.len() > MAX_NAMESPACE_LABELS {
        return Err(StoreError::invalid(
            field,
            format!("a namespace has at most {MAX_NAMESPACE_LABELS} labels"),
        ));
    }
    for label in namespace {
        if label.is_empty() {
            return Err(StoreError::invalid(
                field,
                "a namespace label may not be empty",
            ));
        }
        if label.contains('.') {
            return Err(StoreError::invalid(
                field,
                format!("the namespace label {label:?} holds a '.', which separates labels"),
            ));
        }
        if label.chars().count() > MAX_LABEL_CHARS {
            return Err(StoreError::invalid(
                field,
                format!("a namespace label has at most {MAX_LABEL_CHARS} characters"),
            ));
        }
        if label.contains('\0') {
            return Err(StoreError::invalid(
                field,
                "a namespace label may not hold NUL",
            ));
        }
    }
    Ok(())
}

/// Checks a key: 1 to [`MAX_KEY_CHARS`] characters, no NUL.
pub fn check_key(key: &str) -> Result<()> {
    let chars = key.chars().count();
    if chars == 0 || chars > MAX_KEY_CHARS {
        return Err(StoreError::invalid(
            "key",
            format!("a key has 1 to {MAX_KEY_CHARS} characters"),
        ));
    }
    if key.contains('\0') {
        return Err(StoreError::invalid("key", "a key may not hold NUL"));
    }
    Ok(())
}

/// Checks a put and answers its time to live in microseconds.
pub fn check_put(put: &StoreItemPut) -> Result<Option<i64>> {
    check_namespace("namespace", &put.namespace, false)?;
    check_key(&put.key)?;
    if !put.value.is_object() {
        return Err(StoreError::invalid(
            "value",
            "the value must be a JSON object",
        ));
    }
    put.ttl_minutes.map(ttl_micros).transpose()
}

/// A time to live in minutes as microseconds: more than zero, at most [`MAX_TTL_MINUTES`].
pub fn ttl_micros(minutes: f64) -> Result<i64> {
    if !minutes.is_finite() || minutes <= 0.0 || minutes > MAX_TTL_MINUTES {
        return Err(StoreError::invalid(
            "ttl",
            format!("ttl is minutes, more than 0 and at most {MAX_TTL_MINUTES}"),
        ));
    }
    Ok(((minutes * MICROS_PER_MINUTE).round() as i64).max(1))
}

/// When an item with this time to live, written or refreshed at `now`, expires.
pub fn expiry(now: Timestamp, ttl_us: Option<i64>) -> Option<Timestamp> {
    ttl_us.map(|ttl| Timestamp(now.0.saturating_add(ttl)))
}

/// Whether the item is expired at `now`.
pub fn is_expired(expires_at: Option<Timestamp>, now: Timestamp) -> bool {
    expires_at.is_some_and(|at| at.0 <= now.0)
}

fn check_limit(limit: u32) -> Result<()> {
    if limit == 0 || limit > MAX_STORE_LIMIT {
        return Err(StoreError::invalid(
            "limit",
            format!("limit is 1 to {MAX_STORE_LIMIT}"),
        ));
    }
    Ok(())
}

/// Checks a search.
pub fn check_search(search: &StoreItemSearch) -> Result<()> {
    check_namespace("namespace_prefix", &search.namespace_prefix, true)?;
    check_limit(search.limit)?;
    if let Some(filter) = &search.filter {
        check_filter(filter)?;
    }
    Ok(())
}

/// Checks a namespace listing.
pub fn check_namespace_query(query: &NamespaceQuery) -> Result<()> {
    for (field, labels) in [("prefix", &query.prefix), ("suffix", &query.suffix)] {
        if let Some(labels) = labels {
            check_namespace(field, labels, true)?;
        }
    }
    if query.max_depth == Some(0) {
        return Err(StoreError::invalid("max_depth", "max_depth is at least 1"));
    }
    check_limit(query.limit)
}

const OPERATORS: [&str; 6] = ["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"];

/// Checks a search's `filter`: each entry names a top-level field of the value and holds
/// either the value it must equal, or an object of operators (`$eq`, `$ne`, `$gt`, `$gte`,
/// `$lt`, `$lte`), as LangGraph's stores take them.
pub fn check_filter(filter: &Map<String, Value>) -> Result<()> {
    for (field, condition) in filter {
        if let Some(ops) = operators(condition) {
            for op in ops.keys() {
                if !OPERATORS.contains(&op.as_str()) {
                    return Err(StoreError::invalid(
                        "filter",
                        format!(
                            "filter on {field:?}: unknown operator {op:?} (use $eq, $ne, $gt, $gte, $lt or $lte)"
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The operators of a condition: an object whose every key starts with `$`.
fn operators(condition: &Value) -> Option<&Map<String, Value>> {
    condition
        .as_object()
        .filter(|ops| !ops.is_empty() && ops.keys().all(|k| k.starts_with('$')))
}

/// Whether `value` meets every condition of `filter`.
pub fn matches_filter(value: &Value, filter: &Map<String, Value>) -> bool {
    filter.iter().all(|(field, condition)| {
        let actual = value.get(field);
        match operators(condition) {
            Some(ops) => ops
                .iter()
                .all(|(op, expected)| compare(op, actual, expected)),
            None => actual == Some(condition),
        }
    })
}

fn compare(op: &str, actual: Option<&Value>, expected: &Value) -> bool {
    use std::cmp::Ordering;
    let order = || -> Option<Ordering> {
        match (actual?, expected) {
            (Value::Number(a), Value::Number(b)) => a.as_f64()?.partial_cmp(&b.as_f64()?),
            (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
            (Value::Bool(a), Value::Bool(b)) => Some(a.cmp(b)),
            _ => None,
        }
    };
    match op {
        "$eq" => actual == Some(expected),
        "$ne" => actual != Some(expected),
        "$gt" => order() == Some(Ordering::Greater),
        "$gte" => matches!(order(), Some(Ordering::Greater | Ordering::Equal)),
        "$lt" => order() == Some(Ordering::Less),
        "$lte" => matches!(order(), Some(Ordering::Less | Ordering::Equal)),
        _ => false,
    }
}

/// A search's page of the tenant's live items under its prefix (`items` as loaded): the
/// filter applied, newest update first (then by namespace and key), `offset` skipped and
/// at most `limit` kept.
pub fn search_page(mut items: Vec<StoreItem>, search: &StoreItemSearch) -> Vec<StoreItem> {
    if let Some(filter) = &search.filter {
        items.retain(|item| matches_filter(&item.value, filter));
    }
    items.sort_by(|a, b| {
        b.updated_at
            .cmp(&a.updated_at)
            .then_with(|| a.namespace.cmp(&b.namespace))
            .then_with(|| a.key.cmp(&b.key))
    });
    items
        .into_iter()
        .skip(search.offset as usize)
        .take(search.limit as usize)
        .collect()
}

fn labels_match(labels: &[String], pattern: &[String]) -> bool {
    labels.len() >= pattern.len()
        && labels
            .iter()
            .zip(pattern)
            .all(|(label, want)| want == "*" || label == want)
}

/// A listing's page of the tenant's namespaces that hold live items (`namespaces` as
/// stored, in any order, repeats allowed): those matching the prefix and suffix, cut to
/// `max_depth`, without repeats, in order, `offset` skipped and at most `limit` kept.
pub fn namespace_page(namespaces: Vec<String>, query: &NamespaceQuery) -> Vec<Vec<String>> {
    let mut found: Vec<Vec<String>> = namespaces
        .iter()
        .map(|text| namespace_labels(text))
        .filter(|labels| {
            query
                .prefix
                .as_deref()
                .is_none_or(|prefix| labels_match(labels, prefix))
        })
        .filter(|labels| {
            query.suffix.as_deref().is_none_or(|suffix| {
                let reversed: Vec<String> = labels.iter().rev().cloned().collect();
                let suffix: Vec<String> = suffix.iter().rev().cloned().collect();
                labels_match(&reversed, &suffix)
            })
        })
        .map(|mut labels| {
            if let Some(depth) = query.max_depth {
                labels.truncate(depth as usize);
            }
            labels
        })
        .collect();
    found.sort();
    found.dedup();
    found
        .into_iter()
        .skip(query.offset as usize)
        .take(query.limit as usize)
        .collect()
}

/// What a backend without a LangGraph store answers.
pub fn unsupported() -> StoreError {
    StoreError::InvalidState(
        "this backend keeps no LangGraph store: run the server on SQLite or PostgreSQL".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn filter(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    #[test]
    fn filters_by_equality_and_operators() {
        let value = json!({"kind": "note", "score": 5, "tags": ["a"]});
        assert!(matches_filter(&value, &filter(json!({"kind": "note"}))));
        assert!(!matches_filter(&value, &filter(json!({"kind": "todo"}))));
        assert!(matches_filter(&value, &filter(json!({"tags": ["a"]}))));
        assert!(matches_filter(
            &value,
            &filter(json!({"score": {"$gt": 4, "$lte": 5}}))
        ));
        assert!(!matches_filter(
            &value,
            &filter(json!({"score": {"$lt": 5}}))
        ));
        assert!(matches_filter(
            &value,
            &filter(json!({"missing": {"$ne": 1}}))
        ));
        assert!(!matches_filter(
            &value,
            &filter(json!({"missing": {"$gte": 1}}))
        ));
        assert!(check_filter(&filter(json!({"score": {"$regex": "x"}}))).is_err());
    }

    #[test]
    fn lists_namespaces_with_wildcards_and_depth() {
        let stored = vec![
            "a.b.c".to_string(),
            "a.x.c".into(),
            "z".into(),
            "a.b.c".into(),
        ];
        let all = NamespaceQuery {
            limit: 10,
            ..Default::default()
        };
        assert_eq!(namespace_page(stored.clone(), &all).len(), 3);
        let query = NamespaceQuery {
            prefix: Some(vec!["a".into(), "*".into()]),
            suffix: Some(vec!["c".into()]),
            max_depth: Some(2),
            limit: 10,
            offset: 0,
        };
        assert_eq!(
            namespace_page(stored, &query),
            vec![
                vec!["a".to_string(), "b".into()],
                vec!["a".into(), "x".into()]
            ]
        );
    }

    #[test]
    fn checks_labels_and_ttl() {
        assert!(check_namespace("namespace", &["a.b".into()], false).is_err());
        assert!(check_namespace("namespace", &[], false).is_err());
        assert!(check_namespace("namespace", &[], true).is_ok());
        assert!(check_namespace("namespace", &["".into()], false).is_err());
        assert_eq!(ttl_micros(1.0), Ok(60_000_000));
        assert!(ttl_micros(0.0).is_err());
        assert!(check_key("").is_err());
    }
}
