//! The hot-session cache: the decoded agent memory of recently restored sessions, kept in
//! memory so the next restore only asks the database for the steps it does not hold yet
//! (seed 003's "hybrid caching": memory first, the database for durability).
//!
//! Why a cached view is never stale: the database stays the authority on every restore.
//! Step rows are immutable and only ever deleted with their whole session, so the rows a
//! cache entry holds are a subset of the session's rows for as long as the session exists.
//! Each restore reads, in one consistent read, how many step rows the session has and the
//! rows past the entry's position ([`Store::list_session_steps_after`]); the cached rows
//! plus the new ones are served only when together they are exactly that many rows. Any
//! other answer (a row another node committed out of order, a clock skew, a deleted
//! session) makes the restore a full load that replaces the entry. The key holds the
//! tenant, so one tenant's entry can never answer another's restore.
//!
//! [`Store::list_session_steps_after`]: crate::Store::list_session_steps_after

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use stepwise_core::{Id, Step, Timestamp};

use crate::Tenant;

/// The default bound of a store's session cache.
pub const DEFAULT_SESSION_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// Where a step sits in a session's agent memory: the steps of its executions, executions
/// in creation order (id as tie-break), each execution's steps by number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StepOrder {
    pub execution_created_at: Timestamp,
    pub execution_id: Id,
    pub step_number: u32,
}

/// A step row read for the cache: its place in the memory and its position in the
/// backend's own monotonic order of appends (SQLite: the row id; PostgreSQL: the append
/// time), which the next read asks to continue from.
#[derive(Debug, Clone, PartialEq)]
pub struct PositionedStep {
    pub position: i64,
    pub order: StepOrder,
    pub step: Step,
}

/// The answer of [`Store::list_session_steps_after`](crate::Store::list_session_steps_after).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StepsAfter {
    /// How many step rows the session has (decodable or not), read together with `rows`.
    pub total: u64,
    /// The decoded rows past the position asked for (a backend may send some earlier ones
    /// too; the cache ignores rows it holds).
    pub rows: Vec<PositionedStep>,
    /// Rows past the position that could not be decoded.
    pub skipped: u64,
    /// The rows are the whole session in memory order, without an order of their own
    /// (the trait's default answer): the cache replaces its entry with them.
    pub whole: bool,
    /// Where the next read starts, when the backend knows better than the highest
    /// position among the rows. PostgreSQL: the time this read began, less the commit lag
    /// it allows for (a row stamped earlier may commit later), so a session written in a
    /// burst is not read again in full on every restore. `None`: the highest position.
    pub next_position: Option<i64>,
}

/// A whole session read without positions (the trait's default answer): every row is
/// new, in memory order.
pub(crate) fn whole_session(loaded: crate::Loaded<Step>) -> StepsAfter {
    let rows: Vec<PositionedStep> = (0i64..)
        .zip(loaded.items)
        .map(|(k, step)| PositionedStep {
            position: k,
            order: StepOrder {
                // The read's own order stands in for the execution order.
                execution_created_at: Timestamp(k),
                execution_id: step.execution_id,
                step_number: step.step_number,
            },
            step,
        })
        .collect();
    StepsAfter {
        total: rows.len() as u64 + loaded.skipped,
        rows,
        skipped: loaded.skipped,
        whole: true,
        next_position: None,
    }
}

/// The position before every row: asking for the rows after it reads the whole session.
pub const START_POSITION: i64 = i64::MIN;

/// One session's cached memory.
#[derive(Debug, Clone)]
pub struct CachedSteps {
    /// Where the next read continues: the highest position among the rows held, or the
    /// backend's [`StepsAfter::next_position`].
    pub position: i64,
    /// Each step's place, parallel to `steps` and sorted.
    pub order: Vec<StepOrder>,
    pub steps: Vec<Step>,
    /// What the entry is counted as against the bound.
    pub bytes: usize,
}

