//! Everything the store holds, in memory. The files on disk are written from this.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use stepwise_core::{Event, Execution, Id, Message, Session, Snapshot, Step, Timestamp};
use stepwise_store::{ApiKeyRecord, Result};

/// Where a record lives: a tenant's session file, or (no session) the tenant's
/// `metadata.json`, which holds executions that belong to no session.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Key {
    pub tenant: String,
    pub session: Option<Id>,
}

/// A stored step, or what is left of one that could not be decoded (kept as it was, so
/// rewriting the file never destroys it, and counted whenever it is read).
// Nearly every stored step is decoded; boxing it would cost an allocation per step.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub(crate) enum StoredStep {
    Decoded(Step),
    Damaged(Value),
}

#[derive(Debug, Clone)]
pub(crate) struct Lease {
    pub owner: String,
    pub expires_at: Timestamp,
}

#[derive(Debug, Clone)]
pub(crate) struct ExecEntry {
    pub execution: Execution,
    pub steps: BTreeMap<u32, StoredStep>,
    pub lease: Option<Lease>,
    pub resume_answer: Option<Value>,
}

/// One file's worth of records.
#[derive(Debug, Clone, Default)]
pub(crate) struct Container {
    pub session: Option<Session>,
    pub messages: Vec<Message>,
    /// Oldest first (created_at, id).
    pub executions: Vec<ExecEntry>,
    pub snapshots: Vec<Snapshot>,
    pub events: Vec<Event>,
    pub last_event_id: i64,
    /// Records of this file that could not be decoded, by the array they came from.
    pub damaged: BTreeMap<String, Vec<Value>>,
}

impl Container {
    pub fn exec(&self, id: Id) -> Option<&ExecEntry> {
        self.executions.iter().find(|e| e.execution.id == id)
    }

    pub fn exec_mut(&mut self, id: Id) -> Option<&mut ExecEntry> {
        self.executions.iter_mut().find(|e| e.execution.id == id)
    }

    /// Damaged steps that belong to no execution of this file.
    pub fn orphan_damaged_steps(&self) -> u64 {
        self.damaged.get("steps").map_or(0, |v| v.len() as u64)
    }
}

#[derive(Debug, Default)]
pub(crate) struct TenantState {
    pub dir: PathBuf,
    pub sessions: HashMap<Id, Container>,
    pub loose: Container,
    pub names: HashMap<String, Id>,
    /// File stem (`<stem>.json`) of each session.
    pub stems: HashMap<String, Id>,
    /// Stems of files that could not be read: never overwritten, so nothing is lost.
    pub blocked_stems: HashSet<String>,
}

impl TenantState {
    pub fn container(&self, session: Option<Id>) -> Option<&Container> {
        match session {
            Some(id) => self.sessions.get(&id),
            None => Some(&self.loose),
        }
    }

    pub fn container_mut(&mut self, session: Option<Id>) -> Option<&mut Container> {
        match session {
            Some(id) => self.sessions.get_mut(&id),
            None => Some(&mut self.loose),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct KeyEntry {
    pub record: ApiKeyRecord,
    pub hash: String,
}

pub(crate) type Finish = Box<dyn FnOnce(Result<()>) + Send>;

/// Writes waiting for the writer: which files to rewrite, which to remove, and who to
/// answer once they are durable.
#[derive(Default)]
pub(crate) struct Pending {
    pub dirty: BTreeSet<Key>,
    pub index_dirty: BTreeSet<String>,
    /// (tenant, stem) of files that no longer belong to any session.
    pub removals: Vec<(String, String)>,
    pub finishes: Vec<Finish>,
    pub events: Vec<Arc<Event>>,
}

impl Pending {
    pub fn is_empty(&self) -> bool {
        self.dirty.is_empty()
            && self.index_dirty.is_empty()
            && self.removals.is_empty()
            && self.finishes.is_empty()
            && self.events.is_empty()
    }
}

#[derive(Default)]
pub(crate) struct State {
    pub tenants: BTreeMap<String, TenantState>,
    /// Execution id → where it lives.
    pub executions: HashMap<Id, Key>,
    /// Snapshot id → where it lives.
    pub snapshots: HashMap<Id, Key>,
    pub api_keys: Vec<KeyEntry>,
    /// Token signing keys, oldest first (kept in the root `metadata.json` too).
    pub signing_keys: Vec<stepwise_store::SigningKey>,
    pub pending: Pending,
    /// The writer is writing a batch it took from `pending`.
    pub in_flight: bool,
    pub closed: bool,
    /// Bytes of every file the store wrote or loaded.
    pub file_sizes: HashMap<PathBuf, u64>,
}

/// An abandoned session in use again is active, updated `now`; whether it was abandoned.
pub fn reactivate(session: &mut Session, now: Timestamp) -> bool {
    if session.status != stepwise_core::SessionStatus::Abandoned {
        return false;
    }
    session.status = stepwise_core::SessionStatus::Active;
    session.updated_at = now;
    true
}

impl State {
    /// Marks a file for rewriting; `index` when the change shows in `index.json`.
    pub fn touch(&mut self, key: &Key, index: bool) {
        self.pending.dirty.insert(key.clone());
        if index && key.session.is_some() {
            self.pending.index_dirty.insert(key.tenant.clone());
        }
    }

    pub fn tenant(&self, tenant: &str) -> Option<&TenantState> {
        self.tenants.get(tenant)
    }

    pub fn session(&self, tenant: &str, id: Id) -> Option<&Container> {
        self.tenants.get(tenant)?.sessions.get(&id)
    }

    pub fn session_mut(&mut self, tenant: &str, id: Id) -> Option<&mut Container> {
        self.tenants.get_mut(tenant)?.sessions.get_mut(&id)
    }

    /// The execution with this id in this tenant, with where it lives.
    pub fn exec(&self, tenant: &str, id: Id) -> Option<(&Key, &ExecEntry)> {
        let key = self.executions.get(&id).filter(|k| k.tenant == tenant)?;
        let entry = self.tenants.get(tenant)?.container(key.session)?.exec(id)?;
        Some((key, entry))
    }

    pub fn exec_mut(&mut self, tenant: &str, id: Id) -> Option<(Key, &mut ExecEntry)> {
        let key = self
            .executions
            .get(&id)
            .filter(|k| k.tenant == tenant)?
            .clone();
        let entry = self
            .tenants
            .get_mut(tenant)?
            .container_mut(key.session)?
            .exec_mut(id)?;
        Some((key, entry))
    }

    pub fn container_mut(&mut self, key: &Key) -> Option<&mut Container> {
        self.tenants
            .get_mut(&key.tenant)?
            .container_mut(key.session)
    }

    /// Something happened in the session (a step, a snapshot): an abandoned one is active
    /// again, updated now.
    pub fn reactivate(&mut self, key: &Key, now: Timestamp) {
        let revived = self
            .container_mut(key)
            .and_then(|c| c.session.as_mut())
            .is_some_and(|session| reactivate(session, now));
        if revived {
            self.touch(key, true);
        }
    }

    /// Every execution of every tenant, with where it lives.
    pub fn all_executions(&self) -> impl Iterator<Item = (&Key, &ExecEntry)> {
        self.executions.iter().filter_map(|(id, key)| {
            let entry = self
                .tenants
                .get(&key.tenant)?
                .container(key.session)?
                .exec(*id)?;
            Some((key, entry))
        })
    }
}
