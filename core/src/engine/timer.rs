//! Wakes async waiters at a time: the poll of a shared store's file and the deadline of a
//! receive future there (docs/design.md § Waiting).
//!
//! One thread per store, started by the first entry and ending once no entry is left, so an
//! idle store (and every single-process store, whose async waits the writer answers at their
//! deadline) runs none. An entry is at most the store's poll ceiling ahead of its time of
//! entry, so a future dropped before its entry fires leaves it behind only that long; waking
//! a waker whose future is gone does nothing.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::task::Waker;
use std::time::Instant;

use crate::error::Result;
use crate::sync::{Condvar, Mutex, MutexGuard};

/// The timer of one store.
#[derive(Debug, Default)]
pub struct Timer {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct State {
    entries: BinaryHeap<Reverse<Entry>>,
    seq: u64,
    running: bool,
    /// The thread last started (perhaps ended since), for `stop` to wait for.
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Debug)]
struct Entry {
    at: Instant,
    seq: u64,
    waker: Waker,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

impl Timer {
    /// Wakes `waker` at `at` (or soon after).
    ///
    /// # Errors
    ///
    /// `Io` when the timer's thread cannot be started.
    pub fn wake_at(&self, at: Instant, waker: Waker) -> Result<()> {
        let mut st = self.shared.state.lock();
        let first = st.entries.peek().is_none_or(|e| at < e.0.at);
        st.seq += 1;
        let seq = st.seq;
        st.entries.push(Reverse(Entry { at, seq, waker }));
        if st.running {
            if first {
                self.shared.cv.notify_one();
            }
            return Ok(());
        }
        st.running = true;
        drop(st);
        let shared = self.shared.clone();
        let started = std::thread::Builder::new()
            .name("postbox-timer".into())
            .spawn(move || shared.run());
        let mut st = self.shared.state.lock();
        match started {
            Ok(thread) => {
                st.thread = Some(thread);
                Ok(())
            }
            Err(e) => {
                st.running = false;
                st.entries.clear();
                Err(e.into())
            }
        }
    }

    /// Drops every entry and waits for the thread to end: the store closes, and its waiters
    /// were woken already. An entry's waker may hold what the store's close is to free.
    pub fn stop(&self) {
        let (entries, thread) = {
            let mut st = self.shared.state.lock();
            let entries = std::mem::take(&mut st.entries);
            (entries, st.thread.take())
        };
        self.shared.cv.notify_all();
        drop(entries);
        if let Some(t) = thread
            && t.thread().id() != std::thread::current().id()
        {
            let _ = t.join();
        }
    }
}

impl Shared {
    fn run(&self) {
        let mut st = self.state.lock();
        loop {
            let now = Instant::now();
            let mut due = Vec::new();
            while st.entries.peek().is_some_and(|e| e.0.at <= now) {
                if let Some(Reverse(e)) = st.entries.pop() {
                    due.push(e.waker);
                }
            }
            if !due.is_empty() {
                // Outside the lock: a waker may poll its future at once, which may add an entry.
                MutexGuard::unlocked(&mut st, || due.into_iter().for_each(Waker::wake));
                continue;
            }
            match st.entries.peek().map(|e| e.0.at) {
                Some(at) => {
                    self.cv.wait_until(&mut st, at);
                }
                None => {
                    st.running = false;
                    return;
                }
            }
        }
    }
}

#[cfg(all(test, not(shuttle)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;
    use std::time::Duration;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn entries_fire_in_time_order_and_the_thread_ends_when_idle() {
        let timer = Timer::default();
        let early = Arc::new(Count(AtomicUsize::new(0)));
        let late = Arc::new(Count(AtomicUsize::new(0)));
        let now = Instant::now();
        timer
            .wake_at(now + Duration::from_millis(200), Waker::from(late.clone()))
            .unwrap();
        timer
            .wake_at(now + Duration::from_millis(20), Waker::from(early.clone()))
            .unwrap();
        while early.0.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(now.elapsed() >= Duration::from_millis(20));
        while late.0.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(now.elapsed() >= Duration::from_millis(200));
        let deadline = Instant::now() + Duration::from_secs(10);
        while timer.shared.state.lock().running {
            assert!(Instant::now() < deadline, "the idle timer thread ends");
            std::thread::sleep(Duration::from_millis(5));
        }
        // It starts again for the next entry.
        let again = Arc::new(Count(AtomicUsize::new(0)));
        timer
            .wake_at(Instant::now(), Waker::from(again.clone()))
            .unwrap();
        while again.0.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
