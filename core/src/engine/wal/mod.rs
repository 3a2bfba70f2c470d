//! The write-ahead log of a single-process store: durability by one sequential append.
//!
//! Each committing batch of the pipeline becomes one record — its row changes (see `rows`),
//! a sequence number, a length and a CRC32C — written with one `pwrite` and made durable with
//! one `fdatasync` before any caller of the batch is answered. The batch itself goes to redb
//! with `Durability::None`, which costs no sync. A checkpoint (a durable redb commit that
//! records the last applied sequence number under `KEY_LOG_APPLIED`) makes every record
//! before it redundant, and the log starts over at its first record slot.
//!
//! Layout: a 4 KiB header page (magic, version, checksum), then records, each 8-byte aligned:
//!
//! ```text
//! magic u32 | body length u32 | seq u64 | crc32c u32 | 0 u32 | body | zeros to 8 bytes
//! ```
//!
//! The CRC covers length, sequence number and body. Writes are whole 4 KiB pages: the page
//! holding the end of the last record is written again with the new record after it (the old
//! bytes unchanged), so the kernel never reads a page before writing it, and the file is
//! preallocated with written zeros, so a sync flushes data, not block allocations.
//!
//! Recovery (`recover`) reads the records after the header in file order: records at or
//! below the applied sequence number are skipped, the following ones must be consecutive and
//! are replayed. The first slot that does not hold the next record ends the log: zeros, a torn
//! or checksum-failing record (never acknowledged: its sync did not return), or a valid record
//! of an earlier cycle (lower sequence number). A damaged record followed by a valid later one
//! is `Corrupted`: acknowledged work would be lost.

pub mod file;
pub mod rows;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redb::{Database, ReadableTable};

use super::tables::{KEY_LOG_APPLIED, META};
use crate::error::{Error, Result, io_to_error};
use crate::options::LogCheckpoints;
use crate::storage::LogFile;
use crate::sync::Mutex;

/// Bytes of the header page; records start after it.
pub const HEADER: u64 = 4096;
const PAGE: u64 = 4096;
const MAGIC: &[u8; 12] = b"postbox-wal\0";
const VERSION: u32 = 1;
const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"PBXR");
const RECORD_HEAD: usize = 24;
/// The log grows in steps of at least this much, written as zeros ahead of use.
const GROW_STEP: u64 = 1 << 20;
/// The longest log an open reads (see [`recover`]).
const MAX_LOG_LEN: u64 = 1 << 30;

/// The log file of the store at `store`: its name with `-log` appended.
pub fn log_path(store: &Path) -> PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push("-log");
    PathBuf::from(name)
}

/// Why an append failed.
#[derive(Debug)]
pub enum AppendError {
    /// Nothing of the record is durable; the log takes the next one.
    NotWritten(Error),
    /// The sync failed: the record may or may not be durable.
    NotSynced(Error),
}

/// One record appended: its size and where its time went.
#[derive(Debug, Clone, Copy)]
pub struct Appended {
    pub bytes: u64,
    pub write_ns: u64,
    pub sync_ns: u64,
}

struct Writer {
    /// Where the next record starts (8-byte aligned).
    pos: u64,
    /// The file's length: zeros written ahead of `pos`.
    capacity: u64,
    next_seq: u64,
    /// The bytes of the page holding `pos`, from the page's start up to `pos`.
    tail: Vec<u8>,
    /// Set when a write or sync failed: what the disk holds is unknown, so the log takes
    /// nothing more (the store reopens, which recovers from what is there).
    failed: Option<String>,
    last_checkpoint: Instant,
    buf: Vec<u8>,
}

/// The open log of a store: the writer's state behind a lock only the pipeline's leader takes.
pub struct Wal {
    file: Box<dyn LogFile>,
    path: PathBuf,
    policy: LogCheckpoints,
    writer: Mutex<Writer>,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal").field("path", &self.path).finish()
    }
}

fn header_bytes() -> [u8; 20] {
    let mut h = [0u8; 20];
    h[..12].copy_from_slice(MAGIC);
    h[12..16].copy_from_slice(&VERSION.to_le_bytes());
    let crc = crc32c::crc32c(&h[..16]);
    h[16..20].copy_from_slice(&crc.to_le_bytes());
    h
}

