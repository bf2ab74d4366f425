//! Live events across nodes. Every committed batch notifies `stepwise_events` with
//! `<session>:<last event id>` (ids only). Each store keeps one dedicated LISTEN
//! connection (not from the pool: LISTEN is session state) and, for the sessions that
//! have local subscribers, reads new events from the table after the last id it
//! delivered and publishes them into the local [`EventHub`] in order. A poll every
//! `poll_interval` catches what a lost notification or a reconnect missed, so a lost
//! doorbell only delays an event. Local commits are published directly when they are the
//! next id; everything goes through one cursor per session, so a subscriber never sees an
//! event twice or out of order.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::Pool;
use futures_util::StreamExt;
use stepwise_core::{Event, Id, SharedClock, Timestamp};
use stepwise_store::{EventHub, StoreError};
use tokio::sync::{Notify, broadcast, watch};
use tokio_postgres::AsyncMessage;

use crate::sql::{self, args, map_pg, map_pool};

pub(crate) const CHANNEL: &str = "stepwise_events";
/// Notified (empty payload) when an execution may have become claimable: the workers'
/// doorbell between nodes.
pub(crate) const QUEUE_CHANNEL: &str = "stepwise_queue";
/// How far back in time a new subscription starts reading: covers events queued just
/// before it and clock skew between nodes. Extra old events are harmless (subscribers
/// skip what they replayed); a missed one would not be.
const SUBSCRIBE_MARGIN_MICROS: i64 = 5_000_000;
const FETCH_PAGE: i64 = 500;

struct Watch {
    /// Whether the session is the subscribing tenant's; `None` until checked. Another
    /// tenant's subscription to the id gets nothing, not even its own live-only events.
    owned: Option<bool>,
    /// Live-only events published before ownership was checked.
    held: Vec<Arc<Event>>,
    /// The last event id delivered to the hub; `None` until the start is known.
    cursor: Option<i64>,
    since: Timestamp,
    dirty: bool,
}

/// A subscription is to a session *of a tenant*: another tenant naming the same id gets
/// its own (empty) stream, and its live-only events never reach the owner's.
type Key = (String, Id);

#[derive(Default)]
struct State {
    /// One hub per tenant.
    hubs: HashMap<String, EventHub>,
    watches: HashMap<Key, Watch>,
}

impl State {
    fn publish(&mut self, tenant: &str, event: Arc<Event>) {
        if let Some(hub) = self.hubs.get(tenant) {
            hub.publish(event);
        }
    }
}

pub(crate) struct Relay {
    clock: SharedClock,
    state: Mutex<State>,
    wake: Notify,
    /// Rung by a `NOTIFY` on [`QUEUE_CHANNEL`] (and after (re)connecting the listener).
    pub(crate) queue: Notify,
    /// The last event id of each session committed here since the last `NOTIFY` was sent
    /// (see [`run_announcer`]).
    outbox: Mutex<HashMap<Id, i64>>,
    announce: Notify,
}

impl Relay {
    pub(crate) fn new(clock: SharedClock) -> Relay {
        Relay {
            clock,
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            queue: Notify::new(),
            outbox: Mutex::new(HashMap::new()),
            announce: Notify::new(),
        }
    }

    /// Asks for committed events to be announced to the other nodes: `(session, event id)`
    /// pairs, sent after the commit by [`run_announcer`], the highest id of each session.
    pub(crate) fn announce(&self, committed: impl IntoIterator<Item = (Id, i64)>) {
        let mut outbox = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
        let mut any = false;
        for (session, id) in committed {
            let last = outbox.entry(session).or_insert(id);
            *last = (*last).max(id);
            any = true;
        }
        drop(outbox);
        if any {
            self.announce.notify_one();
        }
    }

