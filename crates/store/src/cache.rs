//! The hot-session cache: the decoded agent memory and the messages of recently read
//! sessions, kept in memory so the next read only asks the database for the rows it does
//! not hold yet (seed 003's "hybrid caching": memory first, the database for durability).
//!
//! Why a cached view is never stale: the database stays the authority on every read.
//! Step and message rows are immutable and only ever deleted with their whole session, so
//! the rows a cache entry holds are a subset of the session's rows for as long as the
//! session exists. Each read asks, in one consistent read, how many rows the session has
//! and the rows past the entry's position ([`StepStore::list_session_steps_after`],
//! [`MessageStore::list_session_messages_after`]); the cached rows plus the new ones are served
//! only when together they are exactly that many rows. Any other answer (a row another
//! node committed out of order, a clock skew, a deleted session) makes the read a full
//! load that replaces the entry. The key holds the tenant, so one tenant's entry can never
//! answer another's read.
//!
//! [`StepStore::list_session_steps_after`]: crate::StepStore::list_session_steps_after
//! [`MessageStore::list_session_messages_after`]: crate::MessageStore::list_session_messages_after

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use stepwise_core::{Id, Message, Step, Timestamp};

use crate::{Result, Store, Tenant};

/// The default bound of a store's session cache.
pub const DEFAULT_SESSION_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// The two lists a session's entries hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    /// The agent memory: the steps of the session's executions.
    Steps,
    /// The session's messages.
    Messages,
}

/// The place of a row in one of a session's cached lists, and what that list holds: the
/// one thing that differs between the steps and the messages in the cache.
pub trait RowOrder: Ord + Copy + std::fmt::Debug + Send + Sync + 'static {
    type Item: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static;
    const PART: Part;
    /// An estimate of the heap an item holds.
    fn weigh(item: &Self::Item) -> usize;
    /// The session's rows past `after` with its row count, read together.
    fn read_after<S: Store>(
        store: &S,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
    ) -> impl Future<Output = Result<RowsAfter<Self>>> + Send;
    fn wrap(entry: Arc<Cached<Self>>) -> Entry;
    fn unwrap(entry: Entry) -> Option<Arc<Cached<Self>>>;
}

/// Where a step sits in a session's agent memory: the steps of its executions, executions
/// in creation order (id as tie-break), each execution's steps by number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StepOrder {
    pub execution_created_at: Timestamp,
    pub execution_id: Id,
    pub step_number: u32,
}

impl RowOrder for StepOrder {
    type Item = Step;
    const PART: Part = Part::Steps;

    fn weigh(step: &Step) -> usize {
        step_bytes(step)
    }

    fn read_after<S: Store>(
        store: &S,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
    ) -> impl Future<Output = Result<StepsAfter>> + Send {
        store.list_session_steps_after(tenant, session_id, after)
    }

    fn wrap(entry: Arc<CachedSteps>) -> Entry {
        Entry::Steps(entry)
    }

    fn unwrap(entry: Entry) -> Option<Arc<CachedSteps>> {
        match entry {
            Entry::Steps(steps) => Some(steps),
            Entry::Messages(_) => None,
        }
    }
}

/// Where a message sits in a session's messages: server time, then id (the order
/// `list_messages` answers in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MessageOrder {
    pub created_at: Timestamp,
    pub id: Id,
}

impl MessageOrder {
    pub fn of(message: &Message) -> Self {
        MessageOrder {
            created_at: message.created_at,
            id: message.id,
        }
    }
}

impl RowOrder for MessageOrder {
    type Item = Message;
    const PART: Part = Part::Messages;

    fn weigh(message: &Message) -> usize {
        let text = |s: &Option<String>| s.as_ref().map_or(0, String::capacity);
        std::mem::size_of::<Message>()
            + std::mem::size_of::<MessageOrder>()
            + message.content.capacity()
            + text(&message.related_type)
            + text(&message.related_id)
            + text(&message.context_url)
            + value_bytes(&message.metadata)
    }