fn log_error(what: &str, e: std::io::Error) -> Error {
    match io_to_error(e) {
        Error::Io(e) => Error::Io(std::io::Error::new(
            e.kind(),
            format!("write-ahead log: {what}: {e}"),
        )),
        other => other,
    }
}

impl Wal {
    /// Starts a log cycle on `file` (found empty, or every record in it applied durably):
    /// writes the header if the file has none and preallocates space. The next record goes to
    /// the first slot and gets `next_seq`.
    ///
    /// # Errors
    ///
    /// The file system's error (`StorageFull` when the preallocation does not fit).
    pub fn start(
        file: Box<dyn LogFile>,
        path: PathBuf,
        next_seq: u64,
        policy: LogCheckpoints,
    ) -> Result<Wal> {
        let len = file
            .size()
            .map_err(|e| log_error("reading its length", e))?;
        let mut head = [0u8; 20];
        let got = file
            .read_at(&mut head, 0)
            .map_err(|e| log_error("reading its header", e))?;
        let capacity = if got < head.len() || head != header_bytes() || len < HEADER + GROW_STEP {
            let capacity = len.max(HEADER + GROW_STEP).next_multiple_of(PAGE);
            let mut page = vec![0u8; HEADER as usize];
            page[..20].copy_from_slice(&header_bytes());
            file.write_at(&page, 0)
                .map_err(|e| log_error("writing its header", e))?;
            write_zeros(file.as_ref(), len.max(HEADER), capacity)?;
            file.sync()
                .map_err(|e| log_error("syncing its header", e))?;
            capacity
        } else {
            len
        };
        Ok(Wal::with(
            file,
            path,
            policy,
            HEADER,
            capacity,
            next_seq,
            Vec::new(),
        ))
    }

    /// Continues the log in `file` after the records recovery found (see [`Recovered::end`]),
    /// writing nothing now: used when the store reopens after a failed write, when the disk may
    /// be full.
    ///
    /// # Errors
    ///
    /// The file system's error reading the file.
    pub fn resume(
        file: Box<dyn LogFile>,
        path: PathBuf,
        recovered: &Recovered,
        policy: LogCheckpoints,
    ) -> Result<Wal> {
        let len = file
            .size()
            .map_err(|e| log_error("reading its length", e))?;
        let pos = recovered.end.max(HEADER);
        let page_start = pos - pos % PAGE;
        let mut tail = vec![0u8; (pos - page_start) as usize];
        file.read_at(&mut tail, page_start)
            .map_err(|e| log_error("reading its last page", e))?;
        Ok(Wal::with(
            file,
            path,
            policy,
            pos,
            len,
            recovered.applied + 1,
            tail,
        ))
    }

