//! Creating and opening the store file.
//!
//! Creation is atomic: the store is built under a temporary name, made durable, then linked to
//! its final name and the directory is synced, so a crash at any point leaves either no store or
//! a complete one — never a file that cannot be opened.

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};

use redb::{ConcurrencyMode, Database, ReadableDatabase};

use super::tables::*;
use crate::error::{Error, Result, io_to_error};
use crate::store::StoreBuilder;

const REDB_MAGIC: &[u8] = b"redb";

fn redb_builder(b: &StoreBuilder) -> redb::Builder {
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

pub fn open(path: &Path, b: &StoreBuilder) -> Result<Database> {
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
    match redb_builder(b).open_read_only(path) {
        Ok(ro) => {
            let version = {
                let txn = ro.begin_read()?;
                super::read::format_version(&txn)?
            };
            drop(ro);
            check_version(path, version)?;
            Ok(redb_builder(b).open(path)?)
        }
        Err(redb::DatabaseError::RepairAborted) => {
            // Repairing writes. A database that is positively not a postbox store (or a newer
            // one) is refused untouched; if the probe cannot tell, the store is opened for real.
            if let Ok(version) = super::probe::format_version(path) {
                check_version(path, version)?;
            }
            let db = redb_builder(b).open(path)?;
            let version = {
                let txn = db.begin_read()?;
                super::read::format_version(&txn)?
            };
            check_version(path, version)?;
            Ok(db)
        }
        Err(e) => Err(e.into()),
    }
}

fn check_version(path: &Path, version: Option<u64>) -> Result<()> {
    match version {
        None => Err(Error::NotAStore(format!(
            "{} is a redb database without postbox tables",
            path.display()
        ))),
        Some(v) if v > FORMAT_VERSION => Err(Error::IncompatibleVersion {
            found: u32::try_from(v).unwrap_or(u32::MAX),
            supported: FORMAT_VERSION as u32,
        }),
        Some(_) => Ok(()),
    }
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

fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    path.with_file_name(format!(".{name}.creating-{}-{nonce}", std::process::id()))
}

fn create(path: &Path, b: &StoreBuilder) -> Result<()> {
    let tmp = temp_path(path);
    let result = build_new(&tmp, b).and_then(|()| publish(&tmp, path));
    let _ = fs::remove_file(&tmp);
    result
}

fn build_new(tmp: &Path, b: &StoreBuilder) -> Result<()> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let file = opts.open(tmp).map_err(io_to_error)?;
    let mut rb = redb_builder(b);
    rb.set_concurrency_mode(ConcurrencyMode::ExclusiveWriter);
    rb.set_check_integrity_on_open(false);
    let db = rb.create_with_backend(redb::backends::FileBackend::new(file)?)?;
    let txn = db.begin_write()?;
    {
        let mut meta = txn.open_table(META)?;
        meta.insert(KEY_FORMAT, FORMAT_VERSION)?;
        txn.open_table(COUNTERS)?
            .insert(SEQUENCES_KEY, encode_sequences(&[1; 4]))?;
        txn.open_table(QUEUES)?;
        txn.open_table(QUEUE_IDS)?;
        txn.open_table(COUNTERS)?;
        txn.open_table(STATE)?;
        txn.open_table(DATA)?;
        txn.open_table(READY)?;
        txn.open_table(SCHEDULED)?;
        txn.open_table(EXPIRING)?;
        txn.open_table(LOCK_EXPIRY)?;
        txn.open_table(OWNERS)?;
        txn.open_table(OWNER_SCOPES)?;
        txn.open_table(DEDUP)?;
        txn.open_table(DEDUP_EXPIRY)?;
    }
    txn.commit()?;
    drop(db);
    File::open(tmp)
        .and_then(|f| f.sync_all())
        .map_err(io_to_error)?;
    Ok(())
}

/// Links the finished file to its name without replacing anything another process created
/// meanwhile, then makes the new directory entry durable.
fn publish(tmp: &Path, path: &Path) -> Result<()> {
    match fs::hard_link(tmp, path) {
        Ok(()) => {}
        // Another process created the store first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(io_to_error(e)),
    }
    #[cfg(unix)]
    {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
            _ => PathBuf::from("."),
        };
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(io_to_error)?;
    }
    Ok(())
}

/// Opens an existing store again after a failed write (see `db`): like [`open`], but never
/// creates the file.
pub fn reopen(path: &Path, b: &StoreBuilder) -> Result<Database> {
    if let Err(e) = fs::metadata(path) {
        return Err(io_to_error(e));
    }
    open(path, b)
}
