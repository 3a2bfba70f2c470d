//! Creating and opening the store file.
//!
//! Creation is atomic: the store is built under a temporary name, made durable, then given its
//! final name (linked on Unix, moved on Windows; never replacing a store another process
//! created meanwhile) and the directory is synced where the system can, so a crash at any point
//! leaves either no store or a complete one — never a file that cannot be opened. The temporary file of a creation that
//! a crash interrupted is removed by the next creation of the same store.
//!
//! A writable open of a store in an older format upgrades it to the current one in a single
//! write transaction (see [`upgrade`]), so the rest of the engine only ever sees the current
//! format.

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::ops::Bound;
use std::path::{Path, PathBuf};

use redb::{
    ConcurrencyMode, Database, ReadTransaction, ReadableDatabase, ReadableTable, TableDefinition,
    WriteTransaction,
};

use super::tables::*;
use super::wal::{self, Recovered, Wal};
use crate::error::{Error, Result, io_to_error};
use crate::options::EngineConfig;
use crate::os;

const REDB_MAGIC: &[u8] = b"redb";

fn redb_builder(b: &EngineConfig) -> redb::Builder {
    let mut rb = Database::builder();
    rb.set_cache_size(b.cache_size);
    rb.set_concurrency_mode(if b.multi_process {
        ConcurrencyMode::MultiWriter
    } else {
        ConcurrencyMode::ExclusiveWriter
    });
    rb.set_check_integrity_on_open(b.verify_on_open);
    rb
}

/// A store file opened, its log replayed, and (in log mode) its log ready for records.
pub struct Opened {
    pub db: Database,
    pub wal: Option<Wal>,
    pub recovered: Recovered,
}

/// Opens (creating if needed) the store at `path`, replays its write-ahead log if the store
/// needs one (durably: a checkpoint), and starts a fresh log cycle when `b` asks for a log.
///
/// # Errors
///
/// As [`open_file`]; `Corrupted` when the store needs its log and the log is missing, cut,
/// damaged, another store's or of another cycle (see `wal::recover`) unless
/// `b.accept_log_loss`; the file system's errors on the log file.
pub fn open(path: &Path, b: &EngineConfig) -> Result<Opened> {
    open_and_recover(path, b, false).map_err(|e| e.at_path("opening the store", path))
}

fn open_and_recover(path: &Path, b: &EngineConfig, again: bool) -> Result<Opened> {
    let (db, version) = open_file(path, b)?;
    // The log sits beside the file itself, not beside a symbolic link to it: opened through
    // another link (or the real path) after a crash, the store must find the same log.
    let real = fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let log = wal::log_path(&real);
    let mut existing = match fs::metadata(&log) {
        Ok(_) => Some(wal::file::open_log(&log, b.storage_layer.as_ref())?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_to_error(e)),
    };
    // Reopening after a failed write replays without a durable commit and goes on with the
    // same log, so that it needs no new space on a full disk.
    let resume = again && b.uses_log();
    let opts = wal::Options {
        durable: !resume,
        // A store of an older format is upgraded by a durable commit after its replay.
        keep_log: b.uses_log() && version == FORMAT_VERSION,
        accept_loss: b.accept_log_loss && !again,
        logical: crate::engine::logical::replay,
    };
    let recovered = wal::recover(&db, existing.as_deref(), path, &log, opts)?;
    // A store of format 5 replays its log (format 1) as it was written, then is upgraded.
    if version < FORMAT_VERSION {
        upgrade(&db)?;
    }
    if recovered.records > 0 {
        tracing::info!(
            path = %path.display(),
            records = recovered.records,
            took_ms = recovered.took.as_millis() as u64,
            "replayed the write-ahead log"
        );
    }
    if let Some((why, text)) = &recovered.aside {
        drop(existing.take());
        set_aside(&log, *why, text)?;
    }
    let wal = match existing {
        Some(file) if resume && !recovered.restarts_log => {
            Some(Wal::resume(file, log, &recovered, b.checkpoints)?)
        }
        // The replay was not committed durably: the log goes on in its cycle until the first
        // batch, a checkpoint, commits it.
        Some(file) if recovered.kept_log => {
            let wal = Wal::resume(file, log, &recovered, b.checkpoints)?;
            wal.checkpoint_soon();
            Some(wal)
        }
        existing if b.uses_log() => {
            let file = match existing {
                Some(f) => f,
                None => wal::file::open_log(&log, b.storage_layer.as_ref())?,
            };
            let id = store_id(&db)?;
            let wal = Wal::start(file, log, id, recovered.applied + 1, b.checkpoints)?;
            if again {
                // A reopen has no registration commit (the open's) to record the cycle the log
                // starts in: this one does, before the first record.
                let txn = db.begin_write()?;
                wal::mark_started(&txn, &wal)?;
                txn.commit()?;
            }
            Some(wal)
        }
        existing => {
            // Everything the log held is in the store now, durably, and the store records that
            // it needs no log.
            drop(existing);
            if let Err(e) = fs::remove_file(&log)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                return Err(io_to_error(e));
            }
            None
        }
    };
    Ok(Opened { db, wal, recovered })
}