    fn with(
        file: Box<dyn LogFile>,
        path: PathBuf,
        policy: LogCheckpoints,
        pos: u64,
        capacity: u64,
        next_seq: u64,
        tail: Vec<u8>,
    ) -> Wal {
        Wal {
            file,
            path,
            policy,
            writer: Mutex::new(Writer {
                pos,
                capacity,
                next_seq,
                tail,
                failed: None,
                last_checkpoint: Instant::now(),
                buf: Vec::new(),
            }),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the next batch should be a checkpoint, or a record of `bytes` is too big to log.
    pub fn checkpoint_due(&self) -> bool {
        let w = self.writer.lock();
        w.pos > HEADER
            && (w.pos - HEADER >= self.policy.bytes
                || w.last_checkpoint.elapsed() >= self.policy.interval)
    }

    /// Whether a batch with `bytes` of changes must be committed durably instead of logged.
    pub fn too_big(&self, bytes: usize) -> bool {
        bytes as u64 > self.policy.max_record
    }

    /// The sequence number of the last record written (0 before the first).
    pub fn last_seq(&self) -> u64 {
        self.writer.lock().next_seq - 1
    }

    /// Appends one record holding `body` and makes it durable: one write, then `between`
    /// (the pipeline hands the batch to redb there, so that the two overlap), then one sync.
    ///
    /// # Errors
    ///
    /// [`AppendError::NotWritten`] when the record could not be written (a full disk while
    /// the log grows): nothing is durable, `between` did not run, and the log goes on.
    /// [`AppendError::NotSynced`] when the sync failed: the log refuses everything after it
    /// (see `Writer::failed`) and the batch may or may not be durable.
    pub fn append(
        &self,
        body: &[u8],
        between: impl FnOnce(),
    ) -> std::result::Result<Appended, AppendError> {
        let mut guard = self.writer.lock();
        let w = &mut *guard;
        if let Some(why) = &w.failed {
            return Err(AppendError::NotWritten(Error::Io(std::io::Error::other(
                format!("the write-ahead log failed earlier ({why}); the store reopens its files"),
            ))));
        }
        let seq = w.next_seq;
        let framed = RECORD_HEAD + body.len();
        let end = w.pos + framed.next_multiple_of(8) as u64;
        if end > w.capacity {
            let target = (end + GROW_STEP).max(w.capacity * 2).next_multiple_of(PAGE);
            write_zeros(self.file.as_ref(), w.capacity, target).map_err(AppendError::NotWritten)?;
            w.capacity = target;
        }
        let page_start = w.pos - w.tail.len() as u64;
        let record_end = (end - page_start) as usize;
        let buf = &mut w.buf;
        buf.clear();
        buf.extend_from_slice(&w.tail);
        let head = buf.len();
        buf.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
        buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
        buf.extend_from_slice(&seq.to_le_bytes());
        buf.extend_from_slice(&[0u8; 8]);
        buf.extend_from_slice(body);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&buf[head + 4..head + 16]), body);
        buf[head + 16..head + 20].copy_from_slice(&crc.to_le_bytes());
        // Zeros after the record to the end of its page: they end the log there for recovery.
        buf.resize(buf.len().next_multiple_of(PAGE as usize), 0);
        let started = Instant::now();
        // A failed write leaves at most part of this record past the last durable one, which
        // recovery reads as a torn tail; the next append writes over it.
        self.file
            .write_at(buf, page_start)
            .map_err(|e| AppendError::NotWritten(log_error("writing a record", e)))?;
        let written = Instant::now();
        between();
        let handed = Instant::now();
        if let Err(e) = self.file.sync() {
            w.failed = Some(e.to_string());
            return Err(AppendError::NotSynced(Error::OutcomeUnknown(format!(
                "the write-ahead log could not be synced ({e}); the batch may or may not be durable"
            ))));
        }
        let synced = Instant::now();
        let keep = record_end % PAGE as usize;
        w.tail.clear();
        w.tail
            .extend_from_slice(&buf[record_end - keep..record_end]);
        w.pos = end;
        w.next_seq += 1;
        Ok(Appended {
            bytes: framed as u64,
            write_ns: (written - started).as_nanos() as u64,
            sync_ns: (synced - handed).as_nanos() as u64,
        })
    }

    /// After a checkpoint that recorded [`Wal::last_seq`] as applied: the next record goes to
    /// the first slot again.
    pub fn reset(&self) {
        let mut w = self.writer.lock();
        w.pos = HEADER;
        w.tail.clear();
        w.last_checkpoint = Instant::now();
    }

    /// Whether a write or sync failed (the store must reopen before it writes again).
    pub fn has_failed(&self) -> bool {
        self.writer.lock().failed.is_some()
    }
}

fn write_zeros(file: &dyn LogFile, from: u64, to: u64) -> Result<()> {
    const CHUNK: usize = 1 << 20;
    let zeros = vec![0u8; CHUNK.min(to.saturating_sub(from) as usize)];
    let mut at = from;
    while at < to {
        let n = ((to - at) as usize).min(CHUNK);
        file.write_at(&zeros[..n], at)
            .map_err(|e| log_error("growing the file", e))?;
        at += n as u64;
    }
    Ok(())
}

/// A record found by [`scan`].
#[derive(Debug)]
pub struct Found {
    pub seq: u64,
    pub body: std::ops::Range<usize>,
}

