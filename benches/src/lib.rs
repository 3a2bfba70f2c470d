//! Helpers shared by the criterion suite (`benches/queue.rs`) and the comparison binaries:
//! the fsync probe (the machine's durable-commit ceiling), the raw redb floor, body generation,
//! percentiles and resident memory.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redb::{ConcurrencyMode, Database, TableDefinition};

/// The directory under which benchmark stores are created: `POSTBOX_BENCH_DIR`, or the system
/// temporary directory. Keep it on the filesystem whose fsync cost you want to measure.
pub fn bench_root() -> PathBuf {
    std::env::var_os("POSTBOX_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

/// A fresh temporary directory under [`bench_root`].
pub fn temp_dir(prefix: &str) -> tempfile::TempDir {
    let root = bench_root();
    let _ = std::fs::create_dir_all(&root);
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(root)
        .expect("create a benchmark directory")
}

/// A body of `size` bytes that does not compress to nothing.
pub fn body(size: usize) -> Vec<u8> {
    let mut x: u32 = 0x9E37_79B9;
    (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x & 0xff) as u8
        })
        .collect()
}

/// Appends 1 KiB and calls `fdatasync` in a loop for `duration` in `dir`; returns syncs per
/// second. This is the ceiling for one-commit-at-a-time durable writes on this filesystem.
pub fn fsync_probe(dir: &Path, duration: Duration) -> f64 {
    let (n, took) = fsync_append_loop(dir, duration, u64::MAX, None, |_| {});
    n as f64 / took.as_secs_f64()
}

/// The same loop as [`fsync_probe`], as a latency distribution: the duration of each
/// append + `fdatasync`, for `duration` or `max_count` syncs, whichever comes first. What a
/// caller committing one durable write at a time waits at least, call by call. With `pace`,
/// one sync starts every `pace` (sleeping between), as paced sends do: a sync that finds the
/// machine idle costs more than one in a busy loop, so a paced send is compared with a paced
/// probe.
pub fn fsync_probe_samples(
    dir: &Path,
    duration: Duration,
    max_count: u64,
    pace: Option<Duration>,
) -> Vec<Duration> {
    let mut samples = Vec::new();
    fsync_append_loop(dir, duration, max_count, pace, |d| samples.push(d));
    samples
}

