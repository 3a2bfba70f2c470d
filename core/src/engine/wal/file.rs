//! Opening the write-ahead log's file.

use std::fs::File;
use std::io;
use std::path::Path;

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
        None => Box::new(OsLogFile(file)),
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
