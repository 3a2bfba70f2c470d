//! The crate's error type, shared by the Rust, C and Python APIs.

use std::fmt;

use crate::message_id::MessageId;

/// Defines [`ErrorKind`] and its [`ErrorKind::ALL`] list from one table, so that a kind added
/// to the enum cannot be missing from the list the bindings' coverage tests walk.
macro_rules! error_kinds {
    ($($(#[$doc:meta])* $name:ident = $code:literal,)*) => {
        /// A stable, C-like classification of [`Error`], one per failure a caller can react to.
        ///
        /// The C API maps each kind to a `POSTBOX_*` status code and Python to one exception class, so
        /// the numbering is part of the public contract: a kind is never renumbered or reused.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        #[repr(i32)]
        pub enum ErrorKind {
            $($(#[$doc])* $name = $code,)*
        }

        impl ErrorKind {
            /// Every kind, in code order: what the C status list and the Python exception
            /// classes must cover.
            pub const ALL: &'static [ErrorKind] = &[$(ErrorKind::$name,)*];

            /// The stable number of this kind: the C status code, the Python exception's `code`.
            pub fn code(self) -> i32 {
                self as i32
            }
        }
    };
}

error_kinds! {
    /// A receive found nothing before its deadline (only the C and Python APIs report this as an
    /// error; Rust returns `Ok(None)`).
    Timeout = 1,
    /// The message's lock expired, was released, or was taken over by another receiver.
    LockLost = 2,
    /// A quota (`max_messages` or `max_bytes`) would be exceeded.
    QueueFull = 3,
    /// The message body exceeds the queue's `max_message_size`.
    TooLarge = 4,
    /// The message does not exist (or, for a peek, the queue has nothing receivable). Queues
    /// that do not exist are [`ErrorKind::QueueNotFound`].
    NotFound = 5,
    /// An argument was rejected (bad queue name, priority out of range, …).
    InvalidArgument = 6,
    /// The file is damaged: its checksums or its postbox tables are inconsistent.
    Corrupted = 7,
    /// An operating-system I/O error (permissions, missing directory, …).
    Io = 8,
    /// The store was closed.
    Closed = 9,
    /// A panic was caught at an API boundary (a bug in postbox; the store stays usable).
    Panic = 10,
    /// The file exists but is not a postbox store.
    NotAStore = 11,
    /// The store was written by a newer, incompatible version of postbox.
    IncompatibleVersion = 12,
    /// Another process holds the store open in single-process mode, or
    /// [`Store::compact`](crate::Store::compact) could not have the store to itself.
    AlreadyOpen = 13,
    /// The commit failed after it may have reached the disk: the operation may or may not have
    /// taken effect. Retrying a send is safe with `message_key` and a `dedup_window`.
    OutcomeUnknown = 14,
    /// The options given are contradictory (e.g. multi-process with `Durability::None`).
    Config = 15,
    /// The disk or file system is full.
    StorageFull = 16,
    /// A typed body could not be encoded or decoded.
    Codec = 17,
    /// The named queue does not exist (or was deleted). Distinct from [`ErrorKind::NotFound`],
    /// which is about a message, so that "no such queue" never looks like "no message".
    QueueNotFound = 18,
    /// The handle was opened by another process: it was inherited across `fork()`. It writes
    /// nothing in this process; open the store again here.
    Forked = 19,
    /// A transaction's commit found an application table row that its `increment` or `put_if`
    /// read changed by another commit since: nothing was applied; run the transaction again.
    Conflict = 20,
    /// The queue cannot be deleted: another queue's `forward_to`, `forward_dead_letters_to` or
    /// `receipts_to`, a collator (its destination) or a job that is not done (its
    /// continuation) names it. Remove that use first.
    InUse = 21,
    /// This build of postbox leaves out what the call needs: the C library or the Python
    /// module was built without its `admin` or `bridge` feature. The message says how to
    /// build it in.
    Unsupported = 22,
}

/// The language a caller speaks: error messages that give advice name that language's way of
/// doing it (Rust's `multi_process(true)` is Python's `multi_process=True`). A program in Rust
/// gets Rust's spelling; the C and Python bindings set theirs when they load
/// ([`set_language`]). One table, so that a new piece of advice is spelt for every language.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// The `postbox` crate.
    Rust,
    /// `libpostbox` and `postbox.h`.
    C,
    /// The `postbox` Python package.
    Python,
}

impl Language {
    /// Every language, in the order advice lists them.
    pub const ALL: [Language; 3] = [Language::Rust, Language::C, Language::Python];

    /// The language's name.
    pub fn name(self) -> &'static str {
        match self {
            Language::Rust => "Rust",
            Language::C => "C",
            Language::Python => "Python",
        }
    }

    /// How a program opens a store that several processes share.
    pub fn multi_process(self) -> &'static str {
        match self {
            Language::Rust => "Store::builder().multi_process(true)",
            Language::C => "postbox_store_options.multi_process = 1",
            Language::Python => "postbox.Store(path, multi_process=True)",
        }
    }

    /// How a program uses one open store from several places (threads, modules).
    pub fn share_store(self) -> &'static str {
        match self {
            Language::Rust => "clone that Store (a clone is cheap)",
            Language::C => "use that postbox_store handle (it is thread-safe)",
            Language::Python => "use that postbox.Store object (it is thread-safe)",
        }
    }
}

