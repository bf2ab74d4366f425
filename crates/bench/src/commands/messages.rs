//! W3m, beside W3: listing the W1 session's messages (what `GET /v1/sessions/{id}/messages`
//! asks of the store: every message, oldest first) through the hot-session cache, and the
//! same listing read from the database each time, in the same sitting. The workload has no
//! messages of its own: before W3 the W1 session gets as many messages as it has steps,
//! user and assistant in turn.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use stepwise_core::{Id, Role};
use stepwise_store::{MessageQuery, NewMessage, Store, Tenant, list_session_messages};

use super::{Corpus, ms, percentile_ms, round};

/// Appends `n` messages to the session, each acknowledged before the next; their text is
/// the corpus lines' model output.
pub(super) async fn add<S: Store>(
    store: &S,
    tenant: &Tenant,
    session_id: Id,
    corpus: &Corpus,
    n: u32,
) -> anyhow::Result<()> {
    for k in 1..=n as usize {
        let role = if k % 2 == 1 {
            Role::User
        } else {
            Role::Assistant
        };
        let text = corpus
            .line(k)
            .model_output
            .clone()
            .unwrap_or_else(|| format!("message {k}"));
        store
            .append_message(tenant, NewMessage::new(session_id, role, text))
            .await
            .with_context(|| format!("appending message {k} to the W1 session"))?;
    }
    Ok(())
}

/// One listing of every message of the session; checks that all `expected` came back.
async fn list<S: Store>(
    store: &S,
    tenant: &Tenant,
    session_id: Id,
    expected: u32,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let messages =
        list_session_messages(store, tenant, session_id, MessageQuery::default()).await?;
    let elapsed = started.elapsed();
    if messages.len() != expected as usize {
        bail!(
            "the listing returned {} messages, expected {expected}",
            messages.len()
        );
    }
    Ok(elapsed)
}

/// The listings' times: the first on a store (reading every message), then `loads` more.
pub(super) struct Listings {
    pub messages: u32,
    pub first: Duration,
    pub warm: Vec<Duration>,
    /// The same `loads` on a store without the cache; empty when not measured.
    pub uncached: Vec<Duration>,
}

impl Listings {
    /// The first listing and `loads` more on `store`.
    pub async fn run<S: Store>(
        store: &S,
        tenant: &Tenant,
        session_id: Id,
        messages: u32,
        loads: u32,
    ) -> anyhow::Result<Listings> {
        let first = list(store, tenant, session_id, messages).await?;
        let mut warm = Vec::with_capacity(loads as usize);
        for _ in 0..loads {
            warm.push(list(store, tenant, session_id, messages).await?);
        }
        Ok(Listings {
            messages,
            first,
            warm,
            uncached: Vec::new(),
        })
    }

    /// Adds `loads` listings on `store`, a store without the cache (after one to open it).
    pub async fn run_uncached<S: Store>(
        &mut self,
        store: &S,
        tenant: &Tenant,
        session_id: Id,
        loads: u32,
    ) -> anyhow::Result<()> {
        list(store, tenant, session_id, self.messages).await?;
        for _ in 0..loads {
            self.uncached
                .push(list(store, tenant, session_id, self.messages).await?);
        }
        Ok(())
    }

    pub fn json(&self) -> Value {
        let mut figures = json!({
            "messages": self.messages,
            "first_ms": round(ms(self.first), 4),
            "warm_ms_median": round(percentile_ms(&self.warm, 50.0), 4),
            "warm_loads": self.warm.len(),
        });
        if !self.uncached.is_empty() {
            figures["warm_uncached_ms_median"] =
                json!(round(percentile_ms(&self.uncached, 50.0), 4));
        }
        figures
    }

    /// The human table's rows.
    pub fn rows(&self) -> Vec<Vec<String>> {
        let mut rows = vec![
            vec![
                "W3m".into(),
                format!("list {} messages, first", self.messages),
                format!("{:.3} ms", ms(self.first)),
                String::new(),
            ],
            vec![
                String::new(),
                format!("warm, median of {}", self.warm.len()),
                format!("{:.3} ms", percentile_ms(&self.warm, 50.0)),
                String::new(),
            ],
        ];
        if !self.uncached.is_empty() {
            rows.push(vec![
                String::new(),
                format!(
                    "warm without the session cache, median of {}",
                    self.uncached.len()
                ),
                format!("{:.3} ms", percentile_ms(&self.uncached, 50.0)),
                String::new(),
            ]);
        }
        rows
    }
}
