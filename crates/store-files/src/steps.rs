//! Agent memory steps in the files backend: queued appends (idempotent per step number) and
//! reads that skip (and count) steps that could not be read from disk.

use stepwise_core::{Id, Step, new_id};
use stepwise_store::rules::check_step_number;
use stepwise_store::{Ack, Loaded, NewStep, Result, StepAppend, StoreError, Tenant};

use crate::state::StoredStep;
use crate::{FileStore, check_depth};
use stepwise_store::StepMirror;

fn decode_steps<'a>(steps: impl Iterator<Item = &'a StoredStep>, loaded: &mut Loaded<Step>) {
    for s in steps {
        match s {
            StoredStep::Decoded(step) => loaded.items.push(step.clone()),
            StoredStep::Damaged(_) => loaded.skipped += 1,
        }
    }
}

impl stepwise_store::StepStore for FileStore {
    /// The step, then its mirror as separate writes.
    async fn append_step_mirrored(
        &self,
        tenant: &Tenant,
        new: NewStep,
        mirror: StepMirror,
    ) -> Result<Ack<StepAppend>> {
        stepwise_store::separately::append_step_mirrored(self, tenant, new, mirror).await
    }

    async fn append_step(&self, tenant: &Tenant, new: NewStep) -> Result<Ack<StepAppend>> {
        check_depth(
            "body",
            std::iter::once(&new.body.output)
                .chain(new.body.tool_calls.iter().map(|c| &c.arguments)),
        )?;
        check_step_number(new.step_number)?;
        let now = self.now();
        let mut state = self.lock();
        let Some((key, entry)) = state.exec_mut(tenant.as_str(), new.execution_id) else {
            return Err(StoreError::NotFound("execution"));
        };
        if let Some(existing) = entry.steps.get(&new.step_number) {
            // The same step again is a no-op; anything else under its number a conflict.
            return match existing {
                StoredStep::Decoded(step) if step.kind == new.kind && step.body() == new.body => {
                    let step = step.clone();
                    Ok(self.enqueue(
                        &mut state,
                        StepAppend {
                            step,
                            created: false,
                        },
                    ))
                }
                _ => Err(StoreError::Conflict(format!(
                    "step {} of this execution already exists with another body",
                    new.step_number
                ))),
            };
        }
        if entry.execution.status.is_finished() {
            return Err(StoreError::InvalidState(format!(
                "the execution is {}; no more steps can be added",
                entry.execution.status
            )));
        }
        let usage = new.body.token_usage;
        let step = Step::from_body(
            new_id(),
            new.execution_id,
            entry.execution.session_id,
            new.step_number,
            new.kind,
            new.body,
            now,
        );
        entry
            .steps
            .insert(new.step_number, StoredStep::Decoded(step.clone()));
        let e = &mut entry.execution;
        e.step_count = e.step_count.max(u64::from(new.step_number));
        e.token_usage.add(&usage);
        e.updated_at = now;
        state.touch(&key, false);
        state.reactivate(&key, now);
        Ok(self.enqueue(
            &mut state,
            StepAppend {
                step,
                created: true,
            },
        ))
    }

    async fn list_steps(&self, tenant: &Tenant, execution_id: Id) -> Result<Loaded<Step>> {
        let mut loaded = Loaded {
            items: Vec::new(),
            skipped: 0,
        };
        if let Some((_, entry)) = self.lock().exec(tenant.as_str(), execution_id) {
            decode_steps(entry.steps.values(), &mut loaded);
        }
        self.count_skipped(loaded.skipped);
        Ok(loaded)
    }

    async fn list_session_steps(&self, tenant: &Tenant, session_id: Id) -> Result<Loaded<Step>> {
        let mut loaded = Loaded {
            items: Vec::new(),
            skipped: 0,
        };
        if let Some(container) = self.lock().session(tenant.as_str(), session_id) {
            for entry in &container.executions {
                decode_steps(entry.steps.values(), &mut loaded);
            }
            loaded.skipped += container.orphan_damaged_steps();
        }
        self.count_skipped(loaded.skipped);
        Ok(loaded)
    }

    /// No session cache here: every row of the session is new.
    async fn list_session_steps_after(
        &self,
        tenant: &Tenant,
        session_id: Id,
        _after: i64,
    ) -> Result<stepwise_store::StepsAfter> {
        let loaded = self.list_session_steps(tenant, session_id).await?;
        Ok(stepwise_store::cache::whole_session(loaded))
    }
}
