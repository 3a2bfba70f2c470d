//! Waiting with the GIL released while Ctrl-C keeps working, without waking an idle process.
//!
//! Python runs signal handlers on the main thread only, so only a wait there needs to end for a
//! signal; a wait on any other thread is one uninterrupted wait in the store. On the main
//! thread (Unix) the wait is woken by the signal itself: for the wait's duration Python's
//! wake-up fd (`signal.set_wakeup_fd`) is one end of a socket pair whose other end a postbox
//! thread (`postbox-signals`) reads, so the byte Python's C-level handler writes there fires the
//! wait's [`Interrupt`]; the wait ends as if its time were up, `check_signals` runs the Python
//! handlers (raising `KeyboardInterrupt` for Ctrl-C), and the wait goes on when none raised. An
//! idle main-thread wait therefore sleeps until a message, its deadline or a signal.
//!
//! Where that cannot be done — another wake-up fd is installed (a running asyncio loop's, a GUI
//! toolkit's), or the platform has no Unix sockets — the main thread's wait is cut into slices
//! of [`SLICE`] with the signals checked between them: five wake-ups a second at most, and a
//! Ctrl-C takes effect within a slice.

use std::time::{Duration, Instant};

use postbox::binding::interruptible;
use pyo3::prelude::*;

use crate::errors::IntoPy;

/// The longest a main-thread wait goes without looking for signals when Python's wake-up fd is
/// not ours to use.
pub const SLICE: Duration = Duration::from_millis(200);

/// Waits until `attempt` yields something or `deadline` passes (`None`: forever), with the GIL
/// released, interruptible by Ctrl-C (see the module's notes). `attempt` gets the time left
/// (`Duration::MAX` for no limit); it may be called again after returning `None` early.
///
/// # Errors
///
/// The attempt's error, or the exception a signal handler raised (`KeyboardInterrupt`).
pub fn wait_interruptible<T: Send>(
    py: Python<'_>,
    deadline: Option<Instant>,
    mut attempt: impl FnMut(Duration) -> postbox::Result<Option<T>> + Send,
) -> PyResult<Option<T>> {
    let left = || {
        deadline.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(Instant::now())
        })
    };
    if !on_main_thread(py) {
        // No signal handler runs on this thread: nothing to wake up for.
        return py.detach(|| attempt(left())).py_err();
    }
    let installed = wakeup::install(py);
    let result = (|| loop {
        let got = match &installed {
            Some(w) => {
                let interrupt = w.arm();
                // A signal that came before the wait was armed is handled here; one that comes
                // later fires `interrupt`.
                py.check_signals()?;
                py.detach(|| interruptible(&interrupt, || attempt(left())))
            }
            None => py.detach(|| attempt(left().min(SLICE))),
        }
        .py_err()?;
        if got.is_some() {
            return Ok(got);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
        py.check_signals()?;
    })();
    if let Some(w) = installed {
        w.uninstall(py);
    }
    result
}

/// Whether this is the thread Python runs signal handlers on.
fn on_main_thread(py: Python<'_>) -> bool {
    let check = || -> PyResult<bool> {
        let threading = py.import("threading")?;
        let main = threading.call_method0("main_thread")?.getattr("ident")?;
        main.eq(threading.call_method0("get_ident")?)
    };
    // When in doubt, wait as the main thread does: interruptible.
    check().unwrap_or(true)
}

#[cfg(unix)]
mod wakeup {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;

    use postbox::binding::Interrupt;
    use postbox::sync::Mutex;
    use pyo3::prelude::*;
    use pyo3::types::PyDict;

    /// This process's socket pair and the interrupt of the main thread's wait in progress.
    struct WakeSocket {
        pid: u32,
        write: UnixStream,
        current: Mutex<Option<Interrupt>>,
    }

    /// Made by the first main-thread wait of a process (again in a forked child, where the
    /// parent's reading thread does not exist).
    static SOCKET: Mutex<Option<Arc<WakeSocket>>> = Mutex::new(None);

    fn socket() -> Option<Arc<WakeSocket>> {
        // Only main-thread waits take this lock, so it is free unless a fork happened while the
        // parent's main thread held it; such a child waits in slices.
        let mut slot = SOCKET.try_lock()?;
        let pid = postbox::binding::process_id();
        if let Some(s) = slot.as_ref().filter(|s| s.pid == pid) {
            return Some(s.clone());
        }
        let (mut read, write) = UnixStream::pair().ok()?;
        // Python refuses a blocking wake-up fd: a full buffer must not block a signal handler.
        write.set_nonblocking(true).ok()?;
        let s = Arc::new(WakeSocket {
            pid,
            write,
            current: Mutex::new(None),
        });
        let reader = s.clone();
        std::thread::Builder::new()
            .name("postbox-signals".into())
            .spawn(move || {
                let mut buf = [0u8; 64];
                // Each byte is a signal's number; which one does not matter here.
                while matches!(read.read(&mut buf), Ok(n) if n > 0) {
                    if let Some(i) = reader.current.lock().as_ref() {
                        i.fire();
                    }
                }
            })
            .ok()?;
        *slot = Some(s.clone());
        Some(s)
    }

    /// Python's wake-up fd pointed at our socket for the duration of a wait.
    pub struct Installed {
        socket: Arc<WakeSocket>,
        previous: i64,
    }

    fn set_wakeup_fd(py: Python<'_>, fd: i64) -> PyResult<i64> {
        let kw = PyDict::new(py);
        kw.set_item("warn_on_full_buffer", false)?;
        py.import("signal")?
            .call_method("set_wakeup_fd", (fd,), Some(&kw))?
            .extract()
    }

    /// Points Python's wake-up fd at this process's socket, unless another one is installed
    /// (which is then left as it was, except that its `warn_on_full_buffer` is reset to
    /// Python's default: Python offers no way to read the fd without setting one).
    pub fn install(py: Python<'_>) -> Option<Installed> {
        let socket = socket()?;
        let ours = i64::from(socket.write.as_raw_fd());
        let previous = set_wakeup_fd(py, ours).ok()?;
        if previous != -1 && previous != ours {
            let _ = py
                .import("signal")
                .and_then(|s| s.call_method1("set_wakeup_fd", (previous,)));
            return None;
        }
        Some(Installed { socket, previous })
    }

    impl Installed {
        /// A fresh interrupt for the next stretch of the wait, fired by the next signal.
        pub fn arm(&self) -> Interrupt {
            let i = Interrupt::new();
            *self.socket.current.lock() = Some(i.clone());
            i
        }

        pub fn uninstall(self, py: Python<'_>) {
            self.socket.current.lock().take();
            // `previous` is -1, or ours when this wait runs inside another (a signal handler's).
            let _ = set_wakeup_fd(py, self.previous);
        }
    }
}

#[cfg(not(unix))]
mod wakeup {
    use postbox::binding::Interrupt;
    use pyo3::prelude::*;

    /// Never made: without Unix sockets the main thread's waits run in slices.
    pub enum Installed {}

    pub fn install(_py: Python<'_>) -> Option<Installed> {
        None
    }

    impl Installed {
        pub fn arm(&self) -> Interrupt {
            match *self {}
        }

        pub fn uninstall(self, _py: Python<'_>) {
            match self {}
        }
    }
}
