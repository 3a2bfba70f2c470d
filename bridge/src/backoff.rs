//! Truncated exponential backoff with jitter, so that many bridges cut off by one broker
//! restart do not all come back at the same instant.

use std::time::Duration;

use crate::config::RetryConfig;

/// The wait before the next attempt: doubles per failure up to the bound, reset on success.
#[derive(Debug)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
    seed: u64,
}

impl Backoff {
    pub(crate) fn new(retry: &RetryConfig) -> Backoff {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.as_nanos() as u64)
            | 1;
        Backoff {
            initial: retry.initial(),
            max: retry.max(),
            next: retry.initial(),
            seed,
        }
    }

    /// The wait for this failure: between half and all of the current step.
    pub(crate) fn fail(&mut self) -> Duration {
        let step = self.next;
        self.next = (self.next * 2).min(self.max);
        // xorshift: jitter needs no quality, only spread.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let half = step / 2;
        half + Duration::from_nanos(self.seed % (half.as_nanos() as u64).max(1))
    }

    /// A success: the next failure waits the initial step again.
    pub(crate) fn reset(&mut self) {
        self.next = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_bound_and_resets() {
        let mut b = Backoff::new(&RetryConfig {
            initial_ms: 100,
            max_ms: 800,
            poison_after: 3,
            confirm_timeout_ms: 15_000,
        });
        let waits: Vec<Duration> = (0..6).map(|_| b.fail()).collect();
        for (w, step) in waits.iter().zip([100u64, 200, 400, 800, 800, 800]) {
            assert!(*w >= Duration::from_millis(step / 2) && *w <= Duration::from_millis(step));
        }
        b.reset();
        assert!(b.fail() <= Duration::from_millis(100));
    }
}
