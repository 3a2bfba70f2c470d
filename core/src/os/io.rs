//! Positional file I/O: reads and writes at an offset, which several threads may issue on one
//! handle without sharing a file position (`pread`/`pwrite` on Unix; `ReadFile`/`WriteFile`
//! with an offset on Windows, which also moves the handle's position — nothing in postbox uses
//! that position).

use std::fs::File;
use std::io;

/// Writes all of `buf` at `offset`.
///
/// # Errors
///
/// The file system's error (the disk is full: [`io::ErrorKind::StorageFull`]).
pub fn write_all_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    imp::write_all_at(file, buf, offset)
}

/// Reads up to `buf.len()` bytes at `offset`; fewer only at the end of the file.
///
/// # Errors
///
/// The file system's error.
pub fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match imp::read_some_at(file, &mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Starts writing the file's dirty pages in `offset..offset + len` to the device without
/// waiting for them, so that a sync that follows has less left to do (Linux's
/// `sync_file_range(SYNC_FILE_RANGE_WRITE)`); elsewhere nothing. A hint: it makes nothing
/// durable, and a failure is the sync's to report.
pub fn start_writeback(file: &File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (
            libc::off64_t::try_from(offset),
            libc::off64_t::try_from(len),
        ) else {
            return;
        };
        // SAFETY: the descriptor belongs to `file`, which outlives the call; the call takes no
        // pointers.
        let _ = unsafe {
            libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
        };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}

#[cfg(unix)]
mod imp {
    use std::fs::File;
    use std::io;
    use std::os::unix::fs::FileExt;

    pub fn write_all_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        file.write_all_at(buf, offset)
    }

    pub fn read_some_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        file.read_at(buf, offset)
    }
}

#[cfg(windows)]
mod imp {
    use std::fs::File;
    use std::io;
    use std::os::windows::fs::FileExt;

    use windows_sys::Win32::Foundation::ERROR_HANDLE_EOF;

    pub fn write_all_at(file: &File, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match file.seek_write(buf, offset) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "failed to write the whole buffer",
                    ));
                }
                Ok(n) => {
                    buf = &buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub fn read_some_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        match file.seek_read(buf, offset) {
            // Reading at or past the end of the file is an error on some handles: it means the
            // same as Unix's 0.
            Err(e) if e.raw_os_error() == Some(ERROR_HANDLE_EOF as i32) => Ok(0),
            other => other,
        }
    }
}
