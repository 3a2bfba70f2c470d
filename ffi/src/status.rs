//! Status codes and the header's version numbers: plain constants, below everything else in
//! the library (the calls that describe them are `diagnostics.rs`).

use std::ffi::c_int;

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
