//! Looking inside a file without changing it, even when redb would have to repair it first.
//!
//! A redb file whose last writer crashed cannot be opened read-only: redb insists on repairing
//! it, which writes. Before postbox knows the file is one of its stores it must not write a
//! byte (invariant 10: a foreign database is refused untouched), so the probe opens it through
//! a backend that reads the file and keeps every write in memory. redb repairs its in-memory
//! view, the probe reads the format version, and the file stays exactly as it was.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use crate::sync::Mutex;
use redb::{ReadableDatabase, StorageBackend};

use crate::error::{Result, io_to_error};

/// The file, read through, with redb's writes kept aside.
#[derive(Debug)]
struct Overlay {
    file: Mutex<File>,
    file_len: u64,
    state: Mutex<Aside>,
}

#[derive(Debug)]
struct Aside {
    len: u64,
    /// Writes in the order they were made; later ones win.
    writes: Vec<(u64, Vec<u8>)>,
}

fn out_of_range() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "read past the end")
}

impl StorageBackend for Overlay {
    fn len(&self) -> std::result::Result<u64, std::io::Error> {
        Ok(self.state.lock().len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> std::result::Result<(), std::io::Error> {
        let end = offset
            .checked_add(out.len() as u64)
            .ok_or_else(out_of_range)?;
        let aside = self.state.lock();
        if end > aside.len {
            return Err(out_of_range());
        }
        out.fill(0);
        if offset < self.file_len {
            let n = (self.file_len.min(end) - offset) as usize;
            let mut f = self.file.lock();
            f.seek(SeekFrom::Start(offset))?;
            f.read_exact(&mut out[..n])?;
        }
        for (at, data) in &aside.writes {
            let w_end = at + data.len() as u64;
            if *at < end && w_end > offset {
                let from = (*at).max(offset);
                let to = w_end.min(end);
                out[(from - offset) as usize..(to - offset) as usize]
                    .copy_from_slice(&data[(from - at) as usize..(to - at) as usize]);
            }
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> std::result::Result<(), std::io::Error> {
        let mut aside = self.state.lock();
        if len < aside.len {
            // Bytes cut off must read as zero if the length grows again.
            aside.writes.retain(|(at, _)| *at < len);
            for (at, data) in &mut aside.writes {
                data.truncate((len - *at) as usize);
            }
        }
        aside.len = len;
        Ok(())
    }

    fn sync_data(&self) -> std::result::Result<(), std::io::Error> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> std::result::Result<(), std::io::Error> {
        let mut aside = self.state.lock();
        aside.writes.push((offset, data.to_vec()));
        aside.len = aside.len.max(offset + data.len() as u64);
        Ok(())
    }
}

/// The postbox format version of the store at `path` (`None` for a redb database without
/// postbox tables), read without writing to the file even if redb must repair it.
///
/// # Errors
///
/// Whatever redb reports about the file (damage, not a redb file); callers treat an error as
/// "cannot tell" and fall back to opening the file for real.
pub fn format_version(path: &Path) -> Result<Option<u64>> {
    let file = File::open(path).map_err(io_to_error)?;
    let file_len = file.metadata().map_err(io_to_error)?.len();
    let overlay = Overlay {
        file: Mutex::new(file),
        file_len,
        state: Mutex::new(Aside {
            len: file_len,
            writes: Vec::new(),
        }),
    };
    let mut builder = redb::Database::builder();
    builder.set_concurrency_mode(redb::ConcurrencyMode::ExclusiveWriter);
    builder.set_check_integrity_on_open(false);
    let db = builder.create_with_backend(overlay)?;
    let txn = db.begin_read()?;
    super::read::format_version(&txn)
}