/// Moves a log the store must not replay out of the way, keeping it for whoever wants to look:
/// `<log>.stray-<seconds>` or `<log>.damaged-<seconds>`.
fn set_aside(log: &Path, why: wal::Aside, reason: &str) -> Result<()> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let kind = match why {
        wal::Aside::Stray => "stray",
        wal::Aside::Damaged => "damaged",
    };
    let mut n = 0u32;
    let to = loop {
        let mut name = log.as_os_str().to_owned();
        name.push(format!(".{kind}-{secs}"));
        if n > 0 {
            name.push(format!("-{n}"));
        }
        let to = PathBuf::from(name);
        if !to.exists() {
            break to;
        }
        n += 1;
    };
    fs::rename(log, &to)
        .map_err(|e| crate::error::io_at(e, "moving a write-ahead log aside", log))?;
    tracing::warn!(
        log = %log.display(),
        moved_to = %to.display(),
        reason,
        "moved a write-ahead log that this store must not replay aside"
    );
    Ok(())
}

/// The store's identity.
fn store_id(db: &Database) -> Result<u64> {
    let txn = db.begin_read()?;
    txn.open_table(META)?
        .get(KEY_STORE_ID)?
        .map(|g| g.value())
        .ok_or_else(|| Error::corrupted("the store has no identity (its META table is damaged)"))
}