/// The fsync probe's loop: 1 KiB appended and `fdatasync`ed until `duration` or `max_count`,
/// one pair every `pace` when given, each pair's duration given to `sample`; returns how many
/// it did and how long they took.
fn fsync_append_loop(
    dir: &Path,
    duration: Duration,
    max_count: u64,
    pace: Option<Duration>,
    mut sample: impl FnMut(Duration),
) -> (u64, Duration) {
    let path = dir.join(format!("fsync-probe-{}", std::process::id()));
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .expect("open the fsync probe file");
    let block = [0x5au8; 1024];
    let start = Instant::now();
    let mut n = 0u64;
    let mut next = start;
    while n < max_count && start.elapsed() < duration {
        if let Some(pace) = pace {
            next += pace;
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        let call = Instant::now();
        f.write_all(&block).expect("append");
        f.sync_data().expect("fdatasync");
        sample(call.elapsed());
        n += 1;
    }
    let took = start.elapsed();
    drop(f);
    let _ = std::fs::remove_file(&path);
    (n, took)
}

/// Like [`fsync_probe`], but rewrites the same 1 KiB in place: `fdatasync` then need not
/// journal a size change, which on many filesystems makes it several times cheaper. A store
/// whose file no longer grows commits closer to this rate.
pub fn fsync_probe_overwrite(dir: &Path, duration: Duration) -> f64 {
    #[cfg(unix)]
    fn write_at_start(f: &std::fs::File, block: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        f.write_all_at(block, 0)
    }
    #[cfg(not(unix))]
    fn write_at_start(mut f: &std::fs::File, block: &[u8]) -> std::io::Result<()> {
        use std::io::{Seek, SeekFrom, Write};
        f.seek(SeekFrom::Start(0))?;
        f.write_all(block)
    }
    let path = dir.join(format!("fsync-probe-overwrite-{}", std::process::id()));
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .expect("open the fsync probe file");
    let block = [0x5au8; 1024];
    write_at_start(&f, &block).expect("write");
    f.sync_all().expect("fsync");
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < duration {
        write_at_start(&f, &block).expect("write");
        f.sync_data().expect("fdatasync");
        n += 1;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    drop(f);
    let _ = std::fs::remove_file(&path);
    rate
}

/// The table of the raw redb floor: what a queue would be if it were only one insert.
pub const RAW_TABLE: TableDefinition<u64, &[u8]> = TableDefinition::new("raw");
const RAW_STATE: TableDefinition<u64, [u8; 64]> = TableDefinition::new("raw_state");
const RAW_ORDER: TableDefinition<(u32, u8, u64), ()> = TableDefinition::new("raw_order");
const RAW_COUNTERS: TableDefinition<u32, [u8; 64]> = TableDefinition::new("raw_counters");

/// A bare redb database, used as the floor below which the queue layer adds cost.
pub struct RawRedb {
    db: Database,
    next: u64,
}

impl RawRedb {
    /// Creates a database at `path`; `multi_writer` selects redb's `MultiWriter` mode (what a
    /// postbox store uses with `multi_process(true)`), otherwise `ExclusiveWriter`.
    pub fn create(path: &Path, multi_writer: bool) -> RawRedb {
        let mut b = Database::builder();
        b.set_concurrency_mode(if multi_writer {
            ConcurrencyMode::MultiWriter
        } else {
            ConcurrencyMode::ExclusiveWriter
        });
        let db = b.create(path).expect("create raw redb");
        let txn = db.begin_write().expect("begin");
        txn.open_table(RAW_TABLE).expect("table");
        txn.commit().expect("commit");
        RawRedb { db, next: 0 }
    }

    /// One durable write transaction with `n` inserts of `body`.
    pub fn insert_batch(&mut self, n: usize, body: &[u8]) {
        let txn = self.db.begin_write().expect("begin");
        {
            let mut t = txn.open_table(RAW_TABLE).expect("table");
            for _ in 0..n {
                t.insert(self.next, body).expect("insert");
                self.next += 1;
            }
        }
        txn.commit().expect("commit");
    }

    /// One durable write transaction with `n` inserts of `body`, each also writing what a
    /// postbox send writes besides the body: a 64-byte row in a second table, a key in a
    /// third and two 64-byte rows in a fourth. The floor of any layout with a state record, a
    /// delivery-order index and exact counters kept apart from the bodies.
    pub fn insert_indexed_batch(&mut self, n: usize, body: &[u8]) {
        let txn = self.db.begin_write().expect("begin");
        {
            let mut t = txn.open_table(RAW_TABLE).expect("table");
            let mut state = txn.open_table(RAW_STATE).expect("table");
            let mut order = txn.open_table(RAW_ORDER).expect("table");
            let mut counters = txn.open_table(RAW_COUNTERS).expect("table");
            for _ in 0..n {
                t.insert(self.next, body).expect("insert");
                state.insert(self.next, [1u8; 64]).expect("insert");
                order.insert((1u32, 3u8, self.next), ()).expect("insert");
                let c = [self.next.to_le_bytes()[0]; 64];
                counters.insert(0u32, c).expect("insert");
                counters.insert(1u32, c).expect("insert");
                self.next += 1;
            }
        }
        txn.commit().expect("commit");
    }

    /// Deletes everything (keeps the file from growing without bound during long runs).
    pub fn clear(&mut self) {
        let txn = self.db.begin_write().expect("begin");
        txn.delete_table(RAW_TABLE).expect("delete");
        txn.delete_table(RAW_STATE).expect("delete");
        txn.delete_table(RAW_ORDER).expect("delete");
        txn.delete_table(RAW_COUNTERS).expect("delete");
        txn.open_table(RAW_TABLE).expect("table");
        txn.commit().expect("commit");
    }

    /// How many rows were inserted since the last clear or creation.
    pub fn inserted(&self) -> u64 {
        self.next
    }
}

/// Inserts per second of raw redb doing `batch` inserts per durable transaction, for about
/// `duration`.
pub fn raw_redb_rate(
    dir: &Path,
    multi_writer: bool,
    batch: usize,
    body: &[u8],
    duration: Duration,
) -> f64 {
    let mut db = RawRedb::create(&dir.join(format!("raw-{batch}.redb")), multi_writer);
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < duration {
        db.insert_batch(batch, body);
        n += batch as u64;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// The `p`-th percentile (0–100) of `samples` (sorted in place), nearest rank.
pub fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort_unstable();
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

/// `(VmRSS, VmHWM)` of this process in KiB, from `/proc/self/status` (zeros elsewhere).
pub fn memory_kib() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Nanoseconds since the Unix epoch: a clock two processes share, for cross-process latency.
pub fn epoch_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

pub use postbox_testkit::Rng;