static LANGUAGE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Makes this copy of the library's advice speak `language` (the bindings call it once, as they
/// load; each binding links its own copy of the engine).
#[doc(hidden)]
pub fn set_language(language: Language) {
    let n = match language {
        Language::Rust => 0,
        Language::C => 1,
        Language::Python => 2,
    };
    LANGUAGE.store(n, std::sync::atomic::Ordering::Relaxed);
}

/// The language this copy of the library speaks (see [`Language`]).
#[doc(hidden)]
pub fn language() -> Language {
    match LANGUAGE.load(std::sync::atomic::Ordering::Relaxed) {
        1 => Language::C,
        2 => Language::Python,
        _ => Language::Rust,
    }
}

/// Every error that postbox reports.
///
/// Match on [`Error::kind`] to react to a class of failure; the variants carry the details.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock on a received message was lost (expired, released, or taken by another
    /// receiver); the settle call changed nothing.
    #[error("the lock on message {0} was lost")]
    LockLost(MessageId),
    /// The lock on a session (a group of a session queue) was lost: it expired and another
    /// receiver accepted the session, or it was released. Kind [`ErrorKind::LockLost`].
    #[error("the lock on session {0:?} was lost")]
    SessionLockLost(String),
    /// Sending would exceed a quota of the queue.
    #[error("queue {queue:?} is full: {limit}")]
    QueueFull {
        /// The queue that is full.
        queue: String,
        /// Which quota is exhausted, e.g. `max_messages = 100`.
        limit: String,
    },
    /// The message (body and properties) is larger than the queue's `max_message_size`.
    #[error("message of {size} bytes exceeds the queue's max_message_size of {max} bytes")]
    MessageTooLarge {
        /// The message size: body plus properties (see [`Message::size`](crate::Message::size)).
        size: usize,
        /// The queue's limit.
        max: usize,
    },
    /// No queue of this name exists (or it was deleted).
    #[error("queue {0:?} does not exist")]
    QueueNotFound(String),
    /// No message of this id exists in the queue.
    #[error("message {0} does not exist")]
    MessageNotFound(MessageId),
    /// No job of this id exists (it was deleted, or never created here). Kind
    /// [`ErrorKind::NotFound`].
    #[error("job {0} does not exist")]
    JobNotFound(u64),
    /// An argument was rejected.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The store is damaged.
    #[error("the store is corrupted: {0}")]
    Corrupted(String),
    /// The file is not a postbox store.
    #[error("not a postbox store: {0}")]
    NotAStore(String),
    /// The store's format is newer than this version understands.
    #[error(
        "the store uses format version {found}; this version of postbox reads up to {supported}"
    )]
    IncompatibleVersion {
        /// Format version in the file.
        found: u32,
        /// Highest version this build reads.
        supported: u32,
    },
    /// The store is open in single-process mode elsewhere: in another process, or through
    /// another `Store` in this one; or [`Store::compact`](crate::Store::compact) found it busy.
    /// The text says which.
    #[error("{0}")]
    AlreadyOpen(String),
    /// The commit failed at a point where the change may already be durable.
    #[error(
        "the outcome of the operation is unknown: the commit failed ({0}); it may or may not have been applied"
    )]
    OutcomeUnknown(String),
    /// Contradictory or invalid store options.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The disk is full.
    #[error("the disk is full: {0}")]
    StorageFull(String),
    /// An I/O error from the operating system.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// The store has been closed.
    #[error("the store is closed")]
    Closed,
    /// The queue is in use, so it cannot be deleted: `by` names what uses it (another queue's
    /// forwarding or receipts option, a collator, a job's continuation). Kind
    /// [`ErrorKind::InUse`].
    #[error("queue {queue:?} is in use: it is {by}; remove that use before deleting it")]
    QueueInUse {
        /// The queue that was to be deleted.
        queue: String,
        /// What uses it, e.g. `the forward_to of queue "orders"`.
        by: String,
    },
    /// A typed body failed to encode or decode.
    #[error("cannot decode message body: {0}")]
    Codec(String),
    /// A panic inside postbox was caught; the operation did not complete.
    #[error("internal error (caught panic): {0}")]
    Panic(String),
    /// A transaction's commit found that an application table row its
    /// [`TxTable::increment`](crate::TxTable::increment) or
    /// [`TxTable::put_if`](crate::TxTable::put_if) read holds another value now (another commit
    /// wrote it in between): nothing of the transaction was applied. Run the transaction again.
    #[error(
        "row {} of table {table:?} changed since the transaction read it: nothing was committed; run the transaction again",
        key.escape_ascii()
    )]
    Conflict {
        /// The table.
        table: String,
        /// The row's key.
        key: Vec<u8>,
    },
    /// The call needs a part that this build leaves out: a binding built without one of its
    /// optional features (README § Features and defaults). Nothing was done.
    #[error("{what} is not in this build (feature `{feature}`): {how}")]
    NotBuilt {
        /// What the call needs, e.g. "the admin endpoint".
        what: String,
        /// The cargo feature that builds it in, e.g. `admin`.
        feature: String,
        /// How to get a build with it, e.g. the build command.
        how: String,
    },
    /// The handle was inherited across `fork()`: a store handle belongs to the process that
    /// opened it (the parent's in-memory state would otherwise overwrite the child's writes).
    /// Nothing was written; the child opens the store itself.
    #[error(
        "this handle was opened by process {opened_by}; open the store again in this process (pid {current})"
    )]
    Forked {
        /// The process that opened the store.
        opened_by: u32,
        /// The process that tried to use the handle.
        current: u32,
    },
}