/// Opens the store file itself: creates it if missing, checks it is a postbox store of a
/// format this version reads, and returns it with its format version (an older one is
/// upgraded by the caller, after the log's replay).
fn open_file(path: &Path, b: &EngineConfig) -> Result<(Database, u64)> {
    match fs::metadata(path) {
        Ok(m) if m.is_dir() => {
            return Err(Error::NotAStore(format!(
                "{} is a directory",
                path.display()
            )));
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(path, b)?,
        Err(e) => return Err(io_to_error(e)),
    }
    check_header(path)?;
    // Look before opening for writing: a writable open (and its integrity check) writes to the
    // file, and a database that is not ours must be left exactly as it was. A file that needs
    // recovery (its last writer crashed, or in multi-process mode a writer is live) cannot be
    // opened read-only; then the writable open recovers it and the check comes after.
    let (db, version) = match redb_builder(b).open_read_only(path) {
        Ok(ro) => {
            let version = inspect(path, &ro)?;
            drop(ro);
            (open_writable(path, b)?, version)
        }
        Err(redb::DatabaseError::RepairAborted) => {
            // Repairing writes. A database that is positively not a postbox store (or a newer
            // one) is refused untouched; if the probe cannot tell, the store is opened for real.
            if let Ok(version) = super::probe::format_version(path) {
                check_version(path, version)?;
            }
            let db = open_writable(path, b)?;
            let version = inspect(path, &db)?;
            (db, version)
        }
        Err(e) => return Err(e.into()),
    };
    Ok((db, version))
}

/// Opens the store file for writing, through the test layer if there is one.
fn open_writable(path: &Path, b: &EngineConfig) -> Result<Database> {
    let Some(layer) = &b.storage_layer else {
        return Ok(redb_builder(b).open(path)?);
    };
    let file = os::lock::shared(OpenOptions::new().read(true).write(true))
        .open(path)
        .map_err(io_to_error)?;
    let backend = layer.store_file(file).map_err(io_to_error)?;
    Ok(redb_builder(b).create_with_backend(Layered(backend))?)
}

/// A layer's backend, as redb takes it.
#[derive(Debug)]
struct Layered(Box<dyn redb::StorageBackend>);

impl redb::StorageBackend for Layered {
    fn len(&self) -> std::result::Result<u64, std::io::Error> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::result::Result<(), std::io::Error> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> std::result::Result<(), std::io::Error> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> std::result::Result<(), std::io::Error> {
        self.0.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::result::Result<(), std::io::Error> {
        self.0.write(offset, data)
    }
    fn close(&self) -> std::result::Result<(), std::io::Error> {
        self.0.close()
    }
    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> BackendResult<bool> {
        self.0.try_lock_range(start, end)
    }
    fn try_lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> BackendResult<bool> {
        self.0.try_lock_shared_range(start, end)
    }
    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> BackendResult<()> {
        self.0.lock_range(start, end)
    }
    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> BackendResult<()> {
        self.0.lock_shared_range(start, end)
    }
    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> BackendResult<()> {
        self.0.unlock_range(start, end)
    }
    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> BackendResult<bool> {
        self.0.query_lock_range(start, end)
    }
}

type BackendResult<T> = std::result::Result<T, redb::BackendError>;

/// Checks that the file is a postbox store this version can open and returns its format
/// version. Every table is looked up, so that damage to redb's table directory (a table's name
/// or types) is reported here as `Corrupted`, not later as a missing or foreign table.
fn inspect(path: &Path, db: &impl ReadableDatabase) -> Result<u64> {
    let txn = db.begin_read()?;
    let version = check_version(path, super::read::format_version(&txn)?)?;
    each_table(&mut CheckTable { txn: &txn, version })?;
    Ok(version)
}

/// Looks a table up, reporting a damaged table directory as `Corrupted`.
struct CheckTable<'a> {
    txn: &'a ReadTransaction,
    version: u64,
}

impl TableVisitor for CheckTable<'_> {
    type Error = Error;

    fn visit<K: redb::Key + 'static, V: redb::Value + 'static>(
        &mut self,
        def: TableDefinition<K, V>,
    ) -> Result<()> {
        match self.txn.open_table(def) {
            Ok(_) => Ok(()),
            // A format-1 store may predate a table; its upgrade creates it.
            Err(redb::TableError::TableDoesNotExist(_)) if self.version < FORMAT_VERSION => Ok(()),
            Err(
                e @ (redb::TableError::TableDoesNotExist(_)
                | redb::TableError::TableTypeMismatch { .. }
                | redb::TableError::TableIsMultimap(_)),
            ) => Err(Error::Corrupted(format!(
                "{e} (the store's table directory is damaged)"
            ))),
            Err(e) => Err(e.into()),
        }
    }
}

/// Creates every table a store lacks.
struct CreateTable<'a>(&'a WriteTransaction);

impl TableVisitor for CreateTable<'_> {
    type Error = Error;

    fn visit<K: redb::Key + 'static, V: redb::Value + 'static>(
        &mut self,
        def: TableDefinition<K, V>,
    ) -> Result<()> {
        self.0.open_table(def)?;
        Ok(())
    }
}

