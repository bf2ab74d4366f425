//! The `checkpoint.created` event a put stores with its checkpoint.

// The cases share the helpers of `checkpoints.rs` (puts, typed values, listings).
use super::*;
use stepwise_core::{EventType, Id};
use stepwise_store::StoreError;

async fn announced<S: Store>(store: &S, t: &Tenant, session: Id) -> Vec<(i64, String)> {
    ok(store.list_events(t, session, 0, 100).await, "list_events")
        .into_iter()
        .map(|e| (e.id, e.content))
        .collect()
}

/// A put that announces its checkpoint stores the event in its own transaction: one event
/// per stored checkpoint (none for the same put again, none for a refused one), published
/// to subscribers as stored, numbered after the events queued before the put.
pub async fn checkpoint_events<H: Harness>(harness: &H) {
    let (store, _) = manual_store(harness).await;
    let t = tenant("t1");

    let mut c1 = checkpoint("th", "", "001", None);
    c1.metadata = json!({"source": "input", "step": -1});
    let first = ok(
        checkpoints(&store).put_checkpoint(&t, c1.clone()).await,
        "put 1",
    );
    let session = first.session_id;
    let events = ok(store.list_events(&t, session, 0, 100).await, "list_events");
    assert_eq!(
        events.len(),
        1,
        "one event for the stored checkpoint: {events:?}"
    );
    let event = &events[0];
    assert_eq!(event.event_type, EventType::CheckpointCreated);
    assert_eq!(event.content, "Checkpoint 001");
    assert_eq!(
        event.metadata,
        json!({"thread_id": "th", "checkpoint_ns": "", "checkpoint_id": "001", "step": -1})
    );
    assert_eq!(
        (event.session_id, event.message_id, event.execution_id),
        (session, None, None)
    );

    // The same put again stores nothing, so announces nothing.
    assert!(!put(&store, &t, c1).await);
    assert_eq!(announced(&store, &t, session).await.len(), 1);

    // A subscriber gets the event once it is committed, as it is stored; an event queued
    // before the put keeps the lower id.
    let mut live = store.subscribe(&t, session);
    let queued = ok(
        store
            .append_event(
                &t,
                new_event(session, EventType::StepCompleted, "queued first"),
            )
            .await,
        "append_event",
    );
    let mut c2 = checkpoint("th", "sub", "002", Some("001"));
    c2.metadata = json!({"source": "loop"});
    assert!(put(&store, &t, c2).await);
    let queued = ok(queued.await, "the queued event");
    let got = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        let mut got = Vec::new();
        while got.len() < 2 {
            match live.recv().await {
                // (A backend may also hand over what was committed before the subscription.)
                Ok(e) if e.id <= event.id => {}
                Ok(e) => got.push(e),
                Err(e) => panic!("the subscription ended: {e}"),
            }
        }
        got
    })
    .await
    .unwrap_or_else(|_| panic!("the two events were not published"));
    let stored = ok(store.list_events(&t, session, 1, 100).await, "list_events");
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert_eq!(
        stored[0], queued,
        "the event queued before the put comes first"
    );
    assert_eq!(stored[1].content, "Checkpoint 002");
    assert_eq!(
        stored[1].metadata,
        json!({"thread_id": "th", "checkpoint_ns": "sub", "checkpoint_id": "002", "step": null}),
        "a checkpoint without a step announces a null one"
    );
    let published: Vec<_> = got.iter().map(|e| (**e).clone()).collect();
    assert_eq!(published, stored, "subscribers get the events as stored");

    // A put that does not announce (its caller publishes the event) stores none.
    let mut quiet = checkpoint("th", "", "003", Some("001"));
    quiet.announce = false;
    assert!(put(&store, &t, quiet).await);
    // A refused put (an append on a version nobody stored) stores no event either.
    let mut refused = checkpoint("th", "", "004", Some("003"));
    refused.channel_versions = versions(&[("m", "2")]);
    refused.blobs = vec![append("m", "2", Some("1"), &["x"])];
    let refusal = checkpoints(&store).put_checkpoint(&t, refused).await;
    assert!(
        matches!(refusal, Err(StoreError::Conflict(_))),
        "a put on a missing base is refused: {refusal:?}"
    );
    let contents: Vec<String> = announced(&store, &t, session)
        .await
        .into_iter()
        .map(|(_, content)| content)
        .collect();
    assert_eq!(
        contents,
        ["Checkpoint 001", "queued first", "Checkpoint 002"]
    );
}
