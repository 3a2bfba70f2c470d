//! The write-ahead log of a single-process store: durability by one sequential append.
//!
//! Each committing batch of the pipeline becomes one record — its row changes (see `rows`),
//! a sequence number, a length and a CRC32C — written with one `pwrite` and made durable with
//! one `fdatasync` before any caller of the batch is answered. The batch itself goes to redb
//! with `Durability::None`, which costs no sync. A checkpoint (a durable redb commit that
//! records the last applied sequence number) makes every record before it redundant, and the
//! log starts a new *cycle* at its first record slot.
//!
//! The bytes (`format`): a 4 KiB header page naming the store, the cycle and the file's
//! capacity; then records, 8-byte aligned, each checksummed from a salt of the store and the
//! cycle, so that records of another store or another cycle never read as valid. Writes are
//! whole 4 KiB pages: the page holding the end of the last record is written again with the
//! new record after it (the old bytes unchanged), so the kernel never reads a page before
//! writing it, and the file is preallocated with written zeros, so a sync flushes data, not
//! block allocations. The file grows in steps of [`GROW_STEP`]; a growth that fails (a full
//! disk) is given back, and the pipeline checkpoints instead.
//!
//! Recovery (`recover`) checks the log against what the store file records of it (identity,
//! cycle, length) and replays the records the store does not hold.

pub mod file;
pub mod format;
pub mod kinds;
pub mod recover;
pub mod rows;

use std::path::{Path, PathBuf};
use std::time::Instant;

pub use format::{HEADER, Header};
pub use recover::{Aside, Options, Recovered, checkpoint, mark_applied, mark_started, recover};

use crate::error::{Error, Result, io_to_error};
use crate::options::LogCheckpoints;
use crate::storage::LogFile;
use crate::sync::Mutex;

const PAGE: u64 = 4096;
/// The log grows in steps of this much, written as zeros ahead of use.
pub const GROW_STEP: u64 = 1 << 20;
/// How much log, or how much time, between two looks at the disk's free space.
const SPACE_RECHECK_BYTES: u64 = 64 << 10;
const SPACE_RECHECK_TIME: std::time::Duration = std::time::Duration::from_secs(1);

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
    /// The log had to grow and could not (a full disk): nothing was written and the growth
    /// was given back. A checkpoint — a durable commit of the store file, after which the log
    /// starts again at its first slot — needs no growth.
    NoRoom(Error),
    /// The sync failed: the record may or may not be durable.
    NotSynced(Error),
}

impl AppendError {
    /// The error the callers of the record's batch hear.
    pub fn into_error(self) -> Error {
        match self {
            AppendError::NotWritten(e) | AppendError::NoRoom(e) | AppendError::NotSynced(e) => e,
        }
    }
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
    /// The cycle records are appended in, and its salt.
    cycle: u64,
    salt: u32,
    /// The header as the file holds it.
    header: Header,
    /// The bytes of the page holding `pos`, from the page's start up to `pos`.
    tail: Vec<u8>,
    /// Set when a write or sync failed: what the disk holds is unknown, so the log takes
    /// nothing more (the store reopens, which recovers from what is there).
    failed: Option<String>,
    last_checkpoint: Instant,
    /// Set by [`Wal::checkpoint_soon`]: the next batch checkpoints.
    due_now: bool,
    /// The most record bytes the log may hold before a checkpoint for want of space (see
    /// [`Wal::checkpoint_due`]), when it was last computed, and at which log position.
    space_budget: u64,
    space_checked: Instant,
    space_checked_at: u64,
    buf: Vec<u8>,
    /// The record [`Wal::write`] wrote, waiting for [`Wal::sync_written`].
    written: Option<Written>,
}

