//! The files under a store, behind traits so that tests can put a layer between postbox and the
//! disk: to record every write and sync, to drop or tear unsynced writes (simulated power
//! loss), or to fail the Nth operation. Not part of the supported API: the traits may change
//! in any release.

use std::fs::File;
use std::io;
use std::sync::Arc;

/// What the log needs of its file: positioned writes and reads, its length, and a data sync.
///
/// Implementations must be usable from several threads; the log serialises its own writes.
pub trait LogFile: Send + Sync + std::fmt::Debug {
    /// Writes all of `buf` at `offset`.
    ///
    /// # Errors
    ///
    /// The file system's error (`ENOSPC`, Windows' `ERROR_DISK_FULL`, when the disk is full).
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;

    /// Reads up to `buf.len()` bytes at `offset`; fewer only at the end of the file.
    ///
    /// # Errors
    ///
    /// The file system's error.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;

    /// The file's length.
    ///
    /// # Errors
    ///
    /// The file system's error.
    fn size(&self) -> io::Result<u64>;

    /// Sets the file's length: cuts it, or extends it with zeros.
    ///
    /// # Errors
    ///
    /// The file system's error.
    fn set_len(&self, len: u64) -> io::Result<()>;

    /// Makes every write so far durable (`fdatasync`; `F_FULLFSYNC` on Apple systems,
    /// `FlushFileBuffers` on Windows).
    ///
    /// # Errors
    ///
    /// The file system's error; after one, nothing written since the last good sync can be
    /// trusted to be on disk.
    fn sync(&self) -> io::Result<()>;

    /// Starts writing `offset..offset + len` to the device without waiting, ahead of the
    /// [`LogFile::sync`] that will follow (Linux's `sync_file_range`): a hint that makes
    /// nothing durable. The default does nothing.
    fn start_writeback(&self, offset: u64, len: u64) {
        let _ = (offset, len);
    }

    /// Writes all of `buf` at `offset` and makes it durable, as [`LogFile::write_at`] then
    /// [`LogFile::sync`] (the default); a file may do both in one step (a direct, synchronous
    /// write). The log asks only for whole 4 KiB pages at page offsets inside the file.
    ///
    /// # Errors
    ///
    /// The file system's error; after one, any part of `buf` may or may not be durable.
    fn write_durably(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_at(buf, offset)?;
        self.sync()
    }
}

/// A log file on the real file system.
#[derive(Debug)]
pub struct OsLogFile(pub File);

impl LogFile for OsLogFile {
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        crate::os::io::write_all_at(&self.0, buf, offset)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        crate::os::io::read_at(&self.0, buf, offset)
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn start_writeback(&self, offset: u64, len: u64) {
        crate::os::io::start_writeback(&self.0, offset, len);
    }
}

/// Wraps the files of a store opened with
/// [`StoreBuilder::storage_layer`](crate::StoreBuilder::storage_layer).
pub trait StorageLayer: Send + Sync + std::fmt::Debug {
    /// The backend redb uses for the store file `file` (already opened read-write).
    ///
    /// # Errors
    ///
    /// Any error; opening the store fails with it.
    fn store_file(&self, file: File) -> io::Result<Box<dyn redb::StorageBackend>>;

    /// The log file `file` (already opened read-write, created for its owner only if new).
    fn log_file(&self, file: File) -> Box<dyn LogFile>;
}

/// A shared layer.
pub type SharedLayer = Arc<dyn StorageLayer>;