    fn read_after<S: Store>(
        store: &S,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
    ) -> impl Future<Output = Result<MessagesAfter>> + Send {
        store.list_session_messages_after(tenant, session_id, after)
    }

    fn wrap(entry: Arc<CachedMessages>) -> Entry {
        Entry::Messages(entry)
    }

    fn unwrap(entry: Entry) -> Option<Arc<CachedMessages>> {
        match entry {
            Entry::Messages(messages) => Some(messages),
            Entry::Steps(_) => None,
        }
    }
}

/// A row read for the cache: its place in its list and its position in the backend's own
/// monotonic order of appends (SQLite: the row id; PostgreSQL: the append time), which
/// the next read asks to continue from.
#[derive(Debug, Clone, PartialEq)]
pub struct Positioned<O: RowOrder> {
    pub position: i64,
    pub order: O,
    pub item: O::Item,
}

pub type PositionedStep = Positioned<StepOrder>;
pub type PositionedMessage = Positioned<MessageOrder>;

/// The answer of [`StepStore::list_session_steps_after`](crate::StepStore::list_session_steps_after)
/// and [`MessageStore::list_session_messages_after`](crate::MessageStore::list_session_messages_after).
#[derive(Debug, Clone, PartialEq)]
pub struct RowsAfter<O: RowOrder> {
    /// How many rows the session has (decodable or not), read together with `rows`.
    pub total: u64,
    /// The decoded rows past the position asked for (a backend may send some earlier ones
    /// too; the cache ignores rows it holds).
    pub rows: Vec<Positioned<O>>,
    /// Rows past the position that could not be decoded.
    pub skipped: u64,
    /// The rows are the whole session in list order, without an order of their own (the
    /// trait's default answer): the cache replaces its entry with them.
    pub whole: bool,
    /// Where the next read starts, when the backend knows better than the highest
    /// position among the rows. PostgreSQL: the time this read began, less the commit lag
    /// it allows for (a row stamped earlier may commit later), so a session written in a
    /// burst is not read again in full on every read. `None`: the highest position.
    pub next_position: Option<i64>,
}

impl<O: RowOrder> Default for RowsAfter<O> {
    fn default() -> Self {
        RowsAfter {
            total: 0,
            rows: Vec::new(),
            skipped: 0,
            whole: false,
            next_position: None,
        }
    }
}

pub type StepsAfter = RowsAfter<StepOrder>;
pub type MessagesAfter = RowsAfter<MessageOrder>;

/// A whole session's steps read without positions (the answer of a backend without a cache): every
/// row is new, in memory order.
pub fn whole_session(loaded: crate::Loaded<Step>) -> StepsAfter {
    let skipped = loaded.skipped;
    let mut read = whole_list(loaded.items, |k, step: &Step| StepOrder {
        // The read's own order stands in for the execution order.
        execution_created_at: Timestamp(k),
        execution_id: step.execution_id,
        step_number: step.step_number,
    });
    read.total += skipped;
    read.skipped = skipped;
    read
}

/// A whole session's messages read without positions (the answer of a backend without a cache).
pub fn whole_messages(messages: Vec<Message>) -> MessagesAfter {
    whole_list(messages, |_, message: &Message| MessageOrder::of(message))
}

fn whole_list<O: RowOrder>(
    items: Vec<O::Item>,
    order: impl Fn(i64, &O::Item) -> O,
) -> RowsAfter<O> {
    let rows: Vec<Positioned<O>> = (0i64..)
        .zip(items)
        .map(|(k, item)| Positioned {
            position: k,
            order: order(k, &item),
            item,
        })
        .collect();
    RowsAfter {
        total: rows.len() as u64,
        rows,
        skipped: 0,
        whole: true,
        next_position: None,
    }
}

