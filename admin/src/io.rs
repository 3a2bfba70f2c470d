//! Where a command's output goes and whether it should stop: the terminal for the `postbox`
//! binary, or a remote caller's stream when an application runs the command for
//! `postbox --admin` (see `admin::remote`).
//!
//! Commands write through `say!`, `say_raw!` and `tell!` (standard output, standard
//! output without a newline, standard error) and read standard input through [`stdin`]. A
//! thread that runs a command for a remote caller first [`enter`]s its [`Console`]; every
//! other thread uses the process's own streams.

use std::cell::RefCell;
use std::io::{IsTerminal, Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::STOP;

/// The streams of a command run for a remote caller.
pub struct Console {
    sink: std::sync::Mutex<Box<dyn Write + Send>>,
    stdin: std::sync::Mutex<Option<Vec<u8>>>,
    /// Set when the caller went away (its connection closed): the command stops between two
    /// commits, as after Ctrl-C.
    stop: AtomicBool,
}

impl Console {
    /// A console whose output goes to `sink` as frames (`admin::wire`) and whose standard
    /// input is `stdin`.
    pub fn new(sink: Box<dyn Write + Send>, stdin: Vec<u8>) -> Arc<Console> {
        Arc::new(Console {
            sink: std::sync::Mutex::new(sink),
            stdin: std::sync::Mutex::new(Some(stdin)),
            stop: AtomicBool::new(false),
        })
    }

    /// Makes the command stop between two commits, as if its caller had gone (the endpoint
    /// stops).
    pub fn cancel(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Writes one frame; a caller gone makes the command stop.
    pub fn send(&self, tag: u8, bytes: &[u8]) {
        let mut sink = self
            .sink
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if crate::admin::wire_write(&mut **sink, tag, bytes).is_err() {
            self.stop.store(true, Ordering::SeqCst);
        }
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Console>>> = const { RefCell::new(None) };
}

/// Makes `console` this thread's streams (None: the process's own).
pub fn enter(console: Option<Arc<Console>>) {
    CURRENT.with(|c| *c.borrow_mut() = console);
}

/// This thread's console, to hand to a thread a command starts.
pub fn current() -> Option<Arc<Console>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Whether this thread runs a command for a remote caller.
pub fn is_remote() -> bool {
    CURRENT.with(|c| c.borrow().is_some())
}

/// Whether the command should stop between two commits: Ctrl-C, or a remote caller gone.
pub fn stopping() -> bool {
    STOP.load(Ordering::SeqCst)
        || CURRENT.with(|c| {
            c.borrow()
                .as_ref()
                .is_some_and(|c| c.stop.load(Ordering::SeqCst))
        })
}

/// Standard output (buffered: flush or drop it).
pub fn stdout() -> Box<dyn Write> {
    match current() {
        Some(c) => Box::new(Remote {
            console: c,
            err: false,
        }),
        None => Box::new(std::io::stdout().lock()),
    }
}

/// Standard error.
pub fn stderr() -> Box<dyn Write> {
    match current() {
        Some(c) => Box::new(Remote {
            console: c,
            err: true,
        }),
        None => Box::new(std::io::stderr().lock()),
    }
}

/// Standard input: the process's, or what the remote caller uploaded.
pub fn stdin() -> Box<dyn Read> {
    match current() {
        Some(c) => {
            let bytes = c
                .stdin
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take()
                .unwrap_or_default();
            Box::new(std::io::Cursor::new(bytes))
        }
        None => Box::new(std::io::stdin().lock()),
    }
}

/// Whether standard output is a terminal a person watches (never for a remote caller: its
/// own terminal is on the other end).
pub fn stdout_is_terminal() -> bool {
    !is_remote() && std::io::stdout().is_terminal()
}

/// Whether standard error is a terminal (progress bars are drawn only there).
pub fn stderr_is_terminal() -> bool {
    !is_remote() && std::io::stderr().is_terminal()
}

/// Whether standard input is a terminal (then `send` says it waits for a body).
pub fn stdin_is_terminal() -> bool {
    !is_remote() && std::io::stdin().is_terminal()
}

/// Creates (or truncates) `path` for a file of messages, readable and writable by its owner
/// only — mode 0600 whatever the umask, like the store and its log. An existing regular file
/// is made 0600 before it is truncated; a FIFO or device (`/dev/stdout`) is written as it is.
///
/// # Errors
///
/// The file system's: no permission, no such directory, a file that cannot be made 0600
/// (another user's).
pub fn create_private(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let file = opts.open(path)?;
    if file.metadata()?.is_file() {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        file.set_len(0)?;
    }
    Ok(file)
}

struct Remote {
    console: Arc<Console>,
    err: bool,
}

impl Write for Remote {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.console.stop.load(Ordering::SeqCst) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the admin caller went away",
            ));
        }
        let tag = if self.err {
            crate::admin::STDERR_FRAME
        } else {
            crate::admin::STDOUT_FRAME
        };
        self.console.send(tag, buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `println!` to the command's standard output.
#[macro_export]
macro_rules! say {
    () => {{
        let _ = ::std::io::Write::write_all(&mut $crate::io::stdout(), b"\n");
    }};
    ($($arg:tt)*) => {{
        let _ = ::std::io::Write::write_fmt(
            &mut $crate::io::stdout(),
            format_args!("{}\n", format_args!($($arg)*)),
        );
    }};
}

/// `print!` to the command's standard output.
#[macro_export]
macro_rules! say_raw {
    ($($arg:tt)*) => {{
        let _ = ::std::io::Write::write_fmt(&mut $crate::io::stdout(), format_args!($($arg)*));
    }};
}

/// `eprintln!` to the command's standard error.
#[macro_export]
macro_rules! tell {
    ($($arg:tt)*) => {{
        let _ = ::std::io::Write::write_fmt(
            &mut $crate::io::stderr(),
            format_args!("{}\n", format_args!($($arg)*)),
        );
    }};
}
