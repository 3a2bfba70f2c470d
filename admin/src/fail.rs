//! Exit codes and the one error type every command returns.

use std::fmt;

use postbox::ErrorKind;

/// The command did what it was asked.
pub const OK: i32 = 0;
/// The command line was wrong, or the store refused an argument as invalid.
pub const USAGE: i32 = 1;
/// No such store, queue or message, or nothing to receive or peek.
pub const NOT_FOUND: i32 = 2;
/// Another process holds the store open in single-process mode.
pub const BUSY: i32 = 3;
/// The store failed: I/O, damage, not a store, a newer format, a full disk.
pub const STORE: i32 = 4;
/// The queue refused the message: quota, size, or a lost lock.
pub const REFUSED: i32 = 5;
/// Stopped by Ctrl-C; everything committed before it is kept.
pub const INTERRUPTED: i32 = 130;

/// The exit codes as `postbox --help` shows them.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0    success
  1    usage: bad arguments, or a value the store refused as invalid
  2    not found: no such store, queue or message; nothing to peek or receive
  3    store busy: another process holds the store open in single-process mode
  4    store error: I/O, damaged file, not a store, newer format, disk full
  5    refused: queue full, message too large, lock lost
  130  interrupted by Ctrl-C (work committed before it is kept)";

/// Why a command failed, and the exit code that says so.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub message: String,
}

impl Failure {
    /// A failure with exit code `code`.
    pub fn new(code: i32, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// Exit code [`USAGE`].
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::new(USAGE, message)
    }

    /// Exit code [`NOT_FOUND`].
    pub fn not_found(message: impl Into<String>) -> Failure {
        Failure::new(NOT_FOUND, message)
    }

    /// Exit code [`STORE`].
    pub fn store(message: impl Into<String>) -> Failure {
        Failure::new(STORE, message)
    }

    /// Exit code [`INTERRUPTED`], saying how far the command got (`done`).
    pub fn interrupted(done: impl fmt::Display) -> Failure {
        Failure::new(
            INTERRUPTED,
            format!("interrupted by Ctrl-C after {done}; everything before that is committed"),
        )
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The exit code for a postbox error.
pub fn code_of(kind: ErrorKind) -> i32 {
    match kind {
        ErrorKind::InvalidArgument | ErrorKind::Config | ErrorKind::Codec => USAGE,
        ErrorKind::NotFound | ErrorKind::QueueNotFound | ErrorKind::Timeout => NOT_FOUND,
        ErrorKind::AlreadyOpen => BUSY,
        ErrorKind::QueueFull | ErrorKind::TooLarge | ErrorKind::LockLost | ErrorKind::InUse => {
            REFUSED
        }
        _ => STORE,
    }
}

impl From<postbox::Error> for Failure {
    fn from(e: postbox::Error) -> Failure {
        Failure::new(code_of(e.kind()), e.to_string())
    }
}

impl From<postbox::SettleError> for Failure {
    fn from(e: postbox::SettleError) -> Failure {
        Failure::from(e.into_error())
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        // The reader of our output went away (`postbox browse … | head`): nothing left to do,
        // and nothing wrong with the store.
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return Failure::new(OK, String::new());
        }
        Failure::store(format!("i/o error: {e}"))
    }
}

/// What every command returns.
pub type Outcome<T = ()> = Result<T, Failure>;