/// The position before every row: asking for the rows after it reads the whole session.
pub const START_POSITION: i64 = i64::MIN;

/// One of a session's cached lists.
#[derive(Debug, Clone)]
pub struct Cached<O: RowOrder> {
    /// Where the next read continues: the highest position among the rows held, or the
    /// backend's [`RowsAfter::next_position`].
    pub position: i64,
    /// Each item's place, parallel to `items` and sorted.
    pub order: Vec<O>,
    pub items: Vec<O::Item>,
    /// What the entry is counted as against the bound.
    pub bytes: usize,
}

pub type CachedSteps = Cached<StepOrder>;
pub type CachedMessages = Cached<MessageOrder>;

impl<O: RowOrder> Cached<O> {
    /// An entry from a whole session's rows (`rows` in any order).
    pub fn from_rows(mut rows: Vec<Positioned<O>>) -> Self {
        rows.sort_by_key(|r| r.order);
        let mut entry = Cached {
            position: START_POSITION,
            order: Vec::with_capacity(rows.len()),
            items: Vec::with_capacity(rows.len()),
            bytes: ENTRY_OVERHEAD,
        };
        for row in rows {
            entry.push(row);
        }
        entry
    }

    /// Adds the rows it does not hold yet; returns how many were new. Rows in order after
    /// the last held one (the usual case: an agent appending) are pushed; others are
    /// merged into place.
    pub fn absorb(&mut self, rows: Vec<Positioned<O>>) -> usize {
        let mut added = 0;
        let mut sorted = true;
        for row in rows {
            if self.order.binary_search(&row.order).is_ok() {
                // Already held (a backend may resend rows near the position).
                self.position = self.position.max(row.position);
                continue;
            }
            if self.order.last().is_some_and(|last| *last > row.order) {
                sorted = false;
            }
            self.push(row);
            added += 1;
        }
        if !sorted {
            let mut pairs: Vec<(O, O::Item)> = self
                .order
                .drain(..)
                .zip(std::mem::take(&mut self.items))
                .collect();
            pairs.sort_by_key(|(order, _)| *order);
            (self.order, self.items) = pairs.into_iter().unzip();
        }
        added
    }

    fn push(&mut self, row: Positioned<O>) {
        self.position = self.position.max(row.position);
        self.bytes += O::weigh(&row.item);
        self.order.push(row.order);
        self.items.push(row.item);
    }

    /// Sets where the next read continues when the backend said
    /// ([`RowsAfter::next_position`]); else it stays the highest position held.
    pub fn continue_at(&mut self, next_position: Option<i64>) {
        if let Some(next) = next_position {
            self.position = next;
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// An entry of the LRU: one of a session's lists.
#[derive(Debug, Clone)]
pub enum Entry {
    Steps(Arc<CachedSteps>),
    Messages(Arc<CachedMessages>),
}

impl Entry {
    fn bytes(&self) -> usize {
        match self {
            Entry::Steps(e) => e.bytes,
            Entry::Messages(e) => e.bytes,
        }
    }
}

/// Counters of a [`SessionCache`], for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionCacheStats {
    /// Restores answered from the cache (plus the rows appended since).
    pub hits: u64,
    /// Restores that read the whole session from the database.
    pub misses: u64,
    /// Message listings answered from the cache (plus the messages appended since).
    pub message_hits: u64,
    /// Message listings that read all the session's messages from the database.
    pub message_misses: u64,
    /// Entries dropped to stay within the bound.
    pub evictions: u64,
    /// What the entries held now are counted as.
    pub bytes: u64,
    pub entries: u64,
    pub limit_bytes: u64,
}

type Key = (Tenant, Id, Part);

struct Slot {
    entry: Entry,
    tick: u64,
}

#[derive(Default)]
struct Lru {
    slots: HashMap<Key, Slot>,
    /// Last use -> key, oldest first.
    by_use: BTreeMap<u64, Key>,
    next_tick: u64,
    bytes: usize,
}

impl Lru {
    fn remove(&mut self, key: &Key) -> Option<Entry> {
        let slot = self.slots.remove(key)?;
        self.by_use.remove(&slot.tick);
        self.bytes -= slot.entry.bytes();
        Some(slot.entry)
    }
}

/// A byte-bounded LRU map from (tenant, session, list) to the session's decoded steps or
/// its messages. Cheap to share: clones see the same entries.
#[derive(Clone)]
pub struct SessionCache {
    shared: Arc<Shared>,
}

/// A hit and a miss counter per [`Part`].
#[derive(Default)]
struct Counts {
    hits: AtomicU64,
    misses: AtomicU64,
}

struct Shared {
    limit: usize,
    lru: Mutex<Lru>,
    steps: Counts,
    messages: Counts,
    evictions: AtomicU64,
}

impl Shared {
    fn counts(&self, part: Part) -> &Counts {
        match part {
            Part::Steps => &self.steps,
            Part::Messages => &self.messages,
        }
    }
}

impl std::fmt::Debug for SessionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCache")
            .field("stats", &self.stats())
            .finish()
    }
}

