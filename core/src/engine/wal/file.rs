//! Opening the write-ahead log's file.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Result, io_at};
use crate::os;
use crate::storage::{LogFile, OsLogFile, SharedLayer};

/// Opens (or creates) the log at `path`, through `layer` when tests put one in between.
///
/// # Errors
///
/// The file system's error.
pub fn open_log(path: &Path, layer: Option<&SharedLayer>) -> Result<Box<dyn LogFile>> {
    let (file, _) = open_os(path).map_err(|e| {
        let doing = match e.kind() {
            io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => {
                "opening the write-ahead log (it is created beside the store, so the \
                 directory must be writable; or open the store without the log):"
            }
            _ => "opening the write-ahead log",
        };
        io_at(e, doing, path)
    })?;
    Ok(match layer {
        Some(l) => l.log_file(file),
        None => match os::direct::open(path) {
            Some(direct) => Box::new(DirectLogFile {
                file: OsLogFile(file),
                direct,
                usable: AtomicBool::new(true),
            }),
            None => Box::new(OsLogFile(file)),
        },
    })
}

/// Opens (or creates, for its owner only: `os::fs::owner_only`) the log file at `path`. A new
/// file's directory entry is made durable before anything is written to it, so a synced record
/// is never in a file a crash can unlink (see `os::fs::sync_dir` for Windows).
///
/// # Errors
///
/// The file system's error.
pub fn open_os(path: &Path) -> io::Result<(File, bool)> {
    let mut opts = std::fs::OpenOptions::new();
    os::lock::shared(opts.read(true).write(true));
    match opts.open(path) {
        Ok(f) => return Ok((f, false)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let f = os::fs::owner_only(opts.create(true)).open(path)?;
    os::fs::sync_dir(path)?;
    Ok((f, true))
}

/// The log file with a second handle for durable direct writes (`os::direct`): every other
/// call goes to the ordinary handle.
#[derive(Debug)]
struct DirectLogFile {
    file: OsLogFile,
    direct: os::direct::DirectWriter,
    /// Cleared when the file system refused a direct write of whole pages (`EINVAL`: it wants
    /// a larger alignment, or takes `O_DIRECT` at open and not at write): the log then writes
    /// and syncs through the ordinary handle.
    usable: AtomicBool,
}

impl LogFile for DirectLogFile {
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_at(buf, offset)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.file.read_at(buf, offset)
    }

    fn size(&self) -> io::Result<u64> {
        self.file.size()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync()
    }

    fn start_writeback(&self, offset: u64, len: u64) {
        self.file.start_writeback(offset, len);
    }

    fn write_durably(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        // The ordinary handle's cached pages of the range (a record written there and synced,
        // or a torn write's) cannot land after this write: a direct write first writes back
        // and drops them, and the log's reads then come from the disk.
        if self.usable.load(Ordering::Relaxed) {
            match self.direct.write_durably(buf, offset) {
                // A refused request wrote nothing: it goes the ordinary way below.
                Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                    self.usable.store(false, Ordering::Relaxed);
                    tracing::info!(error = %e, "the file system refused a direct write to the write-ahead log: it writes and syncs instead");
                }
                other => return other,
            }
        }
        self.file.write_at(buf, offset)?;
        self.file.sync()
    }
}
