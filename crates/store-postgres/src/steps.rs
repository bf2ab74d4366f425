//! Steps on PostgreSQL: appended through the group-commit writer (encoded here, off the
//! writer task), listed per execution or per session; a row that cannot be decoded is
//! skipped and counted.

use std::sync::atomic::Ordering;

use stepwise_core::{Id, Step, codec, new_id};
use stepwise_store::rules::check_step_number;
use stepwise_store::{Ack, Loaded, NewStep, Result, StepAppend, StoreError, Tenant};

use crate::PgStore;
use crate::sql::{self, args, map_pg, step_cols};
use crate::writer::StepJob;

const EXECUTION_STEPS: &str = concat!(
    "SELECT ",
    step_cols!(),
    " FROM steps s WHERE s.execution_id = $1 AND s.tenant_id = $2 ORDER BY s.step_number"
);
/// Executions in creation order, each one's steps in order.
const SESSION_STEPS: &str = concat!(
    "SELECT ",
    step_cols!(),
    " FROM executions e JOIN steps s ON s.execution_id = e.id \
     WHERE e.session_id = $1 AND e.tenant_id = $2 ORDER BY e.created_at, e.id, s.step_number"
);

/// Decodes the payloads; rows that do not decode are skipped, logged and counted in the
/// store's decode errors.
fn decode(store: &PgStore, rows: Vec<sql::StepRow>) -> Loaded<Step> {
    let mut items = Vec::with_capacity(rows.len());
    let mut skipped = 0;
    for row in rows {
        match codec::decode_step(&row.payload) {
            Ok(body) => items.push(Step::from_body(
                row.id,
                row.execution_id,
                row.session_id,
                row.step_number,
                row.kind,
                body,
                row.created_at,
            )),
            Err(e) => {
                skipped += 1;
                tracing::warn!(execution = %row.execution_id, step = row.step_number, error = %e, "skipping a stored step that cannot be decoded");
            }
        }
    }
    store
        .inner
        .decode_errors
        .fetch_add(skipped, Ordering::Relaxed);
    Loaded { items, skipped }
}

impl stepwise_store::StepStore for PgStore {
    async fn append_step(&self, tenant: &Tenant, new: NewStep) -> Result<Ack<StepAppend>> {
        check_step_number(new.step_number)?;
        if new.step_number > i32::MAX as u32 {
            return Err(StoreError::invalid(
                "step_number",
                "the step number is too large",
            ));
        }
        // Encode (and compress) here, off the writer task.
        let payload = codec::encode_step(&new.body, self.inner.options.compress_threshold);
        self.inner
            .writer
            .step(
                self.shard_key(new.execution_id),
                StepJob {
                    tenant: tenant.as_str().to_string(),
                    new,
                    payload,
                    id: new_id(),
                    now: self.now(),
                },
            )
            .await
    }

    async fn append_step_mirrored(
        &self,
        tenant: &Tenant,
        new: NewStep,
        mirror: stepwise_store::StepMirror,
    ) -> Result<Ack<StepAppend>> {
        self.write_step_mirrored(tenant, new, mirror).await
    }

    async fn list_steps(&self, tenant: &Tenant, execution_id: Id) -> Result<Loaded<Step>> {
        let client = self.client().await?;
        let rows = client
            .query_typed(EXECUTION_STEPS, args![execution_id, tenant.as_str()])
            .await
            .map_err(map_pg)?;
        Ok(decode(self, sql::collect(&rows, sql::step_row)?))
    }

    async fn list_session_steps(&self, tenant: &Tenant, session_id: Id) -> Result<Loaded<Step>> {
        let client = self.client().await?;
        let rows = client
            .query_typed(SESSION_STEPS, args![session_id, tenant.as_str()])
            .await
            .map_err(map_pg)?;
        Ok(decode(self, sql::collect(&rows, sql::step_row)?))
    }

    async fn list_session_steps_after(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
    ) -> Result<stepwise_store::StepsAfter> {
        self.session_steps_after(tenant, session_id, after).await
    }
}