impl Error {
    /// The stable classification of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::LockLost(_) | Error::SessionLockLost(_) => ErrorKind::LockLost,
            Error::QueueFull { .. } => ErrorKind::QueueFull,
            Error::MessageTooLarge { .. } => ErrorKind::TooLarge,
            Error::QueueNotFound(_) => ErrorKind::QueueNotFound,
            Error::MessageNotFound(_) | Error::JobNotFound(_) => ErrorKind::NotFound,
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::Corrupted(_) => ErrorKind::Corrupted,
            Error::NotAStore(_) => ErrorKind::NotAStore,
            Error::IncompatibleVersion { .. } => ErrorKind::IncompatibleVersion,
            Error::AlreadyOpen(_) => ErrorKind::AlreadyOpen,
            Error::OutcomeUnknown(_) => ErrorKind::OutcomeUnknown,
            Error::Config(_) => ErrorKind::Config,
            Error::StorageFull(_) => ErrorKind::StorageFull,
            Error::Io(_) => ErrorKind::Io,
            Error::Closed => ErrorKind::Closed,
            Error::Codec(_) => ErrorKind::Codec,
            Error::Panic(_) => ErrorKind::Panic,
            Error::Forked { .. } => ErrorKind::Forked,
            Error::Conflict { .. } => ErrorKind::Conflict,
            Error::QueueInUse { .. } => ErrorKind::InUse,
            Error::NotBuilt { .. } => ErrorKind::Unsupported,
        }
    }

    /// True for [`Error::LockLost`] and [`Error::SessionLockLost`].
    pub fn is_lock_lost(&self) -> bool {
        matches!(self, Error::LockLost(_) | Error::SessionLockLost(_))
    }

    /// True for failures of the file itself (I/O, disk full), after which the store opens its
    /// file again before the next operation.
    pub(crate) fn is_io_failure(&self) -> bool {
        matches!(self, Error::Io(_) | Error::StorageFull(_))
    }

    /// The operating system's error number (`errno`: `EACCES`, `EROFS`, `EIO`, …) behind an
    /// [`Error::Io`], also when postbox added which file it was working on; `None` for every
    /// other error and for I/O errors that did not come from the system.
    pub fn os_error(&self) -> Option<i32> {
        let Error::Io(e) = self else {
            return None;
        };
        e.raw_os_error().or_else(|| {
            e.get_ref()
                .and_then(|inner| inner.downcast_ref::<AtPath>())
                .and_then(|at| at.source.raw_os_error())
        })
    }

    /// True for [`Error::Conflict`]: the transaction may succeed when run again.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. })
    }

    /// True when the failed operation may nevertheless have been applied.
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, Error::OutcomeUnknown(_))
    }

    pub(crate) fn invalid(msg: impl fmt::Display) -> Error {
        Error::InvalidArgument(msg.to_string())
    }

    pub(crate) fn corrupted(msg: impl fmt::Display) -> Error {
        Error::Corrupted(msg.to_string())
    }

    /// Rebuilds an error for a second caller (errors are not `Clone` because `io::Error` isn't).
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::LockLost(id) => Error::LockLost(*id),
            Error::SessionLockLost(g) => Error::SessionLockLost(g.clone()),
            Error::QueueFull { queue, limit } => Error::QueueFull {
                queue: queue.clone(),
                limit: limit.clone(),
            },
            Error::MessageTooLarge { size, max } => Error::MessageTooLarge {
                size: *size,
                max: *max,
            },
            Error::QueueNotFound(q) => Error::QueueNotFound(q.clone()),
            Error::MessageNotFound(id) => Error::MessageNotFound(*id),
            Error::JobNotFound(id) => Error::JobNotFound(*id),
            Error::InvalidArgument(m) => Error::InvalidArgument(m.clone()),
            Error::Corrupted(m) => Error::Corrupted(m.clone()),
            Error::NotAStore(m) => Error::NotAStore(m.clone()),
            Error::IncompatibleVersion { found, supported } => Error::IncompatibleVersion {
                found: *found,
                supported: *supported,
            },
            Error::AlreadyOpen(m) => Error::AlreadyOpen(m.clone()),
            Error::OutcomeUnknown(m) => Error::OutcomeUnknown(m.clone()),
            Error::Config(m) => Error::Config(m.clone()),
            Error::StorageFull(m) => Error::StorageFull(m.clone()),
            Error::Io(e) => Error::Io(std::io::Error::new(e.kind(), e.to_string())),
            Error::Closed => Error::Closed,
            Error::Codec(m) => Error::Codec(m.clone()),
            Error::Panic(m) => Error::Panic(m.clone()),
            Error::Forked { opened_by, current } => Error::Forked {
                opened_by: *opened_by,
                current: *current,
            },
            Error::Conflict { table, key } => Error::Conflict {
                table: table.clone(),
                key: key.clone(),
            },
            Error::QueueInUse { queue, by } => Error::QueueInUse {
                queue: queue.clone(),
                by: by.clone(),
            },
            Error::NotBuilt { what, feature, how } => Error::NotBuilt {
                what: what.clone(),
                feature: feature.clone(),
                how: how.clone(),
            },
        }
    }
}

