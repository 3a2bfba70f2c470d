//! The autoscaling settings ([`Autoscale`]) and the worker limit; the autoscaler that applies
//! them is `scaling.rs`.

use std::time::Duration;

use crate::error::{Error, Result};

/// The most workers a processor runs (its `workers`, and an autoscaler's `max_workers` and
/// `reserve`): each is a thread, and a count from a mistaken setting would otherwise start
/// threads until the system refuses. More is [`Error::InvalidArgument`] at start.
pub const MAX_PROCESSOR_WORKERS: usize = 1024;

/// Autoscaling by backlog: every `check_interval` the processor wants
/// `ceil(backlog / messages_per_worker) + reserve` workers, clamped to
/// `min_workers..=max_workers`, where the backlog is the queue's receivable messages plus those
/// the processor holds locked (being handled or prefetched). Workers are added at once and retired when they find the queue
/// empty.
///
/// # Defaults
///
/// `messages_per_worker` 20, `check_interval` 5 s, `reserve` 0.
///
/// ```
/// use std::time::Duration;
/// let a = postbox::Autoscale::new(0, 5).messages_per_worker(20).check_interval(Duration::from_secs(60)).reserve(1);
/// assert_eq!(a.max_workers, 5);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Autoscale {
    /// Never fewer workers than this (may be 0).
    pub min_workers: usize,
    /// Never more workers than this.
    pub max_workers: usize,
    /// Backlog one worker is expected to handle.
    pub messages_per_worker: u64,
    /// How often the backlog is measured.
    pub check_interval: Duration,
    /// Workers kept beyond what the backlog asks for.
    pub reserve: usize,
}

impl Autoscale {
    /// Scales between `min_workers` and `max_workers`, with the other settings at their
    /// defaults.
    pub fn new(min_workers: usize, max_workers: usize) -> Autoscale {
        Autoscale {
            min_workers,
            max_workers,
            messages_per_worker: 20,
            check_interval: Duration::from_secs(5),
            reserve: 0,
        }
    }
    /// Sets `messages_per_worker`.
    pub fn messages_per_worker(mut self, n: u64) -> Self {
        self.messages_per_worker = n;
        self
    }
    /// Sets `check_interval`.
    pub fn check_interval(mut self, d: Duration) -> Self {
        self.check_interval = d;
        self
    }
    /// Sets `reserve`.
    pub fn reserve(mut self, n: usize) -> Self {
        self.reserve = n;
        self
    }

    pub(super) fn validate(&self) -> Result<()> {
        if self.max_workers == 0 || self.min_workers > self.max_workers {
            return Err(Error::invalid(
                "autoscale needs 0 <= min_workers <= max_workers and max_workers >= 1",
            ));
        }
        if self.max_workers > MAX_PROCESSOR_WORKERS || self.reserve > MAX_PROCESSOR_WORKERS {
            return Err(Error::invalid(format!(
                "autoscale's max_workers and reserve are at most {MAX_PROCESSOR_WORKERS}"
            )));
        }
        if self.messages_per_worker == 0 || self.check_interval.is_zero() {
            return Err(Error::invalid(
                "autoscale needs messages_per_worker >= 1 and a positive check_interval",
            ));
        }
        Ok(())
    }

    /// The workers wanted for `backlog`.
    pub(super) fn desired(&self, backlog: u64) -> usize {
        let want = backlog.div_ceil(self.messages_per_worker);
        let want = usize::try_from(want)
            .unwrap_or(usize::MAX)
            .saturating_add(self.reserve);
        want.clamp(self.min_workers, self.max_workers)
    }
}