/// The format version of a postbox store that this version can open.
fn check_version(path: &Path, version: Option<u64>) -> Result<u64> {
    match version {
        None => Err(Error::NotAStore(format!(
            "{} is a redb database without postbox tables",
            path.display()
        ))),
        Some(v) if v > FORMAT_VERSION => Err(Error::IncompatibleVersion {
            found: u32::try_from(v).unwrap_or(u32::MAX),
            supported: FORMAT_VERSION as u32,
        }),
        // No version 0 was ever written.
        Some(0) => Err(Error::corrupted(format!(
            "{}: format version 0",
            path.display()
        ))),
        Some(v) => Ok(v),
    }
}

/// State rows rewritten per batch of the upgrade (a batch is collected before it is written
/// back: a redb table cannot be changed while it is being iterated).
const UPGRADE_BATCH: usize = 4096;

/// Upgrades an older store to the current format in one write transaction: tables the store
/// predates are created (format 3 added `DEFERRED`, format 4 the job, checkpoint and application
/// tables); from format 1, every state row and queue
/// record is rewritten with its checksum as well (envelopes are left in format 1, which their
/// decoder still reads); then the format version is set. A crash before the commit leaves the
/// store as it was, and the next open upgrades it again.
///
/// A row or record that format 1 cannot decode either is left as it is: it was unreadable before
/// and stays so (the operation that reads it reports `Corrupted`); opening never destroys.
fn upgrade(db: &Database) -> Result<()> {
    let txn = db.begin_write()?;
    // Another process sharing the store may have upgraded it since we looked.
    let version = txn.open_table(META)?.get(KEY_FORMAT)?.map(|g| g.value());
    if version.is_none_or(|v| v >= FORMAT_VERSION) {
        txn.abort()?;
        return Ok(());
    }
    each_table(&mut CreateTable(&txn))?;
    {
        let mut meta = txn.open_table(META)?;
        if meta.get(KEY_STORE_ID)?.is_none() {
            meta.insert(KEY_STORE_ID, new_store_id())?;
        }
    }
    if version == Some(1) {
        let mut states = txn.open_table(STATE)?;
        let mut from = 0u64;
        loop {
            let rows = states
                .range(from..)?
                .take(UPGRADE_BATCH)
                .map(|e| e.map(|(k, v)| (k.value(), v.value())))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            for (id, row) in &rows {
                if let Ok(st) = State::decode_format1(row) {
                    states.insert(*id, st.encode(*id))?;
                }
            }
            match rows.last() {
                Some((last, _)) if rows.len() == UPGRADE_BATCH => match last.checked_add(1) {
                    Some(next) => from = next,
                    None => break,
                },
                _ => break,
            }
        }
        let mut queues = txn.open_table(QUEUES)?;
        let records = queues
            .iter()?
            .map(|e| e.map(|(k, v)| (k.value().to_owned(), v.value().to_vec())))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        for (name, raw) in records {
            if let Ok(rec) = super::codec::decode_queue(&name, &raw) {
                queues.insert(
                    name.as_str(),
                    super::codec::encode_queue(&name, &rec).as_slice(),
                )?;
            }
        }
    }
    write_format(&mut txn.open_table(META)?)?;
    txn.commit()?;
    Ok(())
}

/// Rejects files that are not redb databases before redb sees them, with a clear error.
fn check_header(path: &Path) -> Result<()> {
    let mut f = File::open(path).map_err(io_to_error)?;
    let mut head = [0u8; 4];
    let mut got = 0;
    while got < head.len() {
        match f.read(&mut head[got..]).map_err(io_to_error)? {
            0 => break,
            n => got += n,
        }
    }
    if got == 0 {
        return Err(Error::Corrupted(format!(
            "{} is empty (truncated store?)",
            path.display()
        )));
    }
    if got < head.len() || head != REDB_MAGIC {
        return Err(Error::NotAStore(format!(
            "{} is not a postbox store",
            path.display()
        )));
    }
    Ok(())
}