/// A record written and not yet synced: where the log goes on once it is.
struct Written {
    page_start: u64,
    end: u64,
    record_end: usize,
    framed: u64,
    write_ns: u64,
    /// Framed in `Writer::buf` and not written yet ([`Wal::stage`]).
    staged: bool,
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
    /// Starts a log cycle for the store `store` on `file` (found empty, not needed, or every
    /// record in it applied durably): preallocates space and writes the header naming the
    /// cycle that starts at `next_seq`, synced. The store must then record the cycle
    /// ([`mark_started`]) before the first record is appended.
    ///
    /// # Errors
    ///
    /// The file system's error (`StorageFull` when the preallocation does not fit).
    pub fn start(
        file: Box<dyn LogFile>,
        path: PathBuf,
        store: u64,
        next_seq: u64,
        policy: LogCheckpoints,
    ) -> Result<Wal> {
        let len = file
            .size()
            .map_err(|e| log_error("reading its length", e))?;
        let capacity = len.max(HEADER + GROW_STEP).next_multiple_of(PAGE);
        if capacity > len {
            write_zeros(file.as_ref(), len.max(HEADER), capacity)?;
        }
        let header = Header {
            store,
            cycle: next_seq,
            prev: 0,
            prev_end: 0,
            capacity,
        };
        file.write_at(&header.page(), 0)
            .map_err(|e| log_error("writing its header", e))?;
        file.sync()
            .map_err(|e| log_error("syncing its header", e))?;
        Ok(Wal::with(
            file,
            path,
            policy,
            HEADER,
            (header, next_seq),
            next_seq,
            Vec::new(),
        ))
    }