enum Slot {
    Record {
        seq: u64,
        body: std::ops::Range<usize>,
        next: usize,
    },
    /// Zeros: nothing was ever written here in this file.
    Empty,
    /// Something that is not a whole record with a good checksum.
    Bad,
}

fn read_u32(data: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&data[at..at + 4]);
    u32::from_le_bytes(b)
}

fn read_u64(data: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&data[at..at + 8]);
    u64::from_le_bytes(b)
}

fn slot(data: &[u8], at: usize) -> Slot {
    if at + RECORD_HEAD > data.len() {
        return Slot::Empty;
    }
    let magic = read_u32(data, at);
    if magic != RECORD_MAGIC {
        return if data[at..at + RECORD_HEAD].iter().all(|b| *b == 0) {
            Slot::Empty
        } else {
            Slot::Bad
        };
    }
    let len = read_u32(data, at + 4) as usize;
    let seq = read_u64(data, at + 8);
    let crc = read_u32(data, at + 16);
    let body = at + RECORD_HEAD..at + RECORD_HEAD + len;
    if body.end > data.len() {
        return Slot::Bad;
    }
    let want = crc32c::crc32c_append(crc32c::crc32c(&data[at + 4..at + 16]), &data[body.clone()]);
    if want != crc {
        return Slot::Bad;
    }
    let next = (RECORD_HEAD + len).next_multiple_of(8) + at;
    Slot::Record { seq, body, next }
}

/// What [`scan`] found: the records past `applied`, and where the chain of valid records
/// ends (the next record's offset) with the last sequence number in it.
#[derive(Debug, Default)]
pub struct Scan {
    pub found: Vec<Found>,
    pub end: usize,
    pub last: Option<u64>,
}

/// Reads the log's records past `applied` from `data` (the whole file).
///
/// # Errors
///
/// `Corrupted` for a damaged header, a gap in the sequence, or a damaged record followed by
/// a valid later one.
pub fn scan(data: &[u8], applied: u64) -> Result<Scan> {
    let mut out = Scan {
        end: HEADER as usize,
        ..Scan::default()
    };
    if data.len() < 20 || data[..20].iter().all(|b| *b == 0) {
        // Created but never given its header: nothing was logged in it.
        return Ok(out);
    }
    if data[..20] != header_bytes() {
        return Err(Error::corrupted(
            "the write-ahead log's header is damaged or of another version",
        ));
    }
    let mut at = HEADER as usize;
    loop {
        match slot(data, at) {
            Slot::Record { seq, body, next } => {
                match out.last {
                    Some(l) if seq <= l => return Ok(out), // an earlier cycle's record
                    Some(l) if seq != l + 1 => {
                        return Err(Error::corrupted(format!(
                            "write-ahead log: record {seq} follows record {l}"
                        )));
                    }
                    None if seq > applied + 1 => {
                        return Err(Error::corrupted(format!(
                            "write-ahead log starts at record {seq}, but the store holds only up to {applied}"
                        )));
                    }
                    _ => {}
                }
                if seq > applied {
                    out.found.push(Found { seq, body });
                }
                out.last = Some(seq);
                at = next;
                out.end = next;
            }
            Slot::Empty | Slot::Bad => {
                let expected = out.last.map_or(applied, |l| l.max(applied)) + 1;
                // Only a damaged record can hide later ones; look for any valid record past it
                // that continues the sequence.
                let mut p = at + 8;
                while p + RECORD_HEAD <= data.len() {
                    if read_u32(data, p) == RECORD_MAGIC
                        && let Slot::Record { seq, .. } = slot(data, p)
                        && seq > expected
                    {
                        return Err(Error::corrupted(format!(
                            "write-ahead log: the record at offset {at} is damaged and record {seq} follows it"
                        )));
                    }
                    p += 8;
                }
                return Ok(out);
            }
        }
    }
}

/// What recovery did at open.
#[derive(Debug, Default, Clone, Copy)]
pub struct Recovered {
    /// Records replayed into the store.
    pub records: u64,
    /// The sequence number of the last record the store holds.
    pub applied: u64,
    /// Where the log's chain of valid records ends (for [`Wal::resume`]).
    pub end: u64,
    pub took: Duration,
}

