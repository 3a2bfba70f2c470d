//! The watchdog: renews the locks of messages the workers hold, on a schedule taken from each
//! lock's actual expiry, and cancels handlers past their time limit. It waits on the
//! processor's condition variable, so a stop wakes it at once.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::sync::MutexGuard;

use super::{Shared, State, Track};
use crate::error::Result;

pub(super) fn spawn_watchdog(sh: &Arc<Shared>) -> Result<()> {
    super::spawn_background(sh, "postbox-watchdog", watchdog)
}

/// Shortest wait before a renewal, so that a lock already at its expiry is renewed (or found
/// lost) at once without the watchdog spinning on it.
const MIN_RENEW_WAIT: Duration = Duration::from_millis(1);

/// Shortest wait before retrying a renewal that failed with a possibly passing error.
const MIN_RETRY_WAIT: Duration = Duration::from_millis(5);

/// When to renew a lock that expires at `locked_until` (store-clock ms): once half of its
/// remaining time has passed. The schedule follows each lock's actual expiry, as returned by
/// the receive or the last renewal, never a lock duration read at start: another handle or
/// process may change the queue's `lock_duration` while the processor runs (invariant 12), and
/// the next renewal then applies the new one. `None` once the next renewal would fall past
/// `renew_until` (`max_auto_renew`), or when renewal is off.
pub(super) fn next_renewal(
    sh: &Shared,
    locked_until: u64,
    renew_until: Option<Instant>,
) -> Option<Instant> {
    let remaining = Duration::from_millis(locked_until.saturating_sub(sh.clock.now_ms()));
    Instant::now()
        .checked_add((remaining / 2).max(MIN_RENEW_WAIT))
        .filter(|next| renew_until.is_some_and(|u| *next < u))
}

/// Renews the locks of messages held by workers (handled or prefetched) when half of their
/// remaining lock time has passed ([`next_renewal`]), up to `max_auto_renew` after their
/// receive, and cancels handlers past their time limit. Runs until the processor has stopped
/// and its last worker has exited: locks of handlers that finish during a graceful shutdown
/// still need renewing.
fn watchdog(sh: &Arc<Shared>) {
    let mut st = sh.state.lock();
    loop {
        if st.stopping && st.live == 0 {
            return;
        }
        let now = Instant::now();
        let mut wake: Option<Instant> = None;
        let mut due: Vec<Arc<Track>> = Vec::new();
        for w in st.watched.values_mut() {
            if let Some(d) = w.deadline {
                if d <= now {
                    w.track.timed_out.store(true, Ordering::Release);
                    w.deadline = None;
                } else {
                    wake = Some(wake.map_or(d, |x| x.min(d)));
                }
            }
            if let Some(r) = w.next_renew {
                if r <= now {
                    // Cleared while the renewal runs; set again from its result.
                    w.next_renew = None;
                    due.push(w.track.clone());
                } else {
                    wake = Some(wake.map_or(r, |x| x.min(r)));
                }
            }
        }
        if !due.is_empty() {
            let results = MutexGuard::unlocked(&mut st, || renew_all(sh, &due));
            apply_renewals(sh, &mut st, &due, results);
            continue;
        }
        match wake {
            Some(t) => {
                sh.cv.wait_until(&mut st, t);
            }
            None => sh.cv.wait(&mut st),
        }
    }
}

/// Renews every lock in `due` in one commit.
fn renew_all(sh: &Shared, due: &[Arc<Track>]) -> Vec<Result<u64>> {
    let locks = due.iter().map(|t| t.lock).collect();
    sh.queue.engine.renew_all(locks)
}

fn apply_renewals(sh: &Shared, st: &mut State, due: &[Arc<Track>], results: Vec<Result<u64>>) {
    for (track, r) in due.iter().zip(results) {
        if track.note(&r) {
            continue;
        }
        match r {
            Ok(until) => {
                if let Some(w) = st.watched.get_mut(&track.lock.token) {
                    w.next_renew = next_renewal(sh, until, w.renew_until);
                }
            }
            Err(e) => {
                // Possibly passing (e.g. a full disk): try again soon; the lock may still hold.
                let remaining = track
                    .locked_until
                    .load(Ordering::Acquire)
                    .saturating_sub(sh.clock.now_ms());
                tracing::warn!(
                    queue = %sh.queue.name(),
                    message_id = track.lock.id,
                    error = %e,
                    remaining_lock_ms = remaining,
                    "processor could not renew a lock; retrying"
                );
                if let Some(w) = st.watched.get_mut(&track.lock.token) {
                    let wait = (Duration::from_millis(remaining) / 4).max(MIN_RETRY_WAIT);
                    w.next_renew = Instant::now().checked_add(wait);
                }
            }
        }
    }
}
