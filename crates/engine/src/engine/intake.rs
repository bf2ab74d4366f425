//! Intake: how many messages a node queues at once while its runs work, set by measuring
//! whether they compete for the cores.
//!
//! Queueing a message is a short burst of CPU and one write. Under a flood of messages every
//! request in flight competes with the running executions for the same cores, and a few
//! dozen clients could take nearly all of them. A fixed small limit protects the runs but
//! wastes idle cores: on a machine with cores to spare, one run working throttled intake to
//! a quarter of what the node takes with no run at all. So the limit is measured:
//!
//! - While no run of this node is doing its own work (none runs, or every run waits for its
//!   agent's model), intake is not held at all.
//! - Otherwise the node measures two things, at most every [`SAMPLE_EVERY`], when messages
//!   arrive: the machine's CPU pressure (Linux's `/proc/pressure/cpu`: the share of time some
//!   thread was ready to run but waited for a core) and the store's write backlog (writes
//!   queued in this process and not yet committed, which the runs' writes wait behind).
//!   While the pressure stays below [`CONTENDED_SHARE`] and the backlog below
//!   [`Intake::backlog_limit`], the cores and the writer have room: the limit doubles, up to
//!   [`MAX_LIMIT`]. Otherwise runs and intake wait for the same cores or the same writer: the
//!   limit halves, down to [`Intake::floor`] (a quarter of the workers, the limit before it
//!   was measured). Messages over the limit wait their turn, in order, without using a core.
//! - Without that file (another system, or a kernel without pressure stall information) the
//!   limit stays at the floor, as before.
//!
//! `--intake-concurrency N` fixes the limit at N instead (measured or not), as before.
//!
//! The runtime's own scheduling delay was tried first as the measure. It missed the
//! contention that matters on SQLite: the runs' writes wait for the writer thread, which the
//! intake's CPU slows without making the runtime's queue any longer.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, SemaphorePermit};

/// Where Linux reports CPU pressure.
const PRESSURE_FILE: &str = "/proc/pressure/cpu";

/// How often the pressure is read (at most: only when messages arrive while runs work).
pub(super) const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// The share of time some thread waited for a core at which intake counts as competing.
/// A machine with cores to spare stays near 0; two cores shared by eight demo runs and
/// their writer show about 10 %, and 20-30 % once a flood of messages joins them.
pub(super) const CONTENDED_SHARE: f64 = 0.10;

/// The most messages queued at once while the limit is measured (the node's request cap
/// holds the rest).
pub(super) const MAX_LIMIT: usize = 512;

/// The limit on messages queued at once while runs work (see the module docs).
pub(super) struct Intake {
    permits: Semaphore,
    /// The limit now: permits handed out plus available, less those still to be withheld.
    limit: AtomicUsize,
    /// Permits to withhold as they come back, once the limit fell below those handed out.
    withheld: AtomicUsize,
    /// The lowest limit (and the only one when not measured).
    floor: usize,
    /// The write backlog at which the store counts as contended: four writes for each
    /// worker, at least 32.
    backlog_limit: u64,
    /// The last pressure reading (when, the stall total in microseconds); `None` when the
    /// limit is not measured.
    pressure: Option<Mutex<(Instant, u64)>>,
    /// Messages that waited for their turn (for `/metrics`).
    waited: AtomicU64,
}

/// A message's turn: returns its permit when dropped (or withholds it while the limit falls).
pub(super) struct Turn<'a> {
    intake: &'a Intake,
    permit: Option<SemaphorePermit<'a>>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        let owed = self
            .intake
            .withheld
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if owed.is_ok() {
            permit.forget();
        }
    }
}

impl Intake {
    /// `concurrency`: `--intake-concurrency` (0: measured, from `workers`).
    pub(super) fn new(concurrency: usize, workers: usize) -> Self {
        let (floor, pressure) = match concurrency {
            0 => (
                workers.div_ceil(4).clamp(1, 8),
                read_stall_total().map(|total| Mutex::new((Instant::now(), total))),
            ),
            n => (n, None),
        };
        Intake {
            permits: Semaphore::new(floor),
            limit: AtomicUsize::new(floor),
            withheld: AtomicUsize::new(0),
            floor,
            backlog_limit: (workers as u64 * 4).max(32),
            pressure,
            waited: AtomicU64::new(0),
        }
    }

