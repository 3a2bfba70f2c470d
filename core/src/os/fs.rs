//! Files postbox creates: for their owner only, published under their final name without
//! replacing anything, and their directory entries made durable where the system can.

use std::fs::OpenOptions;
use std::io;
use std::path::{Path, PathBuf};

/// Makes `opts` create a file readable and writable by its owner only.
///
/// Unix: mode 0600, whatever the umask. Windows: no ACL is set; a new file takes the one its
/// directory passes on (in a user's profile: the user, SYSTEM and Administrators), so a store
/// in a shared directory is as open as that directory makes it.
pub fn owner_only(opts: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    opts
}

/// Gives the finished file `tmp` the name `path`, unless `path` exists: then the error's kind
/// is [`io::ErrorKind::AlreadyExists`] and nothing changed. Afterwards `tmp` may still exist
/// (Unix links the file a second time; Windows moves it), and the caller removes it.
///
/// The new name is not durable yet where the system has directory syncs: see [`sync_dir`].
///
/// # Errors
///
/// The file system's error.
pub fn publish(tmp: &Path, path: &Path) -> io::Result<()> {
    imp::publish(tmp, path)
}

/// Makes the entries of the directory holding `path` durable: a file created or renamed there
/// survives a power loss once this returned.
///
/// Unix: `fsync` of the directory (`F_FULLFSYNC` on Apple systems, through the standard
/// library). Windows cannot sync a directory and this does nothing: a new store's name is made
/// durable by its move ([`publish`] writes through), and a new log's entry relies on NTFS's
/// metadata journal, which the log's first flush (`FlushFileBuffers`) commits with the file's
/// own metadata. A file system without a journal (FAT32, exFAT) can lose a log created just
/// before a power loss; the store then refuses to open without it (`docs/design.md`
/// § Platforms).
///
/// # Errors
///
/// The file system's error.
pub fn sync_dir(path: &Path) -> io::Result<()> {
    imp::sync_dir(&dir_of(path))
}

/// The directory holding `path` (`.` for a bare file name).
pub fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}

#[cfg(unix)]
mod imp {
    use std::fs::{self, File};
    use std::io;
    use std::path::Path;

    pub fn publish(tmp: &Path, path: &Path) -> io::Result<()> {
        fs::hard_link(tmp, path)
    }

    pub fn sync_dir(dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

#[cfg(windows)]
mod imp {
    use std::io;
    use std::path::Path;

    use windows_sys::Win32::Storage::FileSystem::{MOVEFILE_WRITE_THROUGH, MoveFileExW};

    pub fn publish(tmp: &Path, path: &Path) -> io::Result<()> {
        let (from, to) = (super::super::wide(tmp), super::super::wide(path));
        // Without MOVEFILE_REPLACE_EXISTING the move fails (ERROR_ALREADY_EXISTS) when `path`
        // exists; on one volume it is a rename, atomic. WRITE_THROUGH returns once the rename
        // is on disk.
        // SAFETY: both are NUL-terminated UTF-16 strings that live across the call.
        let ok = unsafe { MoveFileExW(from.as_ptr(), to.as_ptr(), MOVEFILE_WRITE_THROUGH) };
        if ok == 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    pub fn sync_dir(_dir: &Path) -> io::Result<()> {
        Ok(())
    }
}
