//! Free space on the file system that holds a file.

use std::path::Path;

/// Bytes an unprivileged process may still write on the file system holding `path`, or `None`
/// where the system cannot tell (`statvfs` on Unix; on Windows `GetDiskFreeSpaceExW`, which
/// also counts the user's disk quota).
pub fn available(path: &Path) -> Option<u64> {
    imp::available(path)
}

#[cfg(unix)]
mod imp {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    pub fn available(path: &Path) -> Option<u64> {
        let c = CString::new(path.as_os_str().as_bytes()).ok()?;
        let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
        // SAFETY: `c` is a NUL-terminated path that lives across the call, and `st` points to
        // writable memory of the size `statvfs` fills; it is read only after a 0 return.
        let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
        if rc != 0 {
            return None;
        }
        // SAFETY: `statvfs` returned 0, so it initialised the whole struct.
        let st = unsafe { st.assume_init() };
        #[allow(clippy::unnecessary_cast)] // the field types differ between systems
        Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
    }
}

#[cfg(windows)]
mod imp {
    use std::path::Path;

    use windows_sys::Win32::Storage::FileSystem::GetDiskFreeSpaceExW;

    pub fn available(path: &Path) -> Option<u64> {
        // The call takes a directory: the file's own, unless `path` is one.
        let dir = if path.is_dir() {
            path.to_owned()
        } else {
            super::super::fs::dir_of(path)
        };
        let wide = super::super::wide(&dir);
        let mut free = 0u64;
        // SAFETY: `wide` is a NUL-terminated UTF-16 path that lives across the call; `free`
        // is writable, and the two totals not asked for may be NULL.
        let ok = unsafe {
            GetDiskFreeSpaceExW(
                wide.as_ptr(),
                &mut free,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        (ok != 0).then_some(free)
    }
}

#[cfg(not(any(unix, windows)))]
mod imp {
    use std::path::Path;

    pub fn available(_path: &Path) -> Option<u64> {
        None
    }
}
