//! A storage layer that shows a test every operation on a store's two files (the store file,
//! through redb's `StorageBackend`, and the write-ahead log) and lets it fail any of them:
//! the base of the power-loss and I/O-fault tests.

// Each test reads the parts of an operation it needs.
#![allow(dead_code)]

use std::fs::File;
use std::io;
use std::ops::Bound;
use std::sync::Arc;

use postbox::storage::{LogFile, OsLogFile, SharedLayer, StorageLayer};

/// Which of the store's files an operation is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    Store,
    Log,
}

/// One operation on a file.
#[derive(Debug)]
pub enum Io<'a> {
    Read,
    Write(u64, &'a [u8]),
    SetLen(u64),
    Sync,
}

/// What a test does around each operation.
pub trait Tap: Send + Sync + std::fmt::Debug + 'static {
    /// A file was opened; `file` holds what it holds at that moment.
    fn opened(&self, _which: Which, _file: &File) -> io::Result<()> {
        Ok(())
    }

    /// Before the operation: an error fails it, and it does not happen.
    fn before(&self, _which: Which, _io: &Io<'_>) -> io::Result<()> {
        Ok(())
    }

    /// After the operation succeeded.
    fn after(&self, _which: Which, _io: &Io<'_>) {}
}

/// The layer to give `StoreBuilder::storage_layer`.
pub fn layer<T: Tap>(tap: Arc<T>) -> SharedLayer {
    Arc::new(Tapped(tap))
}

#[derive(Debug)]
struct Tapped<T>(Arc<T>);

impl<T: Tap> StorageLayer for Tapped<T> {
    fn store_file(&self, file: File) -> io::Result<Box<dyn redb::StorageBackend>> {
        self.0.opened(Which::Store, &file)?;
        let inner = redb::backends::FileBackend::new(file).map_err(io::Error::other)?;
        Ok(Box::new(StoreFile {
            inner,
            tap: self.0.clone(),
        }))
    }

    fn log_file(&self, file: File) -> Box<dyn LogFile> {
        // The log's trait cannot fail here; a tap that must refuse a log fails its first
        // operation instead.
        let _ = self.0.opened(Which::Log, &file);
        Box::new(Log {
            inner: OsLogFile(file),
            tap: self.0.clone(),
        })
    }
}

/// Runs `op` between the tap's `before` and `after`.
fn tapped<T: Tap, R>(
    tap: &T,
    which: Which,
    io: Io<'_>,
    op: impl FnOnce() -> io::Result<R>,
) -> io::Result<R> {
    tap.before(which, &io)?;
    let r = op()?;
    tap.after(which, &io);
    Ok(r)
}

#[derive(Debug)]
struct StoreFile<T> {
    inner: redb::backends::FileBackend,
    tap: Arc<T>,
}

type BackendResult<R> = Result<R, redb::BackendError>;

impl<T: Tap> redb::StorageBackend for StoreFile<T> {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        tapped(&*self.tap, Which::Store, Io::Read, || {
            self.inner.read(offset, out)
        })
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        tapped(&*self.tap, Which::Store, Io::SetLen(len), || {
            self.inner.set_len(len)
        })
    }
    fn sync_data(&self) -> io::Result<()> {
        tapped(&*self.tap, Which::Store, Io::Sync, || {
            self.inner.sync_data()
        })
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        tapped(&*self.tap, Which::Store, Io::Write(offset, data), || {
            self.inner.write(offset, data)
        })
    }
    fn close(&self) -> io::Result<()> {
        self.inner.close()
    }
    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> BackendResult<bool> {
        self.inner.try_lock_range(start, end)
    }
    fn try_lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> BackendResult<bool> {
        self.inner.try_lock_shared_range(start, end)
    }
    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> BackendResult<()> {
        self.inner.lock_range(start, end)
    }
    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> BackendResult<()> {
        self.inner.lock_shared_range(start, end)
    }
    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> BackendResult<()> {
        self.inner.unlock_range(start, end)
    }
    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> BackendResult<bool> {
        self.inner.query_lock_range(start, end)
    }
}

#[derive(Debug)]
struct Log<T> {
    inner: OsLogFile,
    tap: Arc<T>,
}

impl<T: Tap> LogFile for Log<T> {
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        tapped(&*self.tap, Which::Log, Io::Write(offset, buf), || {
            self.inner.write_at(buf, offset)
        })
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        tapped(&*self.tap, Which::Log, Io::Read, || {
            self.inner.read_at(buf, offset)
        })
    }
    fn size(&self) -> io::Result<u64> {
        self.inner.size()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        tapped(&*self.tap, Which::Log, Io::SetLen(len), || {
            self.inner.set_len(len)
        })
    }
    fn sync(&self) -> io::Result<()> {
        tapped(&*self.tap, Which::Log, Io::Sync, || self.inner.sync())
    }
}
