//! Ending a binding's waits from another thread: what lets Python's Ctrl-C end a blocking
//! receive at once without the wait waking up to look for signals.

use crate::engine::{Cancel, with_interrupt};

/// Ends the waits that [`interruptible`] runs with it, from any thread. Cheap to clone; every
/// clone fires the same interrupt, once (make a new one for the next wait).
#[derive(Debug, Clone, Default)]
pub struct Interrupt(Cancel);

impl Interrupt {
    /// An interrupt not fired yet.
    pub fn new() -> Interrupt {
        Interrupt::default()
    }

    /// Ends the waits running with this interrupt, and any started with it later.
    pub fn fire(&self) {
        self.0.cancel();
    }

    /// Whether [`Interrupt::fire`] was called.
    pub fn is_fired(&self) -> bool {
        self.0.is_cancelled()
    }
}

/// Runs `f` on this thread so that every postbox wait it makes — receives of every kind, a
/// transaction's receive, `peek_wait`, session accepts and receives, `Job::wait`,
/// `Processor::join` — ends as if its time were up (returning what a timeout returns) once
/// `interrupt` fires, at once if it has already. The caller then decides whether to wait again.
///
/// ```
/// use std::time::Duration;
/// use postbox::binding::{Interrupt, interruptible};
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
/// let q = store.queue("jobs")?;
/// let interrupt = Interrupt::new();
/// let fire = interrupt.clone();
/// std::thread::spawn(move || fire.fire());
/// // Returns once fired, long before the hour is up.
/// let got = interruptible(&interrupt, || q.receive(Duration::from_secs(3600)))?;
/// assert!(got.is_none());
/// # Ok::<(), postbox::Error>(())
/// ```
pub fn interruptible<R>(interrupt: &Interrupt, f: impl FnOnce() -> R) -> R {
    with_interrupt(&interrupt.0, f)
}

/// Whether the interrupt this thread runs under ([`interruptible`]) has fired: for a binding's
/// own waits that poll.
pub fn interrupted() -> bool {
    crate::engine::thread_interrupt().is_some_and(|c| c.is_cancelled())
}
