//! Stores in fresh temporary directories.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use postbox::{Clock, Durability, ManualClock, Queue, Store};
use tempfile::TempDir;

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

    /// The open store.
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

/// Opens `path` with the manual clock `clock`.
pub fn open_with(path: &Path, clock: &Arc<ManualClock>) -> Store {
    Store::builder()
        .clock(clock.clone())
        .open(path)
        .expect("open store")
}

/// Opens `path` without durability, for tests where fsyncs are not the point.
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

impl Default for TestStore {
    fn default() -> Self {
        TestStore::new()
    }
}