impl SessionCache {
    /// A cache holding at most `limit_bytes` of steps and messages; 0 turns it off.
    pub fn new(limit_bytes: usize) -> Self {
        SessionCache {
            shared: Arc::new(Shared {
                limit: limit_bytes,
                lru: Mutex::new(Lru::default()),
                steps: Counts::default(),
                messages: Counts::default(),
                evictions: AtomicU64::new(0),
            }),
        }
    }

    pub fn limit_bytes(&self) -> usize {
        self.shared.limit
    }

    fn lru(&self) -> std::sync::MutexGuard<'_, Lru> {
        self.shared.lru.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes one of a session's lists out of the cache (the caller puts back what it makes
    /// of it; meanwhile another read of the session reads the database, which is correct).
    pub fn take<O: RowOrder>(&self, tenant: &Tenant, session_id: Id) -> Option<Arc<Cached<O>>> {
        let entry = self.lru().remove(&(tenant.clone(), session_id, O::PART))?;
        O::unwrap(entry)
    }

    /// Stores one of a session's lists as the most recently used, evicting the least
    /// recently used entries past the bound. An entry larger than the whole bound is not
    /// kept.
    pub fn put<O: RowOrder>(&self, tenant: &Tenant, session_id: Id, entry: Arc<Cached<O>>) {
        let key = (tenant.clone(), session_id, O::PART);
        let entry = O::wrap(entry);
        let size = entry.bytes();
        let mut lru = self.lru();
        lru.remove(&key);
        if size > self.shared.limit {
            return;
        }
        let mut evicted = 0;
        while lru.bytes + size > self.shared.limit {
            let Some((_, oldest)) = lru.by_use.pop_first() else {
                break;
            };
            if let Some(slot) = lru.slots.remove(&oldest) {
                lru.bytes -= slot.entry.bytes();
                evicted += 1;
            }
        }
        let tick = lru.next_tick;
        lru.next_tick += 1;
        lru.bytes += size;
        lru.by_use.insert(tick, key.clone());
        lru.slots.insert(key, Slot { entry, tick });
        drop(lru);
        if evicted > 0 {
            self.shared.evictions.fetch_add(evicted, Ordering::Relaxed);
        }
    }

    /// Drops a session's entries (the session is gone).
    pub fn remove(&self, tenant: &Tenant, session_id: Id) {
        let mut lru = self.lru();
        for part in [Part::Steps, Part::Messages] {
            lru.remove(&(tenant.clone(), session_id, part));
        }
    }

