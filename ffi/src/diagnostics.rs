//! The calls that describe an outcome: a status code's text, this thread's last error message
//! and OS error, and the library's version. Apart from `status.rs`, whose constants the guard
//! itself needs, because these calls run inside the guard.

use std::ffi::{c_char, c_int};

use crate::guard::{guard, last_error_ptr, last_os_error};
use crate::status::*;

/// A static, human-readable description of a status code: `"ok"` for `POSTBOX_OK`, and
/// `"unknown status"` for a number that is not a postbox status.
///
/// Never returns NULL; the string is static (never free it). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_strerror(status: c_int) -> *const c_char {
    guard(|| {
        let text = match status {
            POSTBOX_OK => c"ok",
            POSTBOX_TIMEOUT => c"timed out (nothing to receive)",
            POSTBOX_LOCK_LOST => c"the lock on the message was lost",
            POSTBOX_QUEUE_FULL => c"the queue is full",
            POSTBOX_TOO_LARGE => c"the message is too large",
            POSTBOX_NOT_FOUND => c"not found",
            POSTBOX_INVALID_ARGUMENT => c"invalid argument",
            POSTBOX_CORRUPTED => c"the store is corrupted",
            POSTBOX_IO => c"i/o error",
            POSTBOX_CLOSED => c"the store is closed",
            POSTBOX_PANIC => c"internal error (caught panic)",
            POSTBOX_NOT_A_STORE => c"not a postbox store",
            POSTBOX_INCOMPATIBLE_VERSION => c"the store was written by a newer version",
            POSTBOX_ALREADY_OPEN => c"the store is already open (or busy)",
            POSTBOX_OUTCOME_UNKNOWN => c"the outcome of the operation is unknown",
            POSTBOX_CONFIG => c"invalid configuration",
            POSTBOX_STORAGE_FULL => c"the disk is full",
            POSTBOX_CODEC => c"cannot encode or decode the message body",
            POSTBOX_QUEUE_NOT_FOUND => c"the queue does not exist",
            POSTBOX_FORKED => c"the handle belongs to the parent process (inherited across fork)",
            POSTBOX_CONFLICT => c"a table row changed since the transaction read it",
            POSTBOX_IN_USE => c"the queue is in use (named by another queue, a collator or a job)",
            POSTBOX_UNSUPPORTED => c"this build of the library leaves that feature out",
            _ => c"unknown status",
        };
        Ok(text.as_ptr())
    })
}

/// The detailed message of the most recent failed postbox call on the calling thread (for
/// example `queue "orders" is full: max_messages = 100`), or `""` if no call has failed on this
/// thread yet.
///
/// Never returns NULL. The string belongs to postbox (never free it) and stays valid until the
/// next postbox call on this thread. Each thread has its own message, so a failed
/// `postbox_store_open`, which has no handle, can still be explained.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_last_error_message() -> *const c_char {
    guard(|| Ok(last_error_ptr()))
}

/// The operating system's error number (`errno`: `EACCES`, `EROFS`, `EIO`, …) behind the most
/// recent failed postbox call on the calling thread when that call returned `POSTBOX_IO`, or 0
/// (for any other status, or when no call has failed on this thread yet). Like SQLite's
/// `sqlite3_system_errno`: the status says what kind of failure, this says which. A full disk
/// is `POSTBOX_STORAGE_FULL`, whatever its number. Thread-safe; each thread has its own.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_last_os_error() -> c_int {
    guard(|| Ok(last_os_error()))
}

/// The library's version as a static string, e.g. `"0.1.0"`. Compare it with
/// `POSTBOX_VERSION_MAJOR` / `_MINOR` / `_PATCH` to check that the header and the library agree.
///
/// Never returns NULL; never free it. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_version() -> *const c_char {
    guard(|| {
        const VERSION: &std::ffi::CStr = match std::ffi::CStr::from_bytes_with_nul(
            concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes(),
        ) {
            Ok(v) => v,
            Err(_) => panic!("the package version contains a NUL"),
        };
        Ok(VERSION.as_ptr())
    })
}

/// The library's version as `MAJOR * 10000 + MINOR * 100 + PATCH`, to compare with
/// `POSTBOX_VERSION_NUMBER`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_version_number() -> u32 {
    guard(|| {
        let part = |s: &str| s.parse::<u32>().unwrap_or(0);
        Ok(part(env!("CARGO_PKG_VERSION_MAJOR")) * 10000
            + part(env!("CARGO_PKG_VERSION_MINOR")) * 100
            + part(env!("CARGO_PKG_VERSION_PATCH")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::status_of;
    use postbox::ErrorKind;

    #[test]
    fn version_constants_match_the_package() {
        assert_eq!(
            POSTBOX_VERSION_MAJOR.to_string(),
            env!("CARGO_PKG_VERSION_MAJOR")
        );
        assert_eq!(
            POSTBOX_VERSION_MINOR.to_string(),
            env!("CARGO_PKG_VERSION_MINOR")
        );
        assert_eq!(
            POSTBOX_VERSION_PATCH.to_string(),
            env!("CARGO_PKG_VERSION_PATCH")
        );
        assert_eq!(postbox_version_number(), POSTBOX_VERSION_NUMBER);
    }

    #[test]
    fn every_error_kind_has_its_own_status() {
        // Walks core's own list, so a kind added there without a C code fails here.
        let mut seen = std::collections::HashSet::new();
        for &kind in ErrorKind::ALL {
            let n = kind.code();
            assert_eq!(status_of(kind), n, "{kind:?}");
            assert!(seen.insert(n));
            // SAFETY: postbox_strerror returns a static NUL-terminated string.
            let text = unsafe { std::ffi::CStr::from_ptr(postbox_strerror(n)) };
            assert_ne!(text.to_str().unwrap(), "unknown status", "{kind:?}");
        }
        assert!(ErrorKind::ALL.len() >= 22);
    }
}
