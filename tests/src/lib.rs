//! Shared helpers for the cross-process tests: spawning the `pbx-child` helper, reading what it
//! reports line by line, killing it with SIGKILL (`TerminateProcess` on Windows), and the size
//! knobs of the stress runs.
//!
//! Synchronization with children is by their stdout only: a child prints a line (and flushes)
//! after the action it reports has returned, and the parent blocks on that line. Timeouts here
//! are failure guards (so a broken engine fails the test instead of hanging CI), never a way to
//! wait for something to happen.

pub mod history;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a parent waits for one expected line before failing the test. Generous: CI machines
/// are slow and shared. Never used to order events.
pub const LINE_GUARD: Duration = Duration::from_secs(120);

/// Starts `exe args…` with all three streams piped.
///
/// Under Wine, `CreateProcess` now and then fails with ERROR_INTERNAL_ERROR (1359) while other
/// tests start and terminate processes at the same moment; a real Windows does not do this.
/// Such a failure is retried a few times, each after a pause that doubles; any other error, or
/// a fifth 1359, is returned.
fn spawn_piped(exe: &str, args: &[&str]) -> std::io::Result<Child> {
    const WINE_INTERNAL_ERROR: i32 = 1359;
    let mut pause = Duration::from_millis(20);
    let mut attempt = 1;
    loop {
        let started = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        match started {
            Err(e)
                if cfg!(windows)
                    && e.raw_os_error() == Some(WINE_INTERNAL_ERROR)
                    && attempt < 5 =>
            {
                std::thread::sleep(pause);
                pause *= 2;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// A running helper process and the lines it printed.
pub struct Proc {
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    /// Every line read so far, for failure messages.
    pub log: Vec<String>,
}

impl Proc {
    /// Spawns `exe args…` with piped stdin/stdout/stderr.
    pub fn spawn(exe: &str, name: &str, args: &[&str]) -> Proc {
        let mut child =
            spawn_piped(exe, args).unwrap_or_else(|e| panic!("cannot spawn {exe}: {e}"));
        let stdout = child.stdout.take().expect("stdout");
        let mut stderr_pipe = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => {
                        if tx.send(l).is_err() {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = String::new();
            let _ = stderr_pipe.read_to_string(&mut buf);
            sink.lock().unwrap().push_str(&buf);
        });
        Proc {
            name: name.to_owned(),
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
            log: Vec::new(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn fail(&mut self, what: &str) -> ! {
        // Give the stderr reader a moment to collect a panic message if the child died.
        let _ = self.child.try_wait();
        let err = self.stderr.lock().unwrap().clone();
        panic!(
            "{}: {what}\n--- stdout so far ---\n{}\n--- stderr ---\n{err}",
            self.name,
            self.log.join("\n")
        );
    }

    /// The next line, or `None` once the child closed stdout. Fails the test after
    /// [`LINE_GUARD`].
    pub fn next_line(&mut self) -> Option<String> {
        match self.lines.recv_timeout(LINE_GUARD) {
            Ok(l) => {
                self.log.push(l.clone());
                Some(l)
            }
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => self.fail("no output within the guard time"),
        }
    }

    /// Hands the stream of lines over to the caller (e.g. to merge several children's output);
    /// this handle then reads no more lines.
    pub fn take_lines(&mut self) -> Receiver<String> {
        let (_, empty) = mpsc::channel();
        std::mem::replace(&mut self.lines, empty)
    }

    /// A line if one is waiting, without blocking (`None` also when stdout is closed).
    pub fn try_line(&mut self) -> Option<String> {
        let l = self.lines.try_recv().ok()?;
        self.log.push(l.clone());
        Some(l)
    }

    /// Reads lines until one whose first word is `tag`; returns that line's other words. Lines
    /// before it are handed to `other`.
    pub fn expect_with(&mut self, tag: &str, mut other: impl FnMut(&[&str])) -> Vec<String> {
        loop {
            let Some(line) = self.next_line() else {
                let status = self.child.wait().ok();
                self.fail(&format!("exited ({status:?}) before printing {tag}"));
            };
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.first() == Some(&tag) {
                return words[1..].iter().map(|s| (*s).to_owned()).collect();
            }
            other(&words);
        }
    }

    /// Reads lines until one whose first word is `tag`; fails on any `ERR` line before it.
    pub fn expect(&mut self, tag: &str) -> Vec<String> {
        let mut errors = Vec::new();
        let got = self.expect_with(tag, |w| {
            if w.first() == Some(&"ERR") {
                errors.push(w.join(" "));
            }
        });
        if !errors.is_empty() {
            self.fail(&format!("reported errors: {errors:?}"));
        }
        got
    }

    /// Closes the child's stdin (its signal to finish).
    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    /// Kills the child the hard way (SIGKILL on Unix, `TerminateProcess` on Windows: no code
    /// of the child runs any more), reaps it, and returns every line it printed before dying
    /// that was not read yet.
    pub fn kill9(&mut self) -> Vec<String> {
        kill_hard(&mut self.child).expect("kill");
        let status = self.child.wait().expect("wait");
        assert!(
            !status.success(),
            "{} was not killed: {status:?}",
            self.name
        );
        self.rest()
    }

    /// As [`Proc::kill9`], but fails the test (with the child's stderr) if the child had
    /// already exited on its own: a crash loop must not mistake a worker's failure for its
    /// kill.
    pub fn kill9_alive(&mut self) -> Vec<String> {
        let _ = kill_hard(&mut self.child);
        let status = self.child.wait().expect("wait");
        if !killed_hard(&status) {
            self.fail(&format!("exited on its own: {status:?}"));
        }
        self.rest()
    }

    /// Sends `signal` (e.g. SIGSTOP, SIGCONT); after SIGSTOP, returns once the child is
    /// stopped. Unix only: Windows has no stop signal.
    #[cfg(unix)]
    pub fn signal(&mut self, signal: i32) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: plain syscalls on our own, unreaped child.
        unsafe {
            assert_eq!(libc::kill(pid, signal), 0, "kill({pid}, {signal})");
            if signal == libc::SIGSTOP {
                let mut status = 0;
                assert_eq!(libc::waitpid(pid, &mut status, libc::WUNTRACED), pid);
                assert!(libc::WIFSTOPPED(status), "{}: not stopped", self.name);
            }
        }
    }

    /// Like [`Proc::next_line`], but a child that exits fails the test with its stderr.
    pub fn line(&mut self) -> String {
        match self.next_line() {
            Some(l) => l,
            None => {
                let status = self.child.wait().ok();
                self.fail(&format!("exited ({status:?})"))
            }
        }
    }

    /// Every line not read yet, until the child closes stdout.
    pub fn rest(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(l) = self.next_line() {
            out.push(l);
        }
        out
    }

    /// Closes stdin, reads the remaining lines, and waits for a successful exit.
    pub fn finish(mut self) -> Vec<String> {
        self.close_stdin();
        let rest = self.rest();
        let status = self.wait();
        if !status.success() {
            self.fail(&format!("exited with {status:?}"));
        }
        rest
    }

    pub fn wait(&mut self) -> ExitStatus {
        self.child.wait().expect("wait")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // A failing test must not leave children behind.
        if let Ok(None) = self.child.try_wait() {
            let _ = kill_hard(&mut self.child);
            let _ = self.child.wait();
        }
    }
}

pub use postbox_testkit::{Rng, env_u64, stress};

/// The exit code a process killed by [`kill_hard`] has on Windows (128 + SIGKILL, as a Unix
/// shell reports a SIGKILL): no helper exits with it on its own.
#[cfg(windows)]
pub const KILLED_EXIT_CODE: u32 = 137;

/// Ends `child` at once, wherever it is: SIGKILL on Unix (`Child::kill`); on Windows
/// `TerminateProcess` with `KILLED_EXIT_CODE` (Windows only), so that [`killed_hard`] can tell the kill
/// from an exit of the child's own.
pub fn kill_hard(child: &mut Child) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        child.kill()
    }
    #[cfg(windows)]
    {
        use std::os::windows::io::AsRawHandle;
        // SAFETY: the handle is the child's own, open until `child` is dropped.
        let ok = unsafe {
            windows_sys::Win32::System::Threading::TerminateProcess(
                child.as_raw_handle(),
                KILLED_EXIT_CODE,
            )
        };
        if ok == 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Whether a child ended by [`kill_hard`] (not by exiting on its own).
pub fn killed_hard(status: &ExitStatus) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        status.signal() == Some(libc::SIGKILL)
    }
    #[cfg(windows)]
    {
        status.code() == Some(KILLED_EXIT_CODE as i32)
    }
}

/// Parses a decimal word printed by a child.
pub fn num(word: &str) -> u64 {
    word.parse()
        .unwrap_or_else(|_| panic!("not a number: {word:?}"))
}

/// A deadline guard for loops that retry until the engine shows the expected state.
pub struct Guard {
    until: Instant,
    what: String,
}

impl Guard {
    pub fn new(limit: Duration, what: impl Into<String>) -> Guard {
        Guard {
            until: Instant::now() + limit,
            what: what.into(),
        }
    }

    /// Fails the test once the limit passed.
    pub fn check(&self) {
        assert!(
            Instant::now() < self.until,
            "gave up waiting for: {}",
            self.what
        );
    }

    /// What is left of the limit (for a receive timeout).
    pub fn left(&self) -> Duration {
        self.until.saturating_duration_since(Instant::now())
    }
}

/// The path as a `&str` for a child's argument list.
pub fn arg(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// Message `i` of a test that checks every property survives the write-ahead log: label,
/// content type, correlation id, reply-to, group, sequence, priority, a delay (so it stays
/// scheduled), a TTL and an application property, all derived from `i`.
pub fn rich_message(i: u64) -> postbox::Message {
    postbox::Message::new(format!("rich-{i}").into_bytes())
        .label(format!("label-{i}"))
        .content_type("text/plain")
        .correlation_id(format!("corr-{i}"))
        .reply_to("answers")
        .group(format!("group-{}", i % 3))
        .sequence(i)
        .priority((i % 8) as u8)
        .delay(Duration::from_secs(3600 + i))
        .ttl(Duration::from_secs(7200 + i))
        .property("n", format!("value-{i}"))
}
