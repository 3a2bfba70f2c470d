//! File locking between processes.
//!
//! The store file's locks are redb's, the same protocol on every system: byte-range locks on
//! bytes past 2^62, which no data ever reaches (open file description locks, `F_OFD_SETLK`, on
//! Linux and Apple systems; `LockFileEx` on Windows, whose mandatory locks therefore never
//! block a read or write of data). A single-process store takes the writer byte exclusively, so
//! a second opener gets `AlreadyOpen`; a multi-process store takes it shared with every other
//! multi-process opener. The write-ahead log belongs to a single-process store and is opened
//! only by the process that holds that lock.
//!
//! So every file postbox opens is opened shareable ([`shared`]): exclusivity comes from those
//! locks, never from the open itself. On Windows that is an explicit share mode (read, write
//! and delete): a narrower one would make a second process's open fail with a sharing
//! violation (an `Io` error) where Unix reports `AlreadyOpen`, and would refuse the
//! multi-process opener, the command-line tool's read-only look at a store, and renaming a
//! damaged log aside.

use std::fs::OpenOptions;
use std::path::Path;

/// Makes `opts` open the file so that other processes (and other handles of this one) may
/// read, write, rename and delete it meanwhile.
pub fn shared(opts: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(windows)]
    {
        use std::os::windows::fs::OpenOptionsExt;
        opts.share_mode(SHARE_ALL);
    }
    opts
}

/// Windows' share mode of every file and directory postbox opens.
#[cfg(windows)]
pub const SHARE_ALL: u32 = {
    use windows_sys::Win32::Storage::FileSystem::{
        FILE_SHARE_DELETE, FILE_SHARE_READ, FILE_SHARE_WRITE,
    };
    FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE
};

/// Who holds a store file this process has open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// A store handle of this process (or a file opened some other way).
    ThisProcess,
    /// A handle inherited across `fork()`: the parent opened it (Unix only).
    #[cfg_attr(not(unix), allow(dead_code))]
    Parent,
}

/// Who holds the store file at `path` in this process, if this process has it open: to tell
/// "open in this process" from "open in another" when the file's lock is taken, and "opened
/// here" from "inherited from the process this one was forked from".
///
/// Unix systems look at the process's open files (`/proc/self/fd` on Linux, `/dev/fd`
/// elsewhere) and at a small table of atomics where each opening notes the file and its pid
/// ([`OpenMark`]), instead of a registry behind a lock: a process-wide lock would be inherited
/// locked by a `fork()` child if another thread held it at that moment, and the child must be
/// able to open stores. Windows has no such list and no `fork`: there stores are registered
/// while open, under their canonical path (so a second hard link to a store is not
/// recognised, and the error is the same `AlreadyOpen` with a message that does not say
/// where).
pub fn holder(path: &Path) -> Option<Holder> {
    imp::holder(path)
}

/// Notes a store file as opened by this process until it is dropped (see [`holder`]).
pub struct OpenMark(#[allow(dead_code)] imp::Mark);

impl OpenMark {
    /// Marks the file at `path` open.
    pub fn new(path: &Path) -> OpenMark {
        OpenMark(imp::Mark::new(path))
    }
}

#[cfg(unix)]
mod imp {
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::Holder;

    /// Where the system lists this process's open files, each a name `stat` follows to the
    /// file.
    #[cfg(target_os = "linux")]
    const OPEN_FILES: &str = "/proc/self/fd";
    #[cfg(not(target_os = "linux"))]
    const OPEN_FILES: &str = "/dev/fd";

    /// `file key << 32 | pid` of the stores this process image opened (0: free). A process
    /// with more stores open at once than slots is told "this process", the safe guess.
    static OPENED: [AtomicU64; 32] = [const { AtomicU64::new(0) }; 32];

    fn file_key(m: &std::fs::Metadata) -> u64 {
        let folded = m.dev().wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ m.ino();
        ((folded ^ (folded >> 32)) & 0xFFFF_FFFF) | 1
    }

    pub fn holder(path: &Path) -> Option<Holder> {
        let target = std::fs::metadata(path).ok()?;
        let fds = std::fs::read_dir(OPEN_FILES).ok()?;
        let open = fds.flatten().any(|fd| {
            std::fs::metadata(fd.path())
                .is_ok_and(|m| m.dev() == target.dev() && m.ino() == target.ino())
        });
        if !open {
            return None;
        }
        let key = file_key(&target);
        let me = u64::from(std::process::id());
        let (mut mine, mut inherited) = (false, false);
        for slot in &OPENED {
            let v = slot.load(Ordering::Acquire);
            if v != 0 && v >> 32 == key {
                if v & 0xFFFF_FFFF == me {
                    mine = true;
                } else {
                    inherited = true;
                }
            }
        }
        Some(if inherited && !mine {
            Holder::Parent
        } else {
            Holder::ThisProcess
        })
    }

    /// The slot this opening took, if any.
    pub struct Mark(Option<usize>);

    impl Mark {
        pub fn new(path: &Path) -> Mark {
            let Ok(m) = std::fs::metadata(path) else {
                return Mark(None);
            };
            let value = (file_key(&m) << 32) | u64::from(std::process::id());
            Mark(OPENED.iter().position(|slot| {
                slot.compare_exchange(0, value, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            }))
        }
    }

    impl Drop for Mark {
        fn drop(&mut self) {
            // Only the process that opened the store frees its note: in a forked child the
            // inherited file stays open, and stays the parent's.
            let me = u64::from(std::process::id());
            if let Some(s) = self.0.and_then(|i| OPENED.get(i)) {
                let _ = s.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                    (v & 0xFFFF_FFFF == me).then_some(0)
                });
            }
        }
    }
}

#[cfg(windows)]
mod imp {
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    use super::Holder;

    /// The canonical paths of the stores open in this process, once per open.
    static OPEN: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

    fn key(path: &Path) -> Option<PathBuf> {
        let real = std::fs::canonicalize(path).ok()?;
        // Windows compares names without case.
        Some(PathBuf::from(real.to_string_lossy().to_lowercase()))
    }

    pub fn holder(path: &Path) -> Option<Holder> {
        let key = key(path)?;
        OPEN.lock()
            .is_ok_and(|open| open.contains(&key))
            .then_some(Holder::ThisProcess)
    }

    pub struct Mark(Option<PathBuf>);

    impl Mark {
        pub fn new(path: &Path) -> Mark {
            let key = key(path);
            if let (Some(key), Ok(mut open)) = (&key, OPEN.lock()) {
                open.push(key.clone());
            }
            Mark(key)
        }
    }

    impl Drop for Mark {
        fn drop(&mut self) {
            if let (Some(key), Ok(mut open)) = (&self.0, OPEN.lock())
                && let Some(at) = open.iter().position(|k| k == key)
            {
                open.swap_remove(at);
            }
        }
    }
}

#[cfg(not(any(unix, windows)))]
mod imp {
    use std::path::Path;

    use super::Holder;

    pub fn holder(_path: &Path) -> Option<Holder> {
        None
    }

    pub struct Mark;

    impl Mark {
        pub fn new(_path: &Path) -> Mark {
            Mark
        }
    }
}