/// Reads the applied sequence number.
fn applied_in(txn: &redb::WriteTransaction) -> Result<u64> {
    Ok(txn
        .open_table(META)?
        .get(KEY_LOG_APPLIED)?
        .map_or(0, |g| g.value()))
}

/// Replays the records of the log in `file` that `db` does not hold, in one write transaction.
/// With `durable`, that commit is a checkpoint and the log is redundant afterwards; without
/// (reopening after a failed write, when the disk may be full), the log stays authoritative
/// and goes on from [`Recovered::end`]. Idempotent: records rewrite whole rows, so replaying
/// one the store already holds changes nothing, and a crash part way leaves the store as it
/// was for the next open to replay again.
///
/// # Errors
///
/// `Corrupted` (see [`scan`]); the file system's and redb's errors.
pub fn recover(db: &Database, file: &dyn LogFile, durable: bool) -> Result<Recovered> {
    let started = Instant::now();
    let len = file
        .size()
        .map_err(|e| log_error("reading its length", e))?;
    // The log is read whole; postbox never lets it grow past about twice the checkpoint bound
    // (32 MiB), so a far larger file is not one of its logs and must not size an allocation.
    if len > MAX_LOG_LEN {
        return Err(Error::corrupted(format!(
            "the write-ahead log is {len} bytes, more than postbox writes ({MAX_LOG_LEN})"
        )));
    }
    let mut data = vec![0u8; usize::try_from(len).map_err(|_| Error::corrupted("log too large"))?];
    let got = file
        .read_at(&mut data, 0)
        .map_err(|e| log_error("reading it", e))?;
    data.truncate(got);
    let mut txn = db.begin_write()?;
    let applied = applied_in(&txn)?;
    let scan = scan(&data, applied)?;
    let Some(last) = scan.found.last().map(|f| f.seq) else {
        txn.abort()?;
        return Ok(Recovered {
            records: 0,
            applied: applied.max(scan.last.unwrap_or(0)),
            end: scan.end as u64,
            took: started.elapsed(),
        });
    };
    {
        let mut applier = rows::Applier::new(&txn);
        applier.apply_all(scan.found.iter().map(|f| &data[f.body.clone()]))?;
    }
    txn.open_table(META)?.insert(KEY_LOG_APPLIED, last)?;
    if !durable {
        txn.set_durability(redb::Durability::None)
            .map_err(|e| Error::Config(e.to_string()))?;
    }
    txn.commit()?;
    Ok(Recovered {
        records: scan.found.len() as u64,
        applied: last,
        end: scan.end as u64,
        took: started.elapsed(),
    })
}

/// Records `seq` as applied in a transaction about to commit durably (a checkpoint).
///
/// # Errors
///
/// redb's errors.
pub fn mark_applied(txn: &redb::WriteTransaction, seq: u64) -> Result<()> {
    txn.open_table(META)?.insert(KEY_LOG_APPLIED, seq)?;
    Ok(())
}

/// The header page of a log file as `Wal::start` writes it, for the fuzz targets.
#[cfg(feature = "fuzzing")]
pub fn fuzz_header() -> Vec<u8> {
    let mut page = vec![0u8; HEADER as usize];
    page[..20].copy_from_slice(&header_bytes());
    page
}

