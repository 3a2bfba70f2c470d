//! The autoscaler: measures the backlog and sets the wanted worker count, as the
//! [`Autoscale`](crate::Autoscale) settings (`autoscale.rs`) say. It waits on the processor's
//! condition variable, so a stop wakes it at once.

use std::sync::Arc;
use std::time::Instant;

use super::{Shared, worker};
use crate::error::{Error, Result};

pub(super) fn spawn_autoscaler(sh: &Arc<Shared>) -> Result<()> {
    super::spawn_background(sh, "postbox-autoscale", autoscaler)
}

/// Measures the backlog every `check_interval` and sets the wanted worker count: spawns
/// workers up to it at once; surplus workers retire themselves when they find the queue empty.
fn autoscaler(sh: &Arc<Shared>) {
    let Some(a) = sh.config.autoscale else {
        return;
    };
    loop {
        {
            let mut st = sh.state.lock();
            let deadline = Instant::now().checked_add(a.check_interval);
            while !st.stopping {
                match deadline {
                    Some(d) => {
                        if sh.cv.wait_until(&mut st, d).timed_out() {
                            break;
                        }
                    }
                    None => sh.cv.wait(&mut st),
                }
            }
            if st.stopping {
                return;
            }
        }
        let active = match sh.queue.stats() {
            Ok(s) => s.active,
            Err(e @ (Error::Closed | Error::QueueNotFound(_))) => {
                tracing::warn!(queue = %sh.queue.name(), error = %e, "processor stops");
                sh.stop();
                return;
            }
            Err(e) => {
                tracing::warn!(
                    queue = %sh.queue.name(),
                    error = %e,
                    "processor could not measure its backlog"
                );
                continue;
            }
        };
        let (spawn, shrink) = {
            let mut st = sh.state.lock();
            // Every lock the processor holds (handled or prefetched) is backlog too.
            let backlog = active.saturating_add(st.watched.len() as u64);
            let desired = a.desired(backlog);
            st.target = desired;
            (desired.saturating_sub(st.live), desired < st.live)
        };
        for _ in 0..spawn {
            if let Err(e) = worker::spawn_one(sh) {
                tracing::error!(
                    queue = %sh.queue.name(),
                    error = %e,
                    "processor could not add a worker"
                );
                break;
            }
        }
        if shrink {
            // Waking the idle workers lets the surplus retire.
            sh.wake_idle();
        }
    }
}
