//! The retry policy: how long a failed message waits before it is delivered again.

use std::time::Duration;

/// How long a failed message waits before it is delivered again: `initial` after the first
/// delivery, multiplied by `multiplier` for every further delivery, never more than `max`.
///
/// # Defaults
///
/// `initial` 100 ms, `multiplier` 2, `max` 60 s.
///
/// ```
/// use std::time::Duration;
/// let p = postbox::RetryPolicy::exponential(Duration::from_millis(100), Duration::from_secs(1));
/// assert_eq!(p.delay(1), Duration::from_millis(100));
/// assert_eq!(p.delay(3), Duration::from_millis(400));
/// assert_eq!(p.delay(10), Duration::from_secs(1));
/// assert_eq!(postbox::RetryPolicy::immediate().delay(5), Duration::ZERO);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Delay after the first failed delivery.
    pub initial: Duration,
    /// Growth factor per further delivery.
    pub multiplier: u32,
    /// Upper bound of the delay.
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::exponential(Duration::from_millis(100), Duration::from_secs(60))
    }
}

impl RetryPolicy {
    /// Redelivers at once.
    pub fn immediate() -> RetryPolicy {
        RetryPolicy {
            initial: Duration::ZERO,
            multiplier: 1,
            max: Duration::ZERO,
        }
    }

    /// Doubles the delay from `initial` on every delivery, up to `max`.
    pub fn exponential(initial: Duration, max: Duration) -> RetryPolicy {
        RetryPolicy {
            initial,
            multiplier: 2,
            max,
        }
    }

    /// The delay before the next delivery of a message that failed on its
    /// `delivery_count`-th delivery.
    pub fn delay(&self, delivery_count: u32) -> Duration {
        let mut d = self.initial;
        for _ in 1..delivery_count {
            if d >= self.max {
                break;
            }
            d = d.saturating_mul(self.multiplier);
        }
        d.min(self.max)
    }
}
