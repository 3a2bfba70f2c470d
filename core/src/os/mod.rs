//! What differs between operating systems, one small module per concern, each with a `cfg`
//! per platform inside it and nowhere else: the rest of the crate calls these functions and
//! never `std::os::*`, `libc` or `windows-sys` directly (`docs/design.md` § Platforms).
//!
//! - [`io`]: positional reads and writes of a file.
//! - [`direct`]: writes that are durable when they return, bypassing the page cache (the
//!   write-ahead log's records, where the platform has them).
//! - [`fs`]: creating files for the owner only, publishing a new file under its final name
//!   without replacing anything, making a directory's entries durable.
//! - [`lock`]: how files are shared between processes, and whether this process has a file
//!   open.
//! - [`process`]: process identity (the fork guard's pid) and liveness, safe against pid reuse.
//! - [`watch`]: change notification of a file, for cross-process wake-ups.
//! - [`space`]: free space on a file system.
//!
//! Durability is the standard library's `sync_all` / `sync_data` everywhere (`fdatasync` on
//! Linux, `F_FULLFSYNC` on Apple systems, `FlushFileBuffers` on Windows): no path in the crate
//! calls `fsync` itself.
//!
//! The only `unsafe` code of the crate lives here, each block with its reason.

pub mod direct;
pub mod fs;
pub mod io;
pub mod lock;
pub mod process;
pub mod space;
pub mod watch;

/// A path as Windows' wide-character calls take it: UTF-16, NUL-terminated.
#[cfg(windows)]
fn wide(path: &std::path::Path) -> Vec<u16> {
    use std::os::windows::ffi::OsStrExt;
    path.as_os_str().encode_wide().chain([0]).collect()
}