    /// Waits for a message's turn to be queued. `runs_working`: whether some run of this
    /// node is doing its own work now (else the message goes at once, not counted);
    /// `backlog`: reads the store's write backlog (only when the limit is sampled).
    pub(super) async fn turn(&self, runs_working: bool, backlog: impl FnOnce() -> u64) -> Turn<'_> {
        if !runs_working {
            return Turn {
                intake: self,
                permit: None,
            };
        }
        self.sample(backlog);
        let permit = match self.permits.try_acquire() {
            Ok(permit) => Some(permit),
            Err(_) => {
                self.waited.fetch_add(1, Ordering::Relaxed);
                // (Closed only when the engine is dropped: never while a request holds it.)
                self.permits.acquire().await.ok()
            }
        };
        Turn {
            intake: self,
            permit,
        }
    }

    /// Reads the pressure when the last reading is [`SAMPLE_EVERY`] old (one reader at a
    /// time; the others go on with the limit as it is) and moves the limit.
    fn sample(&self, backlog: impl FnOnce() -> u64) {
        let Some(pressure) = &self.pressure else {
            return;
        };
        let Ok(mut last) = pressure.try_lock() else {
            return;
        };
        let now = Instant::now();
        let elapsed = now.duration_since(last.0);
        if elapsed < SAMPLE_EVERY {
            return;
        }
        let Some(total) = read_stall_total() else {
            return;
        };
        let stalled = Duration::from_micros(total.saturating_sub(last.1));
        *last = (now, total);
        drop(last);
        let pressure = stalled.as_secs_f64() / elapsed.as_secs_f64();
        self.adjust(pressure >= CONTENDED_SHARE || backlog() >= self.backlog_limit);
    }

    /// Doubles the limit while the cores have room; halves it (to the floor) while they
    /// do not.
    fn adjust(&self, contended: bool) {
        let limit = self.limit.load(Ordering::Relaxed);
        if contended {
            let lower = (limit / 2).max(self.floor);
            if lower < limit {
                self.limit.store(lower, Ordering::Relaxed);
                self.withhold(limit - lower);
            }
        } else {
            let higher = (limit * 2).min(MAX_LIMIT);
            if higher > limit {
                self.limit.store(higher, Ordering::Relaxed);
                self.permits.add_permits(higher - limit);
            }
        }
    }

    /// Takes `count` permits out of circulation: the available ones now, the rest as the
    /// messages holding them finish.
    fn withhold(&self, count: usize) {
        let mut left = count;
        while left > 0 {
            match self.permits.try_acquire() {
                Ok(permit) => {
                    permit.forget();
                    left -= 1;
                }
                Err(_) => break,
            }
        }
        self.withheld.fetch_add(left, Ordering::Relaxed);
    }

    /// Messages queued at once now while runs work.
    pub(super) fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Messages that have waited for their turn since the node started.
    pub(super) fn waited(&self) -> u64 {
        self.waited.load(Ordering::Relaxed)
    }
}

/// The total time some thread waited for a core, in microseconds, from
/// [`PRESSURE_FILE`]'s `some ... total=N` line; `None` where there is no such file.
fn read_stall_total() -> Option<u64> {
    parse_stall_total(&std::fs::read_to_string(PRESSURE_FILE).ok()?)
}