    fn take_outbox(&self) -> HashMap<Id, i64> {
        std::mem::take(&mut *self.outbox.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the maps inconsistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A live-only event (never stored): straight to the tenant's subscribers.
    pub(crate) fn publish_live(&self, tenant: &str, event: Event) {
        let mut state = self.lock();
        let key = (tenant.to_string(), event.session_id);
        let Some(watch) = state.watches.get_mut(&key) else {
            return; // nobody listens
        };
        match watch.owned {
            Some(true) => state.publish(tenant, Arc::new(event)),
            Some(false) => {}
            None => {
                if watch.held.len() < stepwise_store::SUBSCRIBER_BUFFER {
                    watch.held.push(Arc::new(event));
                }
                self.wake.notify_one();
            }
        }
    }

    pub(crate) fn subscriber_count(&self) -> usize {
        self.lock()
            .hubs
            .values()
            .map(EventHub::subscriber_count)
            .sum()
    }

    pub(crate) fn subscribe(
        &self,
        tenant: &str,
        session_id: Id,
    ) -> broadcast::Receiver<Arc<Event>> {
        let mut state = self.lock();
        let rx = state
            .hubs
            .entry(tenant.to_string())
            .or_default()
            .subscribe(session_id);
        let key = (tenant.to_string(), session_id);
        if let std::collections::hash_map::Entry::Vacant(entry) = state.watches.entry(key) {
            entry.insert(Watch {
                owned: None,
                held: Vec::new(),
                cursor: None,
                since: Timestamp(self.clock.now().0.saturating_sub(SUBSCRIBE_MARGIN_MICROS)),
                dirty: true,
            });
            self.wake.notify_one();
        }
        rx
    }

    /// Events this store just committed (with their tenants), in id order per session.
    pub(crate) fn committed_locally(&self, events: Vec<(String, Arc<Event>)>) {
        if events.is_empty() {
            return;
        }
        let mut state = self.lock();
        let mut wake = false;
        for (tenant, event) in events {
            let key = (tenant, event.session_id);
            let Some(watch) = state.watches.get_mut(&key) else {
                continue;
            };
            match watch.cursor {
                Some(c) if event.id == c + 1 => {
                    watch.cursor = Some(event.id);
                    state.publish(&key.0, event);
                }
                Some(c) if event.id <= c => {}
                // Not the next one (another node's events come first), or the start is
                // not known yet: the fetcher reads them from the table in order.
                _ => {
                    watch.dirty = true;
                    wake = true;
                }
            }
        }
        if wake {
            self.wake.notify_one();
        }
    }

    fn notified(&self, payload: &str) {
        let Some((session, last)) = payload.split_once(':') else {
            return;
        };
        let (Ok(session), Ok(last)) = (session.parse::<Id>(), last.parse::<i64>()) else {
            return;
        };
        let mut state = self.lock();
        let mut wake = false;
        for ((_, id), watch) in state.watches.iter_mut() {
            if *id == session && watch.cursor.is_none_or(|c| c < last) {
                watch.dirty = true;
                wake = true;
            }
        }
        if wake {
            self.wake.notify_one();
        }
    }

    fn mark_all_dirty(&self) {
        let mut state = self.lock();
        for watch in state.watches.values_mut() {
            watch.dirty = true;
        }
        self.wake.notify_one();
    }

    /// Delivers events read from the table, skipping what was already delivered.
    fn deliver(&self, key: &Key, events: Vec<Event>) {
        let mut state = self.lock();
        let state = &mut *state;
        let Some(watch) = state.watches.get_mut(key) else {
            return;
        };
        let hub = state.hubs.get(&key.0);
        for event in events {
            match watch.cursor {
                Some(c) if event.id == c + 1 => {
                    watch.cursor = Some(event.id);
                    if let Some(hub) = hub {
                        hub.publish(Arc::new(event));
                    }
                }
                Some(c) if event.id <= c => {}
                _ => break,
            }
        }
    }

    /// Takes the sessions to read, forgetting those nobody listens to any more.
    fn take_dirty(&self, all: bool) -> Vec<(Key, Option<i64>, Timestamp)> {
        let mut state = self.lock();
        let state = &mut *state;
        let hubs = &state.hubs;
        state
            .watches
            .retain(|(tenant, id), _| hubs.get(tenant).is_some_and(|h| h.has_subscribers(*id)));
        state
            .watches
            .iter_mut()
            .filter(|(_, w)| (all || w.dirty) && w.owned != Some(false))
            .map(|(key, w)| {
                w.dirty = false;
                (key.clone(), w.cursor, w.since)
            })
            .collect()
    }

    /// Records whether the session is the tenant's and where its live stream starts, and
    /// releases (or drops) the live-only events held meanwhile.
    fn start_at(&self, key: &Key, start: Option<i64>) {
        let mut state = self.lock();
        let state = &mut *state;
        let Some(watch) = state.watches.get_mut(key) else {
            return;
        };
        if watch.cursor.is_some() || watch.owned == Some(false) {
            return;
        }
        watch.owned = Some(start.is_some());
        watch.cursor = start;
        let held = std::mem::take(&mut watch.held);
        if watch.owned == Some(true)
            && let Some(hub) = state.hubs.get(&key.0)
        {
            for event in held {
                hub.publish(event);
            }
        }
    }

    fn cursor(&self, key: &Key) -> Option<i64> {
        self.lock().watches.get(key).and_then(|w| w.cursor)
    }
}

/// Reads new events of the dirty sessions from the table, on a wake-up or every
/// `poll_interval`.
pub(crate) async fn run_fetcher(
    relay: Arc<Relay>,
    pool: Pool,
    poll_interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut poll = tokio::time::interval(poll_interval);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let all = tokio::select! {
            _ = relay.wake.notified() => false,
            _ = poll.tick() => true,
            _ = stop.changed() => return,
        };
        let sessions = relay.take_dirty(all);
        if sessions.is_empty() {
            continue;
        }
        if let Err(e) = fetch(&relay, &pool, sessions, all).await {
            tracing::warn!(error = %e, "reading live events failed; retrying at the next poll");
        }
    }
}

async fn fetch(
    relay: &Relay,
    pool: &Pool,
    sessions: Vec<(Key, Option<i64>, Timestamp)>,
    poll: bool,
) -> Result<(), StoreError> {
    let client = pool.get().await.map_err(map_pool)?;
    // On a poll, one query tells which sessions moved on; only those are read.
    let mut moved: Option<HashMap<Id, i64>> = None;
    if poll {
        let ids: Vec<Id> = sessions.iter().map(|s| s.0.1).collect();
        let tenants: Vec<String> = sessions.iter().map(|s| s.0.0.clone()).collect();
        let rows = client
            .query_typed(
                "SELECT s.id, s.last_event_id FROM sessions s JOIN unnest($1::uuid[], $2::text[]) AS u(id, t) ON s.id = u.id AND s.tenant_id = u.t",
                args![ids, tenants],
            )
            .await
            .map_err(map_pg)?;
        let mut lasts = HashMap::new();
        for row in &rows {
            lasts.insert(
                sql::get::<Id>(row, "id")?,
                sql::get::<i64>(row, "last_event_id")?,
            );
        }
        moved = Some(lasts);
    }
    for (key, cursor, since) in sessions {
        let (tenant, session_id) = (&key.0, key.1);
        if cursor.is_none() {
            // No row: not this tenant's session, so this subscription stays silent.
            let row = client
                .query_typed_opt(
                    "SELECT COALESCE((SELECT MIN(seq) - 1 FROM events WHERE session_id = $1 AND tenant_id = $2 AND created_at >= $3), \
                     s.last_event_id) AS start FROM sessions s WHERE s.id = $1 AND s.tenant_id = $2",
                    args![session_id, tenant, since.0],
                )
                .await
                .map_err(map_pg)?;
            let start = row
                .as_ref()
                .map(|r| sql::get::<i64>(r, "start"))
                .transpose()?;
            relay.start_at(&key, start);
        }
        let Some(mut after) = relay.cursor(&key) else {
            continue;
        };
        if let Some(lasts) = &moved
            && lasts.get(&session_id).is_none_or(|last| *last <= after)
        {
            continue;
        }
        loop {
            let rows = client
                .query_typed(
                    &format!(
                        "SELECT {} FROM events WHERE session_id = $1 AND tenant_id = $2 AND seq > $3 ORDER BY seq LIMIT $4",
                        sql::EVENT_COLS
                    ),
                    args![session_id, tenant, after, FETCH_PAGE],
                )
                .await
                .map_err(map_pg)?;
            let events = sql::collect(&rows, sql::event)?;
            let full = events.len() as i64 == FETCH_PAGE;
            relay.deliver(&key, events);
            match relay.cursor(&key) {
                Some(c) if full && c > after => after = c,
                _ => break,
            }
        }
    }
    Ok(())
}

/// Sends the other nodes' doorbell for events committed here: one `NOTIFY` per session
/// with `<session>:<last id>`, for everything [`Relay::announce`]d while the last one was
/// sent, in a transaction of its own that does not wait for its WAL flush.
///
/// Why not in the batch's transaction: a transaction that notifies holds PostgreSQL's
/// lock on the notification queue from before its commit until it ends, its WAL flush
/// included, so the writers' commits went one flush at a time instead of sharing one.
/// Nothing is lost with the notification: it is a doorbell, the events are in the table,
/// and the fetcher's poll reads what a missed one would have announced.
pub(crate) async fn run_announcer(
    relay: Arc<Relay>,
    pool: Pool,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stopped.changed() => return,
            _ = relay.announce.notified() => {}
        }
        let outbox = relay.take_outbox();
        if outbox.is_empty() {
            continue;
        }
        // Ids and numbers only: nothing here needs quoting.
        let payloads: Vec<String> = outbox
            .iter()
            .map(|(session, last)| format!("('{}:{last}')", session.simple()))
            .collect();
        let statement = format!(
            "SET LOCAL synchronous_commit TO off; \
             SELECT pg_notify('{CHANNEL}', p) FROM (VALUES {}) AS v(p)",
            payloads.join(",")
        );
        let sent = match pool.get().await {
            Ok(mut client) => notify_without_flush(&mut client, &statement).await,
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = sent {
            tracing::warn!(error = %e, "could not announce events to the other nodes; their poll will find them");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Runs `statement` (its `NOTIFY`s) in a transaction after `SET LOCAL synchronous_commit
/// TO off`: rolled back, not left open on the pooled connection, when it fails.
pub(crate) async fn notify_without_flush(
    client: &mut deadpool_postgres::Object,
    statement: &str,
) -> Result<(), String> {
    let tx = crate::sql::pg(client)
        .transaction()
        .await
        .map_err(|e| e.to_string())?;
    tx.batch_execute(statement)
        .await
        .map_err(|e| e.to_string())?;
    tx.commit().await.map_err(|e| e.to_string())
}

/// Keeps one LISTEN connection open (reconnecting after a pause when it drops) and rings
/// the relay for each notification.
pub(crate) async fn run_listener(
    relay: Arc<Relay>,
    config: tokio_postgres::Config,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        match config.connect(tokio_postgres::NoTls).await {
            Ok((client, mut connection)) => {
                let mut messages =
                    futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
                let statement = format!("LISTEN {CHANNEL}; LISTEN {QUEUE_CHANNEL}");
                let listen = client.batch_execute(&statement);
                tokio::pin!(listen);
                let mut listening = false;
                loop {
                    tokio::select! {
                        result = &mut listen, if !listening => match result {
                            Ok(()) => {
                                listening = true;
                                // Whatever was committed while not listening is read now.
                                relay.mark_all_dirty();
                                // And whatever was queued: the workers look once.
                                relay.queue.notify_one();
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "LISTEN failed");
                                break;
                            }
                        },
                        message = messages.next() => match message {
                            Some(Ok(AsyncMessage::Notification(n))) => {
                                if n.channel() == QUEUE_CHANNEL {
                                    relay.queue.notify_one();
                                } else {
                                    relay.notified(n.payload());
                                }
                            }
                            Some(Ok(_)) => {}
                            Some(Err(e)) => {
                                tracing::warn!(error = %e, "the LISTEN connection failed");
                                break;
                            }
                            None => break,
                        },
                        _ = stop.changed() => return,
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot open the LISTEN connection"),
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.changed() => return,
        }
    }
}
