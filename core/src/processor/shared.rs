//! The state a processor's workers, watchdog and autoscaler share.

use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use super::config::Config;
use super::gate::Gate;
use super::handler::Handler;
use crate::clock::Clock;
use crate::engine::{Cancel, Signal};
use crate::error::Result;
use crate::queue::Queue;
use crate::sync::Mutex;
use crate::sync::thread;

std::thread_local! {
    /// The id of the processor whose worker runs on this thread (0: none), so that a handler
    /// that shuts its own processor down does not wait for itself.
    pub(super) static WORKER_OF: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

pub(super) struct Shared {
    pub(super) id: u64,
    pub(super) queue: Queue,
    pub(super) config: Config,
    pub(super) handler: Handler,
    pub(super) signal: Arc<Signal>,
    /// The token of the idle workers' waits for messages: cancelled (and replaced) by
    /// `wake_idle` when they must look at the processor's state — a stop, or fewer workers
    /// wanted — so that an idle worker wakes for nothing else.
    pub(super) idle: Mutex<Cancel>,
    /// The worker count last reported (see `report_scale`).
    pub(super) last_scale: Mutex<Option<usize>>,
    pub(super) clock: Arc<dyn Clock>,
    /// Reached through `Deref`, as `sh.state` and `sh.cv`, by the workers and watchers.
    pub(super) gate: Gate,
    pub(super) counters: Counters,
}

/// What a processor counts over its life, read into `ProcessorStats` and `ShutdownReport`.
#[derive(Default)]
pub(super) struct Counters {
    pub(super) processed: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) dead_lettered: AtomicU64,
    pub(super) lock_lost: AtomicU64,
    pub(super) returned: AtomicU64,
    pub(super) unsettled: AtomicU64,
}

impl Deref for Shared {
    type Target = Gate;
    fn deref(&self) -> &Gate {
        &self.gate
    }
}

impl Shared {
    /// Whether this process is a forked child of the one that started the processor: its
    /// threads do not exist here, and its locks (`state`, the queue's signal) may have been
    /// held by one of them at the fork, so they must not be taken.
    pub(super) fn is_forked(&self) -> bool {
        self.queue.engine.is_forked()
    }

    pub(super) fn stop(&self) {
        self.gate.stop();
        self.wake_idle();
        // Workers pausing after an error wait on the queue's signal.
        self.signal.notify();
    }

    /// The token for a worker's next wait for messages (see `idle`).
    pub(super) fn idle_token(&self) -> Cancel {
        self.idle.lock().clone()
    }

    /// Ends the idle workers' waits, so that they look at the processor's state (stopping,
    /// the wanted worker count) again.
    pub(super) fn wake_idle(&self) {
        let old = std::mem::take(&mut *self.idle.lock());
        old.cancel();
    }
}

/// Starts a background thread counted in `State::background`, so `join` waits for it.
pub(super) fn spawn_background(sh: &Arc<Shared>, name: &str, body: fn(&Arc<Shared>)) -> Result<()> {
    let s = sh.clone();
    sh.add_background(|| {
        thread::Builder::new().name(name.to_owned()).spawn(move || {
            body(&s);
            s.background_exited();
        })
    })
}
