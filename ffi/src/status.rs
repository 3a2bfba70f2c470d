//! Status codes, their descriptions, the per-thread error message, and the version.

use std::ffi::{c_char, c_int};

use crate::guard::{guard, last_error_ptr, last_os_error};

/// Success.
pub const POSTBOX_OK: c_int = 0;
/// A receive found nothing before its timeout: a normal outcome, not a failure (like LMDB's
/// `MDB_NOTFOUND`).
pub const POSTBOX_TIMEOUT: c_int = 1;
/// The message's lock expired, was released, or was taken over by another receiver; the settle
/// call changed nothing.
pub const POSTBOX_LOCK_LOST: c_int = 2;
/// A quota of the queue (`max_messages` or `max_bytes`) would be exceeded.
pub const POSTBOX_QUEUE_FULL: c_int = 3;
/// The message (body, text properties and user properties together) exceeds the queue's
/// `max_message_size`.
pub const POSTBOX_TOO_LARGE: c_int = 4;
/// The message does not exist; also a peek of an empty queue, the end of a browse, and an absent
/// optional property. A queue that does not exist is `POSTBOX_QUEUE_NOT_FOUND`, never this.
pub const POSTBOX_NOT_FOUND: c_int = 5;
/// An argument was rejected: a NULL pointer, a bad length, invalid UTF-8, a priority above 7,
/// a wrong `struct_size`, settling a message this handle does not hold, …
pub const POSTBOX_INVALID_ARGUMENT: c_int = 6;
/// The file is damaged.
pub const POSTBOX_CORRUPTED: c_int = 7;
/// An operating-system I/O error (permissions, missing directory, …).
pub const POSTBOX_IO: c_int = 8;
/// The store was closed.
pub const POSTBOX_CLOSED: c_int = 9;
/// A panic was caught at the API boundary (a bug in postbox; the store stays usable).
pub const POSTBOX_PANIC: c_int = 10;
/// The file exists but is not a postbox store.
pub const POSTBOX_NOT_A_STORE: c_int = 11;
/// The store was written by a newer, incompatible version of postbox.
pub const POSTBOX_INCOMPATIBLE_VERSION: c_int = 12;
/// The store is already open in single-process mode: by another process, by another
/// `postbox_store_open` of this process (share the first handle instead), or — in a `fork()`
/// child — by the parent (open the store with `multi_process` set in both). The detailed
/// message says which. Also returned by `postbox_store_compact` when it could not have the
/// store alone.
pub const POSTBOX_ALREADY_OPEN: c_int = 13;
/// The commit failed after it may have reached the disk: the operation may or may not have taken
/// effect (retrying a send is safe with a `message_key` and a `dedup_window`).
pub const POSTBOX_OUTCOME_UNKNOWN: c_int = 14;
/// The options are contradictory (e.g. multi-process with `POSTBOX_DURABILITY_NONE`).
pub const POSTBOX_CONFIG: c_int = 15;
/// The disk or file system is full.
pub const POSTBOX_STORAGE_FULL: c_int = 16;
/// A typed body could not be encoded or decoded.
pub const POSTBOX_CODEC: c_int = 17;
/// The queue does not exist: it was deleted after the handle was opened. Distinct from
/// `POSTBOX_NOT_FOUND`, so that "no such queue" never reads as "no message".
pub const POSTBOX_QUEUE_NOT_FOUND: c_int = 18;
/// The handle was inherited across `fork()`: it belongs to the process that opened the store.
/// Nothing was read or written; the child opens the store itself (see "Processes and fork()").
pub const POSTBOX_FORKED: c_int = 19;
/// A transaction's commit found an application table row that its `postbox_table_increment` or
/// `postbox_table_put_if` read changed by another commit since: nothing was applied (the
/// received messages are back in their queues); run the transaction again.
pub const POSTBOX_CONFLICT: c_int = 20;
/// The queue cannot be deleted because something names it: another queue's `forward_to`,
/// `forward_dead_letters_to` or `receipts_to`, a collator (its destination), or a job that is
/// not done (its continuation). The detailed message says which; remove that use first.
pub const POSTBOX_IN_USE: c_int = 21;
/// This libpostbox was built without the optional part the call needs (the admin endpoint, the
/// RabbitMQ bridge): `postbox_last_error_message` names the cargo feature and the build command
/// that adds it (README, "Features and defaults"). Nothing was done.
pub const POSTBOX_UNSUPPORTED: c_int = 22;

/// Major version of the header. `postbox_version()` returns the library's own version; the C
/// test suite asserts that the two agree.
pub const POSTBOX_VERSION_MAJOR: u32 = 0;
/// Minor version of the header.
pub const POSTBOX_VERSION_MINOR: u32 = 1;
/// Patch version of the header.
pub const POSTBOX_VERSION_PATCH: u32 = 0;
/// `MAJOR * 10000 + MINOR * 100 + PATCH`, for `#if` comparisons.
pub const POSTBOX_VERSION_NUMBER: u32 = 100;

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
