//! Worker processes: users' own agents behind the queue (`docs/workers.md`). One file per
//! endpoint: the agent types a tenant can use, claims with a long poll, heartbeats,
//! live tokens, handing an execution back and saying a worker stopped. A worker's other writes (steps, snapshots,
//! complete, fail, pause) are the external agents' endpoints with the `Stepwise-Lease`
//! header (`crate::executions::LeaseHeader`).

pub(crate) mod agents;
pub(crate) mod claim;
pub(crate) mod deltas;
pub(crate) mod heartbeat;
pub(crate) mod release;
pub(crate) mod stop;

/// Longest a claim waits for work: under the idle timeouts of common proxies (30-60 s).
pub const MAX_WAIT_SECS: u64 = 25;
/// Most executions one claim takes.
pub const MAX_SLOTS: u32 = 256;
/// Most agent types one worker announces.
pub const MAX_AGENTS: usize = 64;
/// Longest worker id, in characters.
pub const MAX_WORKER_ID_CHARS: usize = 128;
/// Longest agent description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 1_000;
/// Largest `config_schema` of an agent, serialized.
pub const MAX_CONFIG_SCHEMA_BYTES: usize = 64 * 1024;

/// How often a lease's holder (a worker, or an external execution's recorder) renews it:
/// a third of the lease, in seconds.
pub(crate) fn heartbeat_interval_s(lease: std::time::Duration) -> f64 {
    (lease.as_secs_f64() / 3.0).max(0.05)
}
