//! # libpostbox — the C API of postbox
//!
//! This crate builds `libpostbox.so` and `libpostbox.a`; cbindgen turns the doc comments of its
//! exports into `include/postbox.h`, which is the C reference. Read the header's preamble for the
//! conventions (status codes, ownership, thread-safety); this page only explains the layout of
//! the Rust side.
//!
//! - `guard.rs`: the one guard every export runs inside (panics → `POSTBOX_PANIC`, NULL →
//!   `POSTBOX_INVALID_ARGUMENT`), the per-thread error message, and the checked conversions from
//!   raw C arguments. Nearly all `unsafe` lives there.
//! - `handle.rs`: the fork guard of every handle, written once (`Handle`, `live`).
//! - `status.rs`: status codes (the numbers of `postbox::ErrorKind`) and version numbers;
//!   `diagnostics.rs`: `postbox_strerror`, the last error message, `postbox_version`.
//! - `store.rs`, `queue.rs`, `message.rs`, `tx.rs`, `processor.rs`, `topic.rs`, `collator.rs`,
//!   `session.rs`: one file per handle; `compact.rs` holds `postbox_store_compact`.
//! - `admin.rs` and `bridge.rs`: the admin endpoint and the RabbitMQ bridge, run from C.

#![allow(non_camel_case_types)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod guard;

mod handle;

// One group per line so that rustfmt keeps this order, which is the order of the header.
mod status;

mod diagnostics;

mod store;

mod compact;

mod queue;

mod message;

mod tx;

mod processor;

mod topic;

mod collator;

mod session;

mod typed_body;

mod job;

mod tracking;

mod app_table;

mod admin;

mod bridge;

pub use admin::*;
pub use app_table::*;
pub use bridge::*;
pub use collator::*;
pub use compact::*;
pub use diagnostics::*;
pub use job::*;
pub use message::*;
pub use processor::*;
pub use queue::*;
pub use session::*;
pub use status::*;
pub use store::*;
pub use topic::*;
pub use tracking::*;
pub use tx::*;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A borrowed view of bytes owned by postbox (a body, a string property, a name).
///
/// `data` is NULL (and `len` 0) when the value is absent; an empty but present value has a
/// non-NULL `data` and `len` 0. Strings are UTF-8 and **not** NUL-terminated: print them with
/// `printf("%.*s", (int)v.len, (const char *)v.data)`. The view is valid until the handle it came
/// from is freed (the function that returned it says which); copy the bytes to keep them longer.
/// Never free `data`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct postbox_bytes {
    /// First byte, or NULL when the value is absent.
    pub data: *const u8,
    /// Number of bytes.
    pub len: usize,
}

impl postbox_bytes {
    pub(crate) const ABSENT: postbox_bytes = postbox_bytes {
        data: std::ptr::null(),
        len: 0,
    };

    pub(crate) fn of(bytes: &[u8]) -> postbox_bytes {
        postbox_bytes {
            data: bytes.as_ptr(),
            len: bytes.len(),
        }
    }

    pub(crate) fn of_opt(s: Option<&str>) -> postbox_bytes {
        s.map_or(postbox_bytes::ABSENT, |s| postbox_bytes::of(s.as_bytes()))
    }
}

impl guard::FfiReturn for postbox_bytes {
    fn on_failure(_: std::ffi::c_int) -> postbox_bytes {
        postbox_bytes::ABSENT
    }
}

/// Identifies the `postbox_store_open` call a handle descends from, so that a queue, message or
/// transaction of one store is never silently used with another store (their ids would refer to
/// different files), and the process that made that call (invariant 11: a handle inherited
/// across `fork()` refuses every call in the child).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoreTag {
    id: u64,
    pid: u32,
}

impl StoreTag {
    pub(crate) fn next() -> StoreTag {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        StoreTag {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            pid: postbox::binding::process_id(),
        }
    }

    /// Fails with `POSTBOX_FORKED` in a process other than the one that opened the store.
    ///
    /// Checked first thing, before the binding takes any lock of its own: another thread of the
    /// parent may have held one at the moment of the fork, and it would stay locked forever in
    /// the child. The engine makes the same check before touching its own state.
    pub(crate) fn check_process(self) -> guard::Outcome<()> {
        let current = postbox::binding::process_id();
        if current == self.pid {
            Ok(())
        } else {
            Err(postbox::Error::Forked {
                opened_by: self.pid,
                current,
            }
            .into())
        }
    }

    pub(crate) fn is_forked(self) -> bool {
        postbox::binding::process_id() != self.pid
    }
}

/// Milliseconds since the Unix epoch (0 for times before it).
pub(crate) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

pub(crate) fn from_unix_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH
        .checked_add(Duration::from_millis(ms))
        .unwrap_or(UNIX_EPOCH)
}

/// A C timeout: negative waits forever, 0 does not wait.
pub(crate) fn timeout(ms: i64) -> Duration {
    if ms < 0 {
        // Far enough that `Instant::checked_add` overflows, which postbox treats as "no deadline".
        Duration::MAX
    } else {
        Duration::from_millis(ms.unsigned_abs())
    }
}