impl CachedSteps {
    /// An entry from a whole session's rows (`rows` in any order).
    pub fn from_rows(mut rows: Vec<PositionedStep>) -> Self {
        rows.sort_by_key(|r| r.order);
        let mut entry = CachedSteps {
            position: START_POSITION,
            order: Vec::with_capacity(rows.len()),
            steps: Vec::with_capacity(rows.len()),
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
    pub fn absorb(&mut self, rows: Vec<PositionedStep>) -> usize {
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
            let mut pairs: Vec<(StepOrder, Step)> = self
                .order
                .drain(..)
                .zip(std::mem::take(&mut self.steps))
                .collect();
            pairs.sort_by_key(|(order, _)| *order);
            (self.order, self.steps) = pairs.into_iter().unzip();
        }
        added
    }

    fn push(&mut self, row: PositionedStep) {
        self.position = self.position.max(row.position);
        self.bytes += step_bytes(&row.step);
        self.order.push(row.order);
        self.steps.push(row.step);
    }

    /// Sets where the next read continues when the backend said
    /// ([`StepsAfter::next_position`]); else it stays the highest position held.
    pub fn continue_at(&mut self, next_position: Option<i64>) {
        if let Some(next) = next_position {
            self.position = next;
        }
    }

    pub fn len(&self) -> usize {
        self.steps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}

/// Counters of a [`SessionCache`], for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionCacheStats {
    /// Restores answered from the cache (plus the rows appended since).
    pub hits: u64,
    /// Restores that read the whole session from the database.
    pub misses: u64,
    /// Entries dropped to stay within the bound.
    pub evictions: u64,
    /// What the entries held now are counted as.
    pub bytes: u64,
    pub entries: u64,
    pub limit_bytes: u64,
}

type Key = (Tenant, Id);

struct Slot {
    entry: Arc<CachedSteps>,
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

/// A byte-bounded LRU map from (tenant, session) to the session's decoded steps. Cheap to
/// share: clones see the same entries.
#[derive(Clone)]
pub struct SessionCache {
    shared: Arc<Shared>,
}

struct Shared {
    limit: usize,
    lru: Mutex<Lru>,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
}

impl std::fmt::Debug for SessionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCache")
            .field("stats", &self.stats())
            .finish()
    }
}

impl SessionCache {
    /// A cache holding at most `limit_bytes` of steps; 0 turns it off.
    pub fn new(limit_bytes: usize) -> Self {
        SessionCache {
            shared: Arc::new(Shared {
                limit: limit_bytes,
                lru: Mutex::new(Lru::default()),
                hits: AtomicU64::new(0),
                misses: AtomicU64::new(0),
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

    /// Takes a session's entry out of the cache (the caller puts back what it makes of it;
    /// meanwhile another restore of the session reads the database, which is correct).
    pub fn take(&self, tenant: &Tenant, session_id: Id) -> Option<Arc<CachedSteps>> {
        let mut lru = self.lru();
        let key = (tenant.clone(), session_id);
        let slot = lru.slots.remove(&key)?;
        lru.by_use.remove(&slot.tick);
        lru.bytes -= slot.entry.bytes;
        Some(slot.entry)
    }

    /// Stores a session's entry as the most recently used, evicting the least recently
    /// used ones past the bound. An entry larger than the whole bound is not kept.
    pub fn put(&self, tenant: &Tenant, session_id: Id, entry: Arc<CachedSteps>) {
        let key = (tenant.clone(), session_id);
        let mut lru = self.lru();
        if let Some(old) = lru.slots.remove(&key) {
            lru.by_use.remove(&old.tick);
            lru.bytes -= old.entry.bytes;
        }
        if entry.bytes > self.shared.limit {
            return;
        }
        let mut evicted = 0;
        while lru.bytes + entry.bytes > self.shared.limit {
            let Some((_, oldest)) = lru.by_use.pop_first() else {
                break;
            };
            if let Some(slot) = lru.slots.remove(&oldest) {
                lru.bytes -= slot.entry.bytes;
                evicted += 1;
            }
        }
        let tick = lru.next_tick;
        lru.next_tick += 1;
        lru.bytes += entry.bytes;
        lru.by_use.insert(tick, key.clone());
        lru.slots.insert(key, Slot { entry, tick });
        drop(lru);
        if evicted > 0 {
            self.shared.evictions.fetch_add(evicted, Ordering::Relaxed);
        }
    }

    /// Drops a session's entry (the session is gone).
    pub fn remove(&self, tenant: &Tenant, session_id: Id) {
        drop(self.take(tenant, session_id));
    }

    pub(crate) fn count_hit(&self) {
        self.shared.hits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_miss(&self) {
        self.shared.misses.fetch_add(1, Ordering::Relaxed);
    }

    pub fn stats(&self) -> SessionCacheStats {
        let lru = self.lru();
        SessionCacheStats {
            hits: self.shared.hits.load(Ordering::Relaxed),
            misses: self.shared.misses.load(Ordering::Relaxed),
            evictions: self.shared.evictions.load(Ordering::Relaxed),
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
            step: Step::from_body(
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
            .steps
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
        let used = cache.take(&acme, a).expect("a is cached");
        cache.put(&acme, a, used);
        cache.put(&acme, c, one.clone());
        assert!(cache.take(&acme, b).is_none(), "b was evicted");
        assert!(cache.take(&acme, a).is_some());
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
        assert!(cache.take(&tenant("globex"), session).is_none());
        assert!(cache.take(&tenant("acme"), session).is_some());
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
        assert!(cache.take(&tenant("acme"), session).is_none());
        assert_eq!(cache.stats().bytes, 0);
    }
}
