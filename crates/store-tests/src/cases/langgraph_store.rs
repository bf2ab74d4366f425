//! LangGraph's store: put, get, overwrite, delete, search (prefix, filter, paging),
//! namespaces, time to live, tenants kept apart.

use serde_json::{Value, json};
use stepwise_store::{NamespaceQuery, StoreError, StoreItemPut, StoreItemSearch};

use crate::Harness;
use crate::support::*;
use stepwise_store::prelude::*;

fn ns(labels: &[&str]) -> Vec<String> {
    labels.iter().map(|l| l.to_string()).collect()
}

fn put(namespace: &[&str], key: &str, value: Value, ttl_minutes: Option<f64>) -> StoreItemPut {
    StoreItemPut {
        namespace: ns(namespace),
        key: key.into(),
        value,
        ttl_minutes,
    }
}

fn search(prefix: &[&str], limit: u32, offset: u32) -> StoreItemSearch {
    StoreItemSearch {
        namespace_prefix: ns(prefix),
        filter: None,
        limit,
        offset,
        refresh_ttl: true,
    }
}

fn keys(items: &[stepwise_store::StoreItem]) -> Vec<&str> {
    items.iter().map(|i| i.key.as_str()).collect()
}

/// Put, get, overwrite (created_at kept), delete; bad input is `Invalid`.
pub async fn langgraph_store_items<H: Harness>(harness: &H) {
    let (store, clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let users = ["users", "u1"];
    assert_eq!(
        ok(
            store.get_store_item(&acme, &ns(&users), "a", true).await,
            "get missing"
        ),
        None
    );
    ok(
        store
            .put_store_item(&acme, put(&users, "a", json!({"n": 1}), None))
            .await,
        "put",
    );
    let first = some(
        store.get_store_item(&acme, &ns(&users), "a", true).await,
        "get",
    );
    assert_eq!(first.namespace, ns(&users));
    assert_eq!(first.key, "a");
    assert_eq!(first.value, json!({"n": 1}));
    assert_eq!(first.created_at, first.updated_at);
    assert_eq!(first.expires_at, None);

    clock.advance_secs(5);
    ok(
        store
            .put_store_item(&acme, put(&users, "a", json!({"n": 2}), None))
            .await,
        "overwrite",
    );
    let second = some(
        store.get_store_item(&acme, &ns(&users), "a", false).await,
        "get",
    );
    assert_eq!(second.value, json!({"n": 2}));
    assert_eq!(
        second.created_at, first.created_at,
        "a replace keeps created_at"
    );
    assert!(second.updated_at > first.updated_at);
    assert_eq!(
        ok(
            store
                .get_store_item(&acme, &ns(&["users"]), "a", true)
                .await,
            "parent"
        ),
        None,
        "a namespace is matched whole by a get"
    );

    assert!(ok(
        store.delete_store_item(&acme, &ns(&users), "a").await,
        "delete"
    ));
    assert!(!ok(
        store.delete_store_item(&acme, &ns(&users), "a").await,
        "delete again"
    ));
    assert_eq!(
        ok(
            store.get_store_item(&acme, &ns(&users), "a", true).await,
            "get deleted"
        ),
        None
    );

    for (bad, field) in [
        (put(&["a.b"], "k", json!({}), None), "namespace"),
        (put(&[], "k", json!({}), None), "namespace"),
        (put(&[""], "k", json!({}), None), "namespace"),
        (put(&["a"], "", json!({}), None), "key"),
        (put(&["a"], "k", json!([1]), None), "value"),
        (put(&["a"], "k", json!({}), Some(0.0)), "ttl"),
    ] {
        match store.put_store_item(&acme, bad.clone()).await {
            Err(StoreError::Invalid { field: f, .. }) => assert_eq!(f, Some(field), "{bad:?}"),
            other => panic!("{bad:?} should be invalid, got {other:?}"),
        }
    }
}

/// Search: the prefix, the filter with operators, newest update first, paging.
pub async fn langgraph_store_search<H: Harness>(harness: &H) {
    let (store, clock) = manual_store(harness).await;
    let acme = tenant("acme");
    for (namespace, key, score) in [
        (&["docs", "a"][..], "k1", 1),
        (&["docs", "a"][..], "k2", 2),
        (&["docs", "b", "deep"][..], "k3", 3),
        (&["docsx"][..], "k4", 4),
        (&["docs"][..], "k5", 5),
    ] {
        clock.advance_secs(1);
        ok(
            store
                .put_store_item(
                    &acme,
                    put(namespace, key, json!({"score": score, "kind": if score % 2 == 0 { "even" } else { "odd" }}), None),
                )
                .await,
            "put",
        );
    }
    let all = ok(
        store.search_store_items(&acme, search(&[], 100, 0)).await,
        "all",
    );
    assert_eq!(
        keys(&all),
        ["k5", "k4", "k3", "k2", "k1"],
        "newest update first"
    );
    let docs = ok(
        store
            .search_store_items(&acme, search(&["docs"], 100, 0))
            .await,
        "docs",
    );
    assert_eq!(
        keys(&docs),
        ["k5", "k3", "k2", "k1"],
        "a prefix is whole labels"
    );
    let page = ok(
        store
            .search_store_items(&acme, search(&["docs"], 2, 1))
            .await,
        "page",
    );
    assert_eq!(keys(&page), ["k3", "k2"]);
    let a = ok(
        store
            .search_store_items(&acme, search(&["docs", "a"], 100, 0))
            .await,
        "docs.a",
    );
    assert_eq!(keys(&a), ["k2", "k1"]);

    let filtered = |filter: Value| {
        let mut s = search(&[], 100, 0);
        s.filter = filter.as_object().cloned();
        s
    };
    let odd = ok(
        store
            .search_store_items(&acme, filtered(json!({"kind": "odd"})))
            .await,
        "odd",
    );
    assert_eq!(keys(&odd), ["k5", "k3", "k1"]);
    let ranged = ok(
        store
            .search_store_items(&acme, filtered(json!({"score": {"$gte": 2, "$lt": 5}})))
            .await,
        "range",
    );
    assert_eq!(keys(&ranged), ["k4", "k3", "k2"]);
    let ne = ok(
        store
            .search_store_items(
                &acme,
                filtered(json!({"kind": {"$ne": "odd"}, "score": {"$gt": 2}})),
            )
            .await,
        "ne",
    );
    assert_eq!(keys(&ne), ["k4"]);
    assert!(matches!(
        store
            .search_store_items(&acme, filtered(json!({"kind": {"$like": "o"}})))
            .await,
        Err(StoreError::Invalid { .. })
    ));
    assert!(matches!(
        store.search_store_items(&acme, search(&[], 0, 0)).await,
        Err(StoreError::Invalid { .. })
    ));

    let list = |query: NamespaceQuery| store.list_store_namespaces(&acme, query);
    let everything = NamespaceQuery {
        limit: 100,
        ..Default::default()
    };
    assert_eq!(
        ok(list(everything.clone()).await, "namespaces"),
        vec![
            ns(&["docs"]),
            ns(&["docs", "a"]),
            ns(&["docs", "b", "deep"]),
            ns(&["docsx"])
        ]
    );
    assert_eq!(
        ok(
            list(NamespaceQuery {
                prefix: Some(ns(&["docs"])),
                max_depth: Some(2),
                ..everything.clone()
            })
            .await,
            "prefix and depth"
        ),
        vec![ns(&["docs"]), ns(&["docs", "a"]), ns(&["docs", "b"])]
    );
    assert_eq!(
        ok(
            list(NamespaceQuery {
                suffix: Some(ns(&["deep"])),
                ..everything.clone()
            })
            .await,
            "suffix"
        ),
        vec![ns(&["docs", "b", "deep"])]
    );
    assert_eq!(
        ok(
            list(NamespaceQuery {
                limit: 2,
                offset: 1,
                ..everything
            })
            .await,
            "paged"
        ),
        vec![ns(&["docs", "a"]), ns(&["docs", "b", "deep"])]
    );
}

/// A time to live in minutes: an expired item is not answered anywhere; a refreshing read
/// starts it again, a read without refresh does not.
pub async fn langgraph_store_ttl<H: Harness>(harness: &H) {
    let (store, clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let here = ["mem"];
    ok(
        store
            .put_store_item(&acme, put(&here, "short", json!({"v": 1}), Some(1.0)))
            .await,
        "put with ttl",
    );
    ok(
        store
            .put_store_item(&acme, put(&here, "forever", json!({"v": 2}), None))
            .await,
        "put",
    );
    let item = some(
        store
            .get_store_item(&acme, &ns(&here), "short", false)
            .await,
        "get",
    );
    assert_eq!(
        item.expires_at.map(|t| t.0 - item.updated_at.0),
        Some(60_000_000)
    );

    clock.advance_secs(50);
    some(
        store.get_store_item(&acme, &ns(&here), "short", true).await,
        "refreshing get",
    );
    clock.advance_secs(50);
    // 100 s after the put, 50 s after the refresh: still there.
    some(
        store
            .get_store_item(&acme, &ns(&here), "short", false)
            .await,
        "after refresh",
    );
    clock.advance_secs(20);
    // 70 s after the refresh, and the read above did not refresh.
    assert_eq!(
        ok(
            store.get_store_item(&acme, &ns(&here), "short", true).await,
            "expired"
        ),
        None
    );
    let left = ok(
        store.search_store_items(&acme, search(&[], 10, 0)).await,
        "search",
    );
    assert_eq!(keys(&left), ["forever"]);
    let namespaces = ok(
        store
            .list_store_namespaces(
                &acme,
                NamespaceQuery {
                    limit: 10,
                    ..Default::default()
                },
            )
            .await,
        "namespaces",
    );
    assert_eq!(namespaces, vec![ns(&here)]);

    // An expired item put again is a new item.
    ok(
        store
            .put_store_item(&acme, put(&["gone"], "x", json!({}), Some(0.5)))
            .await,
        "put",
    );
    clock.advance_secs(31);
    let namespaces = ok(
        store
            .list_store_namespaces(
                &acme,
                NamespaceQuery {
                    limit: 10,
                    ..Default::default()
                },
            )
            .await,
        "namespaces",
    );
    assert_eq!(
        namespaces,
        vec![ns(&here)],
        "an expired item's namespace is gone"
    );
    ok(
        store
            .put_store_item(&acme, put(&["gone"], "x", json!({"again": true}), None))
            .await,
        "put again",
    );
    let again = some(
        store.get_store_item(&acme, &ns(&["gone"]), "x", true).await,
        "get",
    );
    assert_eq!(
        again.created_at, again.updated_at,
        "the expired row was not kept"
    );
    assert_eq!(again.expires_at, None);
}

/// Another tenant's items are invisible and untouchable.
pub async fn langgraph_store_isolation<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let globex = tenant("globex");
    ok(
        store
            .put_store_item(&acme, put(&["shared"], "k", json!({"who": "acme"}), None))
            .await,
        "put",
    );
    assert_eq!(
        ok(
            store
                .get_store_item(&globex, &ns(&["shared"]), "k", true)
                .await,
            "get"
        ),
        None
    );
    assert!(
        ok(
            store.search_store_items(&globex, search(&[], 10, 0)).await,
            "search"
        )
        .is_empty()
    );
    assert!(
        ok(
            store
                .list_store_namespaces(
                    &globex,
                    NamespaceQuery {
                        limit: 10,
                        ..Default::default()
                    }
                )
                .await,
            "namespaces"
        )
        .is_empty()
    );
    assert!(!ok(
        store
            .delete_store_item(&globex, &ns(&["shared"]), "k")
            .await,
        "delete"
    ));
    ok(
        store
            .put_store_item(
                &globex,
                put(&["shared"], "k", json!({"who": "globex"}), None),
            )
            .await,
        "put same key",
    );
    let mine = some(
        store
            .get_store_item(&acme, &ns(&["shared"]), "k", true)
            .await,
        "get",
    );
    assert_eq!(mine.value, json!({"who": "acme"}));
}