/// The prefix of the temporary names a store is built under: `.<name>.creating-`, then the
/// builder's process id, `-` and a nonce.
fn temp_prefix(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(".{name}.creating-")
}

fn temp_path(path: &Path) -> PathBuf {
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    path.with_file_name(format!(
        "{}{}-{nonce}",
        temp_prefix(path),
        std::process::id()
    ))
}

fn create(path: &Path, b: &EngineConfig) -> Result<()> {
    remove_abandoned_builds(path);
    let tmp = temp_path(path);
    let result = build_new(&tmp, b).and_then(|()| publish(&tmp, path));
    let _ = fs::remove_file(&tmp);
    result
}

/// Removes the temporary files of creations that a crash interrupted (their builder's
/// process is gone), so that a store killed while being created leaves nothing behind once
/// it is created again. Best effort: a file that cannot be listed or removed stays, and only
/// where the system tells which processes exist (`os::process::exists`) is anything removed.
fn remove_abandoned_builds(path: &Path) {
    if os::process::exists(os::process::id()).is_none() {
        return;
    }
    let dir = os::fs::dir_of(path);
    let prefix = temp_prefix(path);
    let Ok(entries) = fs::read_dir(&dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        // A live builder (this process included) still needs its file.
        if os::process::exists(pid) != Some(false) {
            continue;
        }
        match fs::remove_file(entry.path()) {
            Ok(()) => tracing::info!(
                file = %entry.path().display(),
                "removed the temporary file of an interrupted store creation"
            ),
            Err(e) => tracing::debug!(
                file = %entry.path().display(),
                error = %e,
                "could not remove the temporary file of an interrupted store creation"
            ),
        }
    }
}

fn build_new(tmp: &Path, b: &EngineConfig) -> Result<()> {
    let mut opts = OpenOptions::new();
    os::fs::owner_only(os::lock::shared(
        opts.read(true).write(true).create_new(true),
    ));
    let file = opts.open(tmp).map_err(io_to_error)?;
    let mut rb = redb_builder(b);
    rb.set_concurrency_mode(ConcurrencyMode::ExclusiveWriter);
    rb.set_check_integrity_on_open(false);
    // Through the test layer too, so that power-loss and fault tests cover creation.
    let db = match &b.storage_layer {
        Some(layer) => {
            rb.create_with_backend(Layered(layer.store_file(file).map_err(io_to_error)?))?
        }
        None => rb.create_with_backend(redb::backends::FileBackend::new(file)?)?,
    };
    let txn = db.begin_write()?;
    {
        each_table(&mut CreateTable(&txn))?;
        let mut meta = txn.open_table(META)?;
        write_format(&mut meta)?;
        meta.insert(KEY_STORE_ID, new_store_id())?;
        drop(meta);
        txn.open_table(COUNTERS)?
            .insert(SEQUENCES_KEY, encode_sequences(&[1; 4]))?;
    }
    txn.commit()?;
    drop(db);
    // Open for writing: Windows flushes only a handle that may write.
    os::lock::shared(OpenOptions::new().write(true))
        .open(tmp)
        .and_then(|f| f.sync_all())
        .map_err(io_to_error)?;
    Ok(())
}

/// Gives the finished file its name without replacing anything another process created
/// meanwhile (a hard link on Unix, a move on Windows: `os::fs::publish`), then makes the new
/// directory entry durable.
fn publish(tmp: &Path, path: &Path) -> Result<()> {
    match os::fs::publish(tmp, path) {
        Ok(()) => {}
        // Another process created the store first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(io_to_error(e)),
    }
    os::fs::sync_dir(path).map_err(io_to_error)
}

/// Opens an existing store again after a failed write (see `db`): like [`open`], but never
/// creates the file.
pub fn reopen(path: &Path, b: &EngineConfig) -> Result<Opened> {
    if let Err(e) = fs::metadata(path) {
        return Err(io_to_error(e));
    }
    open_and_recover(path, b, true)
}