    pub(crate) fn count_hit(&self, part: Part) {
        self.shared
            .counts(part)
            .hits
            .fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_miss(&self, part: Part) {
        self.shared
            .counts(part)
            .misses
            .fetch_add(1, Ordering::Relaxed);
    }

    pub fn stats(&self) -> SessionCacheStats {
        let lru = self.lru();
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SessionCacheStats {
            hits: load(&self.shared.steps.hits),
            misses: load(&self.shared.steps.misses),
            message_hits: load(&self.shared.messages.hits),
            message_misses: load(&self.shared.messages.misses),
            evictions: load(&self.shared.evictions),
            bytes: lru.bytes as u64,
            entries: lru.slots.len() as u64,
            limit_bytes: self.shared.limit as u64,
        }
    }
}

/// What an entry costs besides its steps (the key, the slot, the vectors' headers).
const ENTRY_OVERHEAD: usize = 256;

/// An estimate of the heap a decoded step holds, plus its order key.
fn step_bytes(step: &Step) -> usize {
    let text = |s: &Option<String>| s.as_ref().map_or(0, String::capacity);
    let calls: usize = step
        .tool_calls
        .iter()
        .map(|c| {
            std::mem::size_of_val(c)
                + c.id.capacity()
                + c.name.capacity()
                + value_bytes(&c.arguments)
        })
        .sum();
    let error = step
        .error
        .as_ref()
        .map_or(0, |e| e.kind.capacity() + e.message.capacity());
    std::mem::size_of::<Step>()
        + std::mem::size_of::<StepOrder>()
        + text(&step.model_output)
        + text(&step.code)
        + text(&step.observations)
        + calls
        + error
        + value_bytes(&step.output)
}

fn value_bytes(value: &Value) -> usize {
    let own = std::mem::size_of::<Value>();
    match value {
        Value::String(s) => own + s.capacity(),
        Value::Array(items) => own + items.iter().map(value_bytes).sum::<usize>(),
        Value::Object(map) => {
            own + map
                .iter()
                .map(|(k, v)| k.capacity() + 48 + value_bytes(v))
                .sum::<usize>()
        }
        _ => own,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stepwise_core::{StepBody, StepKind};

    fn tenant(name: &str) -> Tenant {
        Tenant::new(name).expect("a valid tenant")
    }

    fn row(execution: Id, created: i64, number: u32, position: i64, text: &str) -> PositionedStep {
        let body = StepBody {
            model_output: Some(text.to_string()),
            ..StepBody::default()
        };
        PositionedStep {
            position,
            order: StepOrder {
                execution_created_at: Timestamp(created),
                execution_id: execution,
                step_number: number,
            },
            item: Step::from_body(
                stepwise_core::new_id(),
                execution,
                None,
                number,
                StepKind::Action,
                body,
                Timestamp(created),
            ),
        }
    }

    fn outputs(entry: &CachedSteps) -> Vec<String> {
        entry
            .items
            .iter()
            .map(|s| s.model_output.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn absorbing_keeps_execution_order_and_skips_rows_already_held() {
        let (first, second) = (stepwise_core::new_id(), stepwise_core::new_id());
        let mut entry = CachedSteps::from_rows(vec![
            row(second, 20, 1, 3, "b1"),
            row(first, 10, 1, 1, "a1"),
            row(first, 10, 2, 2, "a2"),
        ]);
        assert_eq!(outputs(&entry), ["a1", "a2", "b1"]);
        assert_eq!(entry.position, 3);
        // The second execution goes on; the first one's late step lands before it.
        let added = entry.absorb(vec![
            row(second, 20, 1, 3, "b1"),
            row(second, 20, 2, 4, "b2"),
            row(first, 10, 3, 5, "a3"),
        ]);
        assert_eq!(added, 2);
        assert_eq!(outputs(&entry), ["a1", "a2", "a3", "b1", "b2"]);
        assert_eq!(entry.position, 5);
    }

    #[test]
    fn the_least_recently_used_entry_goes_first_and_the_bound_holds() {
        let exec = stepwise_core::new_id();
        let one = Arc::new(CachedSteps::from_rows(vec![row(exec, 1, 1, 1, "x")]));
        let size = one.bytes;
        let cache = SessionCache::new(size * 2);
        let acme = tenant("acme");
        let (a, b, c) = (
            stepwise_core::new_id(),
            stepwise_core::new_id(),
            stepwise_core::new_id(),
        );
        cache.put(&acme, a, one.clone());
        cache.put(&acme, b, one.clone());
        // Using `a` makes `b` the oldest.
        let used = cache.take::<StepOrder>(&acme, a).expect("a is cached");
        cache.put(&acme, a, used);
        cache.put(&acme, c, one.clone());
        assert!(cache.take::<StepOrder>(&acme, b).is_none(), "b was evicted");
        assert!(cache.take::<StepOrder>(&acme, a).is_some());
        let stats = cache.stats();
        assert_eq!(stats.evictions, 1);
        assert!(stats.bytes <= stats.limit_bytes);
    }

    #[test]
    fn entries_are_per_tenant() {
        let exec = stepwise_core::new_id();
        let cache = SessionCache::new(1 << 20);
        let session = stepwise_core::new_id();
        cache.put(
            &tenant("acme"),
            session,
            Arc::new(CachedSteps::from_rows(vec![row(exec, 1, 1, 1, "x")])),
        );
        assert!(
            cache
                .take::<StepOrder>(&tenant("globex"), session)
                .is_none()
        );
        assert!(cache.take::<StepOrder>(&tenant("acme"), session).is_some());
    }

    #[test]
    fn an_entry_larger_than_the_bound_is_not_kept() {
        let exec = stepwise_core::new_id();
        let cache = SessionCache::new(10);
        let session = stepwise_core::new_id();
        cache.put(
            &tenant("acme"),
            session,
            Arc::new(CachedSteps::from_rows(vec![row(exec, 1, 1, 1, "x")])),
        );
        assert!(cache.take::<StepOrder>(&tenant("acme"), session).is_none());
        assert_eq!(cache.stats().bytes, 0);
    }

    fn message(text: &str, at: i64) -> PositionedMessage {
        let item = Message {
            id: stepwise_core::new_id(),
            session_id: stepwise_core::new_id(),
            role: stepwise_core::Role::User,
            content: text.to_string(),
            execution_id: None,
            related_type: None,
            related_id: None,
            context_url: None,
            metadata: Value::Null,
            created_at: Timestamp(at),
        };
        PositionedMessage {
            position: at,
            order: MessageOrder::of(&item),
            item,
        }
    }

    #[test]
    fn a_sessions_steps_and_messages_are_separate_entries_under_one_bound() {
        let exec = stepwise_core::new_id();
        let steps = Arc::new(CachedSteps::from_rows(vec![row(exec, 1, 1, 1, "x")]));
        let messages = Arc::new(CachedMessages::from_rows(vec![
            message("b", 2),
            message("a", 1),
        ]));
        assert_eq!(
            messages
                .items
                .iter()
                .map(|m| m.content.as_str())
                .collect::<Vec<_>>(),
            ["a", "b"],
            "messages are held in server-time order"
        );
        let cache = SessionCache::new(1 << 20);
        let (acme, session) = (tenant("acme"), stepwise_core::new_id());
        cache.put(&acme, session, steps.clone());
        cache.put(&acme, session, messages.clone());
        let stats = cache.stats();
        assert_eq!(stats.entries, 2);
        assert_eq!(stats.bytes as usize, steps.bytes + messages.bytes);
        let held = cache.take::<MessageOrder>(&acme, session);
        assert_eq!(held.map(|m| m.len()), Some(2));
        cache.put(&acme, session, messages);
        // The session is gone: both of its entries go.
        cache.remove(&acme, session);
        assert_eq!(cache.stats().entries, 0);
        assert!(cache.take::<StepOrder>(&acme, session).is_none());
    }
}
