//! A thread that deletes idle queues (`auto_delete_on_idle`) while the store has any: their
//! deletion is due at a time when nobody may be writing, so the commits that carry the other
//! time-driven work cannot be relied on for it (docs/design.md § Idle deletion).

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::sync::{Condvar, Mutex};

/// The longest the thread sleeps: what it cannot know in advance (a lock released, a queue
/// created or made idle by another process) is seen within this, and an idle process is not
/// woken more often (invariant 15).
pub const PERIOD: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Flags {
    stopped: bool,
    /// Look again now: this process opened a queue that asks for idle deletion.
    poked: bool,
}

pub struct Janitor {
    flags: Arc<(Mutex<Flags>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Janitor {
    /// Runs `tick` at once, then again after the wait each call returns (at most [`PERIOD`]),
    /// until stopped or `tick` returns `None`.
    pub fn start(mut tick: impl FnMut() -> Option<Duration> + Send + 'static) -> Option<Janitor> {
        let flags = Arc::new((Mutex::new(Flags::default()), Condvar::new()));
        let shared = flags.clone();
        let thread = std::thread::Builder::new()
            .name("postbox-janitor".into())
            .spawn(move || {
                let (lock, cv) = &*shared;
                let mut wait = Duration::ZERO;
                let mut f = lock.lock();
                loop {
                    if !f.poked && !wait.is_zero() {
                        let _ = cv.wait_for(&mut f, wait.min(PERIOD));
                    }
                    if f.stopped {
                        return;
                    }
                    f.poked = false;
                    drop(f);
                    let next = tick();
                    f = lock.lock();
                    match next {
                        Some(d) => wait = d,
                        None => return,
                    }
                }
            })
            .ok()?;
        Some(Janitor {
            flags,
            thread: Some(thread),
        })
    }

    /// Makes the thread look again now (a queue with a short idle period may be due before
    /// its next look).
    pub fn poke(&self) {
        self.flags.0.lock().poked = true;
        self.flags.1.notify_all();
    }

    /// Whether the thread has ended (`tick` said there was nothing left to watch).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Stops the thread and waits for it (unless this is that thread: the last handle to a
    /// store may be dropped by its own janitor).
    pub fn stop(mut self) {
        self.flags.0.lock().stopped = true;
        self.flags.1.notify_all();
        if let Some(t) = self.thread.take()
            && t.thread().id() != std::thread::current().id()
        {
            let _ = t.join();
        }
    }

    /// Lets the thread go without waiting (in a forked child, where it does not exist).
    pub fn leak(mut self) {
        if let Some(t) = self.thread.take() {
            std::mem::forget(t);
        }
        std::mem::forget(self);
    }
}
