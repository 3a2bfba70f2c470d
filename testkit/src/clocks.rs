//! Durations and clocks for deterministic timing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use postbox::Clock;

/// One second.
pub const SEC: Duration = Duration::from_secs(1);

/// `n` milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A clock that stands still at a fixed instant unless advanced: deterministic timestamps (the
/// format fixtures are written with it).
#[derive(Debug)]
pub struct FixedClock(AtomicU64);

impl FixedClock {
    /// A clock standing at `ms` milliseconds after the Unix epoch.
    pub fn at(ms: u64) -> Arc<FixedClock> {
        Arc::new(FixedClock(AtomicU64::new(ms)))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.0.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for FixedClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}