/// One record framed as `Wal::append` frames it, padded to the next slot, for the fuzz targets.
#[cfg(feature = "fuzzing")]
pub fn fuzz_record(seq: u64, body: &[u8]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(RECORD_HEAD + body.len() + 8);
    buf.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
    buf.extend_from_slice(&seq.to_le_bytes());
    buf.extend_from_slice(&[0u8; 8]);
    buf.extend_from_slice(body);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&buf[4..16]), body);
    buf[16..20].copy_from_slice(&crc.to_le_bytes());
    buf.resize(buf.len().next_multiple_of(8), 0);
    buf
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A log file in memory.
    #[derive(Debug, Default, Clone)]
    struct MemFile(Arc<std::sync::Mutex<Vec<u8>>>);

    impl LogFile for MemFile {
        fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
            let mut d = self.0.lock().unwrap();
            let end = offset as usize + buf.len();
            if d.len() < end {
                d.resize(end, 0);
            }
            d[offset as usize..end].copy_from_slice(buf);
            Ok(())
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
            let d = self.0.lock().unwrap();
            let from = (offset as usize).min(d.len());
            let n = buf.len().min(d.len() - from);
            buf[..n].copy_from_slice(&d[from..from + n]);
            Ok(n)
        }
        fn size(&self) -> std::io::Result<u64> {
            Ok(self.0.lock().unwrap().len() as u64)
        }
        fn sync(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn wal(file: &MemFile, next: u64) -> Wal {
        Wal::start(
            Box::new(file.clone()),
            "mem".into(),
            next,
            LogCheckpoints::default(),
        )
        .unwrap()
    }

    fn bodies(data: &[u8], applied: u64) -> Vec<(u64, Vec<u8>)> {
        scan(data, applied)
            .unwrap()
            .found
            .into_iter()
            .map(|f| (f.seq, data[f.body].to_vec()))
            .collect()
    }

    #[test]
    fn records_read_back_in_order() {
        let f = MemFile::default();
        let w = wal(&f, 1);
        for i in 0..300u32 {
            let body = vec![i as u8; (i as usize * 37) % 5000];
            w.append(&body, || {}).unwrap();
            assert_eq!(w.last_seq(), u64::from(i) + 1);
        }
        let data = f.0.lock().unwrap().clone();
        let got = bodies(&data, 0);
        assert_eq!(got.len(), 300);
        for (i, (seq, body)) in got.iter().enumerate() {
            assert_eq!(*seq, i as u64 + 1);
            assert_eq!(body.len(), (i * 37) % 5000);
        }
        assert_eq!(bodies(&data, 250).len(), 50);
        assert!(bodies(&data, 300).is_empty());
    }

    #[test]
    fn a_new_cycle_ends_at_its_last_record_not_at_stale_ones() {
        let f = MemFile::default();
        let w = wal(&f, 1);
        for _ in 0..50 {
            w.append(&[7; 900], || {}).unwrap();
        }
        w.reset();
        w.append(&[1; 10], || {}).unwrap();
        w.append(&[2; 10], || {}).unwrap();
        let data = f.0.lock().unwrap().clone();
        let got = bodies(&data, 50);
        assert_eq!(got, vec![(51, vec![1; 10]), (52, vec![2; 10])]);
        // Before the reset's checkpoint recorded 50, the same file replays from 51 too.
        assert!(
            scan(&data, 10).is_err(),
            "a cycle cannot start past the applied record"
        );
    }

    #[test]
    fn a_torn_tail_ends_the_log_and_a_damaged_middle_is_corrupted() {
        let f = MemFile::default();
        let w = wal(&f, 1);
        for i in 0..10u8 {
            w.append(&[i; 700], || {}).unwrap();
        }
        let data = f.0.lock().unwrap().clone();
        // Tear the last record: its body is cut.
        let ends: Vec<usize> = scan(&data, 0)
            .unwrap()
            .found
            .iter()
            .map(|f| f.body.end)
            .collect();
        let mut torn = data.clone();
        for b in &mut torn[ends[8] + 100..ends[9]] {
            *b = 0;
        }
        assert_eq!(bodies(&torn, 0).len(), 9);
        // Damage the fifth record: the ones after it are valid, so this is corruption.
        let mut bad = data.clone();
        bad[ends[4] - 10] ^= 1;
        assert!(matches!(scan(&bad, 0), Err(Error::Corrupted(_))));
        // The same damage to a record already applied is not looked at as a tail.
        assert!(matches!(scan(&bad, 0), Err(Error::Corrupted(_))));
    }

    #[test]
    fn an_empty_or_headerless_file_holds_nothing() {
        assert!(scan(&[], 0).unwrap().found.is_empty());
        assert!(scan(&[0; 8192], 7).unwrap().found.is_empty());
        assert!(scan(&[1; 8192], 7).is_err());
    }
}
