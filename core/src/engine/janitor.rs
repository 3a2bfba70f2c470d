//! A thread that deletes idle queues (`auto_delete_on_idle`) while the store has any: their
//! deletion is due at a time when nobody may be writing, so the commits that carry the other
//! time-driven work cannot be relied on for it.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::sync::{Condvar, Mutex};

/// How often idle queues are looked for.
const PERIOD: Duration = Duration::from_secs(1);

pub struct Janitor {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Janitor {
    /// Runs `tick` every second until stopped; `tick` returning false also ends it.
    pub fn start(mut tick: impl FnMut() -> bool + Send + 'static) -> Option<Janitor> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("postbox-janitor".into())
            .spawn(move || {
                let (lock, cv) = &*flag;
                let mut stopped = lock.lock();
                loop {
                    let _ = cv.wait_for(&mut stopped, PERIOD);
                    if *stopped {
                        return;
                    }
                    drop(stopped);
                    let go_on = tick();
                    stopped = lock.lock();
                    if !go_on {
                        return;
                    }
                }
            })
            .ok()?;
        Some(Janitor {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for it (unless this is that thread: the last handle to a
    /// store may be dropped by its own janitor).
    pub fn stop(mut self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
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
