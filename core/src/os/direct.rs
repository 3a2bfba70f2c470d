//! Durable writes that bypass the page cache, for the write-ahead log: on Linux a second
//! handle of the log opened `O_DIRECT | O_DSYNC`, so one `pwrite` both transfers a record's
//! pages and makes them durable (a FUA write, or the write and a cache flush, as the device
//! offers), instead of a buffered `pwrite` and an `fdatasync` that then looks for the dirty
//! pages. Elsewhere, and on file systems that refuse direct I/O (tmpfs), there is no such
//! handle and the log writes and syncs as before.
//!
//! Direct I/O wants the offset, the length and the memory all aligned to the device's block:
//! the log writes whole 4 KiB pages at page offsets, and the bytes are copied into a page-
//! aligned part of a scratch buffer here. The log's preallocated zeros mean such a write never
//! extends the file, so the file's size needs no sync.

use std::fs::File;
use std::io;
use std::path::Path;

/// The alignment direct writes keep: offsets, lengths and memory.
pub const ALIGN: usize = 4096;

/// A handle on a file whose writes are durable when they return.
#[derive(Debug)]
pub struct DirectWriter {
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    file: File,
    scratch: crate::sync::Mutex<Vec<u8>>,
}

/// Opens `path` (which exists) for durable direct writes; `None` where this platform or the
/// file's file system has none, which is not an error: the caller writes and syncs instead.
pub fn open(path: &Path) -> Option<DirectWriter> {
    imp::open(path).map(|file| DirectWriter {
        file,
        scratch: crate::sync::Mutex::new(Vec::new()),
    })
}

impl DirectWriter {
    /// Writes all of `buf` at `offset` and returns once it is durable. `offset` and
    /// `buf.len()` must be multiples of [`ALIGN`] and inside the file's length.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a misaligned request; otherwise the file system's error, after
    /// which any part of `buf` may or may not be durable.
    pub fn write_durably(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if !buf.len().is_multiple_of(ALIGN) || !offset.is_multiple_of(ALIGN as u64) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a direct write must cover whole pages",
            ));
        }
        let mut scratch = self.scratch.lock();
        if scratch.len() < buf.len() + ALIGN {
            scratch.resize(buf.len() + ALIGN, 0);
        }
        let start = scratch.as_ptr().align_offset(ALIGN);
        let Some(aligned) = scratch.get_mut(start..start + buf.len()) else {
            return Err(io::Error::other(
                "no page-aligned room in the scratch buffer",
            ));
        };
        aligned.copy_from_slice(buf);
        imp::write_all_at(&self.file, aligned, offset)
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use std::fs::{File, OpenOptions};
    use std::io;
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    use std::path::Path;

    pub fn open(path: &Path) -> Option<File> {
        match OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
            .open(path)
        {
            Ok(f) => Some(f),
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "no direct writes for the write-ahead log: it writes and syncs");
                None
            }
        }
    }

    pub fn write_all_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        file.write_all_at(buf, offset)
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::fs::File;
    use std::io;
    use std::path::Path;

    pub fn open(_: &Path) -> Option<File> {
        None
    }

    pub fn write_all_at(_: &File, _: &[u8], _: u64) -> io::Result<()> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a direct write wrote is what the ordinary handle reads, including over pages that
    /// handle wrote and cached before; a request that is not whole pages is refused.
    #[test]
    fn a_direct_write_is_what_the_file_then_holds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, vec![7u8; 4 * ALIGN]).unwrap();
        let Some(direct) = open(&path) else {
            // No direct I/O here (another system, or tmpfs): nothing to check.
            return;
        };
        let page = vec![0x5au8; 2 * ALIGN];
        direct.write_durably(&page, ALIGN as u64).unwrap();
        let held = std::fs::read(&path).unwrap();
        assert_eq!(held.len(), 4 * ALIGN);
        assert!(held[..ALIGN].iter().all(|b| *b == 7));
        assert!(held[ALIGN..3 * ALIGN].iter().all(|b| *b == 0x5a));
        assert!(held[3 * ALIGN..].iter().all(|b| *b == 7));
        let torn = direct.write_durably(&page[..100], 0).unwrap_err();
        assert_eq!(torn.kind(), io::ErrorKind::InvalidInput);
        let off = direct.write_durably(&page, 100).unwrap_err();
        assert_eq!(off.kind(), io::ErrorKind::InvalidInput);
    }
}