fn parse_stall_total(text: &str) -> Option<u64> {
    let some = text.lines().find(|line| line.starts_with("some "))?;
    some.split_whitespace()
        .find_map(|field| field.strip_prefix("total="))?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The permits in circulation: available, plus handed out, less those to be withheld.
    fn circulating(intake: &Intake, handed_out: usize) -> usize {
        intake.permits.available_permits() + handed_out - intake.withheld.load(Ordering::Relaxed)
    }

    fn measured(workers: usize) -> Intake {
        let mut intake = Intake::new(0, workers);
        // The limit's moves, whether or not this machine reports pressure.
        intake.pressure = Some(Mutex::new((Instant::now(), 0)));
        intake
    }

    #[test]
    fn idle_cores_raise_the_limit_and_contended_ones_lower_it_to_the_floor() {
        let intake = measured(8);
        assert_eq!(intake.limit(), 2, "a quarter of the workers to start");
        for _ in 0..3 {
            intake.adjust(false);
        }
        assert_eq!(intake.limit(), 16);
        assert_eq!(circulating(&intake, 0), 16);
        for _ in 0..10 {
            intake.adjust(false);
        }
        assert_eq!(intake.limit(), MAX_LIMIT);
        assert_eq!(circulating(&intake, 0), MAX_LIMIT);
        for _ in 0..20 {
            intake.adjust(true);
        }
        assert_eq!(intake.limit(), 2, "never below the floor");
        assert_eq!(circulating(&intake, 0), 2);
    }

    #[test]
    fn permits_held_while_the_limit_falls_are_withheld_when_they_come_back() {
        let intake = measured(4);
        for _ in 0..3 {
            intake.adjust(false);
        }
        assert_eq!(intake.limit(), 8);
        let turns: Vec<Turn<'_>> = (0..8)
            .map(|_| Turn {
                intake: &intake,
                permit: Some(intake.permits.try_acquire().expect("a permit")),
            })
            .collect();
        assert!(intake.permits.try_acquire().is_err(), "all eight are out");
        intake.adjust(true);
        assert_eq!(intake.limit(), 4);
        intake.adjust(true);
        intake.adjust(true);
        assert_eq!(intake.limit(), 1);
        assert_eq!(circulating(&intake, 8), 1);
        drop(turns);
        assert_eq!(intake.permits.available_permits(), 1);
        assert_eq!(intake.withheld.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_write_backlog_counts_as_contention_whatever_the_cores_say() {
        if read_stall_total().is_none() {
            return; // (no pressure file here: the limit is not measured)
        }
        let intake = measured(8);
        intake.adjust(false);
        intake.adjust(false);
        assert_eq!(intake.limit(), 8);
        let long_ago = || Mutex::new((Instant::now() - SAMPLE_EVERY * 2, u64::MAX));
        // (A stall total above any reading: the pressure since reads as none.)
        let mut intake = intake;
        intake.pressure = Some(long_ago());
        intake.sample(|| intake.backlog_limit - 1);
        assert_eq!(intake.limit(), 16, "no pressure, a short backlog: room");
        intake.pressure = Some(long_ago());
        intake.sample(|| intake.backlog_limit);
        assert_eq!(intake.limit(), 8, "a backlog at the limit: contended");
        intake.sample(|| 10_000);
        assert_eq!(intake.limit(), 8, "read again only after SAMPLE_EVERY");
    }

    #[test]
    fn the_pressure_line_gives_the_stall_total() {
        let text = "some avg10=0.52 avg60=3.67 avg300=2.89 total=52945565\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse_stall_total(text), Some(52_945_565));
        assert_eq!(parse_stall_total("full avg10=0.00 total=7\n"), None);
        assert_eq!(parse_stall_total("some avg10=0.00 total=x\n"), None);
    }

    #[tokio::test]
    async fn a_fixed_concurrency_is_not_measured_and_no_run_working_holds_nothing() {
        let intake = Intake::new(3, 8);
        let held: Vec<Turn<'_>> = [
            intake.turn(true, || 0).await,
            intake.turn(true, || 0).await,
            intake.turn(true, || 0).await,
        ]
        .into();
        assert_eq!(intake.limit(), 3);
        assert!(intake.pressure.is_none(), "a fixed limit is not measured");
        let free = intake.turn(false, || 0).await;
        assert!(free.permit.is_none(), "no run working: not held");
        let waiting =
            tokio::time::timeout(Duration::from_millis(50), intake.turn(true, || 0)).await;
        assert!(waiting.is_err(), "the fourth waits while runs work");
        assert_eq!(intake.waited(), 1);
        drop(held);
        let next = tokio::time::timeout(Duration::from_secs(5), intake.turn(true, || 0)).await;
        assert!(next.is_ok_and(|t| t.permit.is_some()));
    }
}
