//! Helpers shared by the integration tests (each test file includes this with `mod common;`).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use postbox::{Clock, Durability, ManualClock, Queue, Store};
use tempfile::TempDir;

/// One second.
pub const SEC: Duration = Duration::from_secs(1);

/// `n` milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A store in a fresh temporary directory, driven by a manual clock.
pub struct TestStore {
    pub dir: TempDir,
    pub path: PathBuf,
    pub clock: Arc<ManualClock>,
    store: Option<Store>,
}

impl TestStore {
    /// A new store (default durability) whose time moves only with `clock.advance`.
    pub fn new() -> TestStore {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("test.postbox");
        let clock = ManualClock::new();
        let store = open_with(&path, &clock);
        TestStore {
            dir,
            path,
            clock,
            store: Some(store),
        }
    }

    pub fn store(&self) -> &Store {
        self.store.as_ref().expect("store is open")
    }

    /// Closes the store and opens the same file again with the same clock. Every other handle
    /// (queues, received messages) must have been dropped: they keep the file open.
    pub fn reopen(&mut self) {
        if let Some(old) = self.store.take() {
            old.close().expect("close");
        }
        self.store = Some(open_with(&self.path, &self.clock));
    }

    /// The manual clock's current time.
    pub fn now(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.clock.now_ms())
    }
}

pub fn open_with(path: &Path, clock: &Arc<ManualClock>) -> Store {
    Store::builder()
        .clock(clock.clone())
        .open(path)
        .expect("open store")
}

pub fn open_fast(path: &Path) -> Store {
    Store::builder()
        .durability(Durability::None)
        .open(path)
        .expect("open store")
}

/// `(active, locked, scheduled, dead_lettered, bytes)` of a queue.
pub fn counts(q: &Queue) -> (u64, u64, u64, u64, u64) {
    let s = q.stats().unwrap();
    (s.active, s.locked, s.scheduled, s.dead_lettered, s.bytes)
}

/// A clock that stands still at a fixed instant unless advanced: deterministic timestamps for
/// the format fixture.
#[derive(Debug)]
pub struct FixedClock(AtomicU64);

impl FixedClock {
    pub fn at(ms: u64) -> Arc<FixedClock> {
        Arc::new(FixedClock(AtomicU64::new(ms)))
    }
    pub fn advance(&self, by: Duration) {
        self.0
            .fetch_add(u64::try_from(by.as_millis()).unwrap(), Ordering::SeqCst);
    }
}

impl Clock for FixedClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A tiny xorshift64* generator: deterministic, seedable, no dependency.
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed.max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform-ish in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    pub fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.next_u64() as u8;
        }
    }
}

/// A seed from `var` if set, otherwise from the time (printed by the caller).
pub fn seed_from_env(var: &str) -> u64 {
    match std::env::var(var) {
        Ok(v) => v.trim().parse().expect("seed must be a u64"),
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    }
}

/// A size knob from the environment, with a default.
pub fn knob(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// A temporary directory on a RAM file system when there is one (`/dev/shm`), for tests where
/// durability is not the point: fsyncs there cost nothing, so the test measures the engine, not
/// the disk. Falls back to the default temporary directory.
pub fn fast_tempdir() -> TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::Builder::new()
            .prefix("postbox-test-")
            .tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().unwrap()
}