/// `Result` with postbox's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn is_disk_full(e: &std::io::Error) -> bool {
    // 28 is ENOSPC on Linux and macOS.
    e.kind() == std::io::ErrorKind::StorageFull || e.raw_os_error() == Some(28)
}

/// An I/O error with what postbox was doing and on which file: "permission denied" alone does
/// not tell a user whether the store, its directory or its log refused. The system's error
/// stays inside ([`Error::os_error`]).
#[derive(Debug)]
struct AtPath {
    doing: String,
    path: std::path::PathBuf,
    source: std::io::Error,
}

impl fmt::Display for AtPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.doing, self.path.display(), self.source)
    }
}

impl std::error::Error for AtPath {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// [`io_to_error`], saying what postbox was doing (`"opening the store"`) on `path`.
pub(crate) fn io_at(e: std::io::Error, doing: impl Into<String>, path: &std::path::Path) -> Error {
    let at = AtPath {
        doing: doing.into(),
        path: path.to_owned(),
        source: e,
    };
    if is_disk_full(&at.source) {
        Error::StorageFull(at.to_string())
    } else {
        Error::Io(std::io::Error::new(at.source.kind(), at))
    }
}

impl Error {
    /// Adds what postbox was doing and on which file to an [`Error::Io`] that does not say yet.
    pub(crate) fn at_path(self, doing: &str, path: &std::path::Path) -> Error {
        match self {
            Error::Io(e) if e.get_ref().is_none_or(|i| !i.is::<AtPath>()) => io_at(e, doing, path),
            other => other,
        }
    }
}

pub(crate) fn io_to_error(e: std::io::Error) -> Error {
    if is_disk_full(&e) {
        Error::StorageFull(e.to_string())
    } else {
        Error::Io(e)
    }
}

impl From<redb::StorageError> for Error {
    fn from(e: redb::StorageError) -> Self {
        match e {
            redb::StorageError::Corrupted(m) => Error::Corrupted(m),
            // redb reads only what its own pages point to: a read past the end of the file means
            // a damaged pointer or a truncated file.
            redb::StorageError::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
                Error::Corrupted(format!("a page points past the end of the file ({io})"))
            }
            redb::StorageError::Io(io) => io_to_error(io),
            other => {
                let text = other.to_string();
                if text.contains("corrupt") || text.contains("checksum") {
                    Error::Corrupted(text)
                } else {
                    Error::Io(std::io::Error::other(text))
                }
            }
        }
    }
}

