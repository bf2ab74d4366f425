//! An injectable clock, so retention and lease expiry can be tested without sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::time::Timestamp;

pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;
}

/// The real clock (strictly increasing within the process).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that tests set and advance by hand. Each reading moves it on by one
/// microsecond so that rows written in a row still have distinct times.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub fn new(start: Timestamp) -> Arc<Self> {
        Arc::new(ManualClock(AtomicI64::new(start.0)))
    }

    pub fn set(&self, at: Timestamp) {
        self.0.store(at.0, Ordering::SeqCst);
    }

    pub fn advance_secs(&self, secs: i64) {
        self.0.fetch_add(secs * 1_000_000, Ordering::SeqCst);
    }

    pub fn advance_days(&self, days: i64) {
        self.advance_secs(days * 86_400);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.fetch_add(1, Ordering::SeqCst))
    }
}

pub type SharedClock = Arc<dyn Clock>;

pub fn system_clock() -> SharedClock {
    Arc::new(SystemClock)
}
