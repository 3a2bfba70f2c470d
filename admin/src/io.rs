//! Where a command's output goes and whether it should stop: the terminal for the `postbox`
//! binary, or a remote caller's stream when an application runs the command for
//! `postbox --admin`.
//!
//! Commands write through `say!`, `say_raw!` and `tell!` (standard output, standard
//! output without a newline, standard error) and read standard input through [`stdin`]. A
//! thread that runs a command first [`enter`]s its [`Scope`]: the [`Stop`] token it checks,
//! and for a remote caller the [`Console`] its streams go to; without a console a command uses
//! the process's own streams.

use std::cell::RefCell;
use std::io::{IsTerminal, Read, Write};
use std::sync::Arc;

use crate::Stop;
use crate::wire;

/// The streams of a command run for a remote caller.
pub(crate) struct Console {
    sink: std::sync::Mutex<Box<dyn Write + Send>>,
    stdin: std::sync::Mutex<Option<Vec<u8>>>,
    /// Set when the caller went away (its connection closed) or the endpoint stops: the
    /// command stops between two commits, as after Ctrl-C.
    stop: Stop,
}

impl Console {
    /// A console whose output goes to `sink` as frames ([`wire`]) and whose standard input is
    /// `stdin`.
    pub(crate) fn new(sink: Box<dyn Write + Send>, stdin: Vec<u8>) -> Arc<Console> {
        Arc::new(Console {
            sink: std::sync::Mutex::new(sink),
            stdin: std::sync::Mutex::new(Some(stdin)),
            stop: Stop::new(),
        })
    }

    /// Makes the command stop between two commits, as if its caller had gone (the endpoint
    /// stops).
    pub(crate) fn cancel(&self) {
        self.stop.stop();
    }

    /// The scope a command run for this console enters: its streams and its stop token.
    pub(crate) fn scope(self: &Arc<Console>) -> Scope {
        Scope {
            console: Some(self.clone()),
            stop: self.stop.clone(),
        }
    }

    /// Writes one frame; a caller gone makes the command stop.
    pub(crate) fn send(&self, tag: u8, bytes: &[u8]) {
        let mut sink = self
            .sink
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if wire::write_frame(&mut **sink, tag, bytes).is_err() {
            self.stop.stop();
        }
    }
}

/// What a thread running a command works in: the token it stops on, and the remote caller's
/// console, if any.
#[derive(Clone)]
pub(crate) struct Scope {
    console: Option<Arc<Console>>,
    stop: Stop,
}

impl Scope {
    /// A command run here, on the process's own streams, stopping on `stop`.
    pub(crate) fn local(stop: &Stop) -> Scope {
        Scope {
            console: None,
            stop: stop.clone(),
        }
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Scope>> = const { RefCell::new(None) };
}

/// Makes `scope` this thread's (None: no command runs here).
pub(crate) fn enter(scope: Option<Scope>) {
    CURRENT.with(|c| *c.borrow_mut() = scope);
}

/// Leaves this thread's scope when dropped, even by a panic.
pub(crate) struct Entered(());

/// Enters `scope` until the returned guard is dropped.
pub(crate) fn entered(scope: Scope) -> Entered {
    enter(Some(scope));
    Entered(())
}

impl Drop for Entered {
    fn drop(&mut self) {
        enter(None);
    }
}

/// This thread's scope, to hand to a thread a command starts.
pub(crate) fn current() -> Option<Scope> {
    CURRENT.with(|c| c.borrow().clone())
}

fn console() -> Option<Arc<Console>> {
    CURRENT.with(|c| c.borrow().as_ref().and_then(|s| s.console.clone()))
}

/// Whether this thread runs a command for a remote caller.
pub(crate) fn is_remote() -> bool {
    console().is_some()
}

/// Whether the command should stop between two commits: its stop token is set (Ctrl-C in the
/// `postbox` binary, a remote caller gone).
pub(crate) fn stopping() -> bool {
    CURRENT.with(|c| c.borrow().as_ref().is_some_and(|s| s.stop.is_stopped()))
}

/// Standard output (buffered: flush or drop it).
pub(crate) fn stdout() -> Box<dyn Write> {
    match console() {
        Some(c) => Box::new(Remote {
            console: c,
            err: false,
        }),
        None => Box::new(std::io::stdout().lock()),
    }
}

/// Standard error.
pub(crate) fn stderr() -> Box<dyn Write> {
    match console() {
        Some(c) => Box::new(Remote {
            console: c,
            err: true,
        }),
        None => Box::new(std::io::stderr().lock()),
    }
}

/// Standard input: the process's, or what the remote caller uploaded.
pub(crate) fn stdin() -> Box<dyn Read> {
    match console() {
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
pub(crate) fn stdout_is_terminal() -> bool {
    !is_remote() && std::io::stdout().is_terminal()
}

/// Whether standard error is a terminal (progress bars are drawn only there).
pub(crate) fn stderr_is_terminal() -> bool {
    !is_remote() && std::io::stderr().is_terminal()
}

/// Whether standard input is a terminal (then `send` says it waits for a body).
pub(crate) fn stdin_is_terminal() -> bool {
    !is_remote() && std::io::stdin().is_terminal()
}

/// Creates (or truncates) `path` for a file of messages, readable and writable by its owner
/// only — mode 0600 whatever the umask, like the store and its log. An existing regular file
/// is made 0600 before it is truncated; a FIFO or device (`/dev/stdout`) is written as it is.
/// On Windows no ACL is set: the file takes its directory's, like the store.
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
        if self.console.stop.is_stopped() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the admin caller went away",
            ));
        }
        let tag = if self.err { wire::ERR } else { wire::OUT };
        self.console.send(tag, buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `println!` to the command's standard output.
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
macro_rules! say_raw {
    ($($arg:tt)*) => {{
        let _ = ::std::io::Write::write_fmt(&mut $crate::io::stdout(), format_args!($($arg)*));
    }};
}

/// `eprintln!` to the command's standard error.
macro_rules! tell {
    ($($arg:tt)*) => {{
        let _ = ::std::io::Write::write_fmt(
            &mut $crate::io::stderr(),
            format_args!("{}\n", format_args!($($arg)*)),
        );
    }};
}