impl From<redb::TableError> for Error {
    fn from(e: redb::TableError) -> Self {
        match e {
            redb::TableError::Storage(s) => s.into(),
            redb::TableError::TableTypeMismatch { .. }
            | redb::TableError::TableIsMultimap(_)
            | redb::TableError::TableIsNotMultimap(_) => Error::NotAStore(e.to_string()),
            other => Error::corrupted(other),
        }
    }
}

impl From<redb::TransactionError> for Error {
    fn from(e: redb::TransactionError) -> Self {
        match e {
            redb::TransactionError::Storage(s) => s.into(),
            other => Error::Io(std::io::Error::other(other.to_string())),
        }
    }
}

impl From<redb::CommitError> for Error {
    fn from(e: redb::CommitError) -> Self {
        match e {
            redb::CommitError::Storage(redb::StorageError::Io(io)) if is_disk_full(&io) => {
                Error::StorageFull(io.to_string())
            }
            // redb found damaged pages while preparing the commit, before it wrote the new root:
            // nothing was applied, and the store is damaged.
            redb::CommitError::Storage(redb::StorageError::Corrupted(m)) => Error::Corrupted(m),
            // A read past the end of the file: redb reads while it prepares the commit (the
            // pages it frees, the allocator's state), never after it wrote the new root, so
            // this too is damage found before anything was applied.
            redb::CommitError::Storage(s @ redb::StorageError::Io(_)) if matches!(&s, redb::StorageError::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof) => {
                Error::from(s)
            }
            other => Error::OutcomeUnknown(other.to_string()),
        }
    }
}

impl From<redb::DatabaseError> for Error {
    fn from(e: redb::DatabaseError) -> Self {
        match e {
            redb::DatabaseError::DatabaseAlreadyOpen => Error::AlreadyOpen(format!(
                "the store is already open in another process: to share it, open it in every \
                 process with {}",
                language().multi_process()
            )),
            redb::DatabaseError::Storage(s) => match Error::from(s) {
                Error::Io(io) if io.kind() == std::io::ErrorKind::InvalidData => {
                    Error::NotAStore(io.to_string())
                }
                // redb hit the end of the file while reading what its header describes: the
                // store is truncated or its header is damaged.
                Error::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
                    Error::Corrupted(format!(
                        "the file is truncated or its header damaged ({io})"
                    ))
                }
                other => other,
            },
            other => {
                let text = other.to_string();
                if text.contains("upgrade") || text.contains("version") {
                    Error::NotAStore(text)
                } else {
                    Error::corrupted(text)
                }
            }
        }
    }
}