    /// Continues the log in `file` after the records recovery found (see
    /// [`Recovered::end`]), writing nothing now: used when the store reopens after a failed
    /// write, when the disk may be full.
    ///
    /// # Errors
    ///
    /// The file system's error reading the file; `Corrupted` when recovery found no header of
    /// this store's (a log in use always has one).
    pub fn resume(
        file: Box<dyn LogFile>,
        path: PathBuf,
        recovered: &Recovered,
        policy: LogCheckpoints,
    ) -> Result<Wal> {
        let Some(mut header) = recovered.header else {
            return Err(Error::corrupted(format!(
                "the write-ahead log {} has no header of this store to go on with",
                path.display()
            )));
        };
        let len = file
            .size()
            .map_err(|e| log_error("reading its length", e))?;
        header.capacity = len;
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
            (header, recovered.cycle),
            recovered.applied + 1,
            tail,
        ))
    }

    fn with(
        file: Box<dyn LogFile>,
        path: PathBuf,
        policy: LogCheckpoints,
        pos: u64,
        (header, cycle): (Header, u64),
        next_seq: u64,
        tail: Vec<u8>,
    ) -> Wal {
        Wal {
            file,
            path,
            policy,
            writer: Mutex::new(Writer {
                pos,
                capacity: header.capacity,
                next_seq,
                cycle,
                salt: format::salt(header.store, cycle),
                header,
                tail,
                failed: None,
                last_checkpoint: Instant::now(),
                due_now: false,
                space_budget: u64::MAX,
                space_checked: Instant::now(),
                space_checked_at: 0,
                buf: Vec::new(),
                written: None,
            }),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the next batch should be a checkpoint: the log holds as many bytes of records
    /// as the policy allows, or more than a quarter of the disk's free space, or it holds
    /// the policy's least number of records and the last checkpoint is as old as its interval.
    ///
    /// The last rule keeps a store on a filling disk able to checkpoint: until a checkpoint,
    /// what the log holds is in the store file only as pages of non-durable commits, which the
    /// checkpoint writes and whose predecessors redb cannot reuse before it. So the closer the
    /// disk is to full, the more often the log checkpoints — down to every batch — and a store
    /// whose disk filled up holds little that waits for a checkpoint: freeing a little space
    /// lets the next checkpoint through (`docs/design.md` § I/O failures).
    pub fn checkpoint_due(&self) -> bool {
        let mut w = self.writer.lock();
        let used = w.pos - HEADER;
        if used == 0 {
            return false;
        }
        // Records of this cycle: the cycle is named for its first record's number.
        let records = w.next_seq.saturating_sub(w.cycle);
        if w.due_now
            || used >= self.policy.bytes
            || (records >= self.policy.min_records
                && w.last_checkpoint.elapsed() >= self.policy.interval)
        {
            return true;
        }
        if used >= w.space_checked_at + SPACE_RECHECK_BYTES
            || w.space_checked.elapsed() >= SPACE_RECHECK_TIME
        {
            w.space_budget = crate::os::space::available(&self.path).map_or(u64::MAX, |a| a / 4);
            w.space_checked = Instant::now();
            w.space_checked_at = used;
        }
        used >= w.space_budget
    }

    /// Makes the next batch a checkpoint, whatever the policy says: after an open that replayed
    /// the log without a durable commit (`Recovered::kept_log`), so that the store starts a new
    /// cycle as soon as something is written (a copy of the log from before the crash is then
    /// of an earlier cycle, and refused).
    pub fn checkpoint_soon(&self) {
        self.writer.lock().due_now = true;
    }

    /// Whether a batch with `bytes` of changes must be committed durably instead of logged.
    pub fn too_big(&self, bytes: usize) -> bool {
        bytes as u64 > self.policy.max_record
    }

    /// The sequence number of the last record written (0 before the first).
    pub fn last_seq(&self) -> u64 {
        self.writer.lock().next_seq - 1
    }

    /// The cycle records go to, and the file's length (what the store records of the log).
    pub fn cycle_and_capacity(&self) -> (u64, u64) {
        let w = self.writer.lock();
        (w.cycle, w.capacity)
    }

    /// Appends one record holding `body` and makes it durable: one write, then `between`
    /// (the pipeline hands the batch to redb there, so that the two overlap), then one sync.
    ///
    /// # Errors
    ///
    /// [`AppendError::NotWritten`] when the record could not be written: nothing is durable,
    /// `between` did not run, and the log goes on. [`AppendError::NoRoom`] likewise when the
    /// file had to grow and the disk is full (the growth is given back).
    /// [`AppendError::NotSynced`] when the sync failed: the log refuses everything after it
    /// (see `Writer::failed`) and the batch may or may not be durable.
    pub fn append(
        &self,
        body: &[u8],
        between: impl FnOnce(),
    ) -> std::result::Result<Appended, AppendError> {
        self.write(body)?;
        between();
        self.sync_written()
    }

    /// The first half of [`Wal::append`]: writes one record holding `body` without syncing
    /// it, and returns its sequence number. [`Wal::sync_written`] makes it durable, once a
    /// logical record's batch ran (see [`Wal::start_writeback`]). Until then
    /// the log takes no other record: a second `write` overwrites this one.
    ///
    /// # Errors
    ///
    /// As [`Wal::append`]'s `NotWritten` and `NoRoom`.
    pub fn write(&self, body: &[u8]) -> std::result::Result<u64, AppendError> {
        let mut guard = self.writer.lock();
        let (seq, page_start) = self.frame(&mut guard, body)?;
        let w = &mut *guard;
        let started = Instant::now();
        // A failed write leaves at most part of this record past the last durable one, which
        // recovery reads as a torn tail; the next append writes over it.
        if let Err(e) = self.file.write_at(&w.buf, page_start) {
            w.written = None;
            return Err(AppendError::NotWritten(log_error("writing a record", e)));
        }
        if let Some(written) = &mut w.written {
            written.write_ns = started.elapsed().as_nanos() as u64;
            written.staged = false;
        }
        Ok(seq)
    }

    /// Like [`Wal::write`], but only stages the record: [`Wal::sync_written`] writes and
    /// syncs it in one step ([`LogFile::write_durably`]: one direct, synchronous write where
    /// the platform has it). For a caller with nothing to overlap with the transfer.
    ///
    /// # Errors
    ///
    /// As [`Wal::append`]'s `NotWritten` (the log failed earlier) and `NoRoom`.
    pub fn stage(&self, body: &[u8]) -> std::result::Result<u64, AppendError> {
        let mut guard = self.writer.lock();
        self.frame(&mut guard, body).map(|(seq, _)| seq)
    }

    /// Frames the next record into `w.buf` (with the page's earlier bytes before it and zeros
    /// after it, so that it is whole pages), growing the file if it must; returns its sequence
    /// number and the offset of its first page.
    fn frame(&self, w: &mut Writer, body: &[u8]) -> std::result::Result<(u64, u64), AppendError> {
        if let Some(why) = &w.failed {
            return Err(AppendError::NotWritten(Error::Io(std::io::Error::other(
                format!("the write-ahead log failed earlier ({why}); the store reopens its files"),
            ))));
        }
        let seq = w.next_seq;
        let framed = format::RECORD_HEAD + body.len();
        let end = w.pos + framed.next_multiple_of(8) as u64;
        if end > w.capacity {
            self.grow(w, end)?;
        }
        let page_start = w.pos - w.tail.len() as u64;
        let record_end = (end - page_start) as usize;
        let buf = &mut w.buf;
        buf.clear();
        buf.extend_from_slice(&w.tail);
        format::frame(buf, w.salt, seq, body);
        // Zeros after the record to the end of its page: they end the log there for recovery.
        buf.resize(buf.len().next_multiple_of(PAGE as usize), 0);
        w.written = Some(Written {
            page_start,
            end,
            record_end,
            framed: framed as u64,
            write_ns: 0,
            staged: true,
        });
        Ok((seq, page_start))
    }

    /// Starts writing the record [`Wal::write`] wrote to the device without waiting for it
    /// (see [`LogFile::start_writeback`]), so that work done before [`Wal::sync_written`]
    /// overlaps the transfer.
    pub fn start_writeback(&self) {
        let w = self.writer.lock();
        if let Some(written) = &w.written {
            self.file.start_writeback(
                written.page_start,
                (written.end - written.page_start).next_multiple_of(PAGE),
            );
        }
    }

    /// The second half of [`Wal::append`]: syncs the record [`Wal::write`] wrote, after which
    /// the log takes the next one.
    ///
    /// # Errors
    ///
    /// As [`Wal::append`]'s `NotSynced`; `NotWritten` when no record waits for its sync.
    pub fn sync_written(&self) -> std::result::Result<Appended, AppendError> {
        let mut guard = self.writer.lock();
        let w = &mut *guard;
        let Some(written) = w.written.take() else {
            return Err(AppendError::NotWritten(Error::Io(std::io::Error::other(
                "the write-ahead log has no record waiting for its sync",
            ))));
        };
        let handed = Instant::now();
        let synced = if written.staged {
            self.file.write_durably(&w.buf, written.page_start)
        } else {
            self.file.sync()
        };
        if let Err(e) = synced {
            w.failed = Some(e.to_string());
            return Err(AppendError::NotSynced(Error::OutcomeUnknown(format!(
                "the write-ahead log could not be synced ({e}); the batch may or may not be durable"
            ))));
        }
        let synced = Instant::now();
        let record_end = written.record_end;
        let keep = record_end % PAGE as usize;
        w.tail.clear();
        w.tail
            .extend_from_slice(&w.buf[record_end - keep..record_end]);
        w.pos = written.end;
        w.next_seq += 1;
        Ok(Appended {
            bytes: written.framed,
            write_ns: written.write_ns,
            sync_ns: (synced - handed).as_nanos() as u64,
        })
    }

    /// Grows the file to hold a record ending at `end`, by at least [`GROW_STEP`]: zeros,
    /// synced (so that a header naming the new length never outlives the extension), then the
    /// header with the new capacity (synced with the record). A failure gives the growth back.
    fn grow(&self, w: &mut Writer, end: u64) -> std::result::Result<(), AppendError> {
        let target = end.max(w.capacity + GROW_STEP).next_multiple_of(PAGE);
        let grown = write_zeros(self.file.as_ref(), w.capacity, target).and_then(|()| {
            self.file
                .sync()
                .map_err(|e| log_error("syncing its growth", e))
        });
        if let Err(e) = grown {
            if let Err(back) = self.file.set_len(w.capacity) {
                tracing::warn!(path = %self.path.display(), error = %back, "could not give back a failed growth of the write-ahead log");
            }
            return Err(match e {
                e @ Error::StorageFull(_) => AppendError::NoRoom(e),
                other => AppendError::NotWritten(other),
            });
        }
        w.capacity = target;
        w.header.capacity = target;
        self.file
            .write_at(&w.header.page(), 0)
            .map_err(|e| AppendError::NotWritten(log_error("writing its header", e)))
    }

    /// Before a checkpoint's durable commit: announces the cycle that starts after the last
    /// record in the header (naming the current cycle as the one before it, up to its last
    /// record), synced, and returns that cycle and the log's length for the store to record.
    /// Nothing is written when no record was appended in the current cycle.
    ///
    /// When the disk is short of space the new cycle gets a smaller file: the header records
    /// the length of one growth step, and [`Wal::reset`] cuts the file to it after the commit
    /// (until then the file is longer than recorded, which recovery accepts).
    ///
    /// # Errors
    ///
    /// The file system's error; the log then takes nothing more.
    pub fn begin_cycle(&self) -> Result<(u64, u64)> {
        let mut w = self.writer.lock();
        if let Some(why) = &w.failed {
            return Err(Error::Io(std::io::Error::other(format!(
                "the write-ahead log failed earlier ({why}); the store reopens its files"
            ))));
        }
        let next = w.next_seq;
        let least = HEADER + GROW_STEP;
        let capacity = if w.capacity > least
            && crate::os::space::available(&self.path).is_some_and(|a| a < 8 * w.capacity)
        {
            least
        } else {
            w.capacity
        };
        if next == w.cycle && w.header.cycle == next && capacity == w.header.capacity {
            return Ok((next, capacity));
        }
        let header = Header {
            store: w.header.store,
            cycle: next,
            prev: w.cycle,
            prev_end: next - 1,
            capacity,
        };
        let written = self
            .file
            .write_at(&header.page(), 0)
            .map_err(|e| log_error("writing its header", e))
            .and_then(|()| {
                self.file
                    .sync()
                    .map_err(|e| log_error("syncing its header", e))
            });
        if let Err(e) = written {
            w.failed = Some(e.to_string());
            return Err(e);
        }
        w.header = header;
        Ok((next, capacity))
    }

    /// After a checkpoint committed (see [`checkpoint`]): the next record goes to the first
    /// slot, in the cycle the header announced, and a file the header shortened is cut.
    pub fn reset(&self) {
        let mut w = self.writer.lock();
        w.pos = HEADER;
        w.tail.clear();
        w.cycle = w.header.cycle;
        w.salt = format::salt(w.header.store, w.cycle);
        w.last_checkpoint = Instant::now();
        w.due_now = false;
        w.space_checked_at = 0;
        if w.header.capacity < w.capacity {
            match self.file.set_len(w.header.capacity) {
                Ok(()) => {
                    tracing::info!(path = %self.path.display(), from = w.capacity, to = w.header.capacity, "the disk is short of space: shortened the write-ahead log");
                    w.capacity = w.header.capacity;
                }
                Err(e) => {
                    tracing::warn!(path = %self.path.display(), error = %e, "could not shorten the write-ahead log");
                }
            }
        }
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

/// The header page of a log of store `store` in cycle `cycle`, for the fuzz targets.
#[cfg(feature = "fuzzing")]
pub fn fuzz_header(store: u64, cycle: u64, capacity: u64) -> Vec<u8> {
    Header {
        store,
        cycle,
        prev: 0,
        prev_end: 0,
        capacity,
    }
    .page()
}

/// One record framed as `Wal::append` frames it in `store`'s cycle `cycle`, padded to the
/// next slot, for the fuzz targets.
#[cfg(feature = "fuzzing")]
pub fn fuzz_record(store: u64, cycle: u64, seq: u64, body: &[u8]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(format::RECORD_HEAD + body.len() + 8);
    format::frame(&mut buf, format::salt(store, cycle), seq, body);
    buf.resize(buf.len().next_multiple_of(8), 0);
    buf
}

#[cfg(test)]
mod tests;
