//! Change notification of one file, for cross-process wake-ups (multi-process mode): another
//! process's commit writes the store file, and a watch on the file tells this process at once
//! (`engine::poll::FileLook` decides whom to wake).
//!
//! - Linux: an inotify instance watching the file for writes and for closes after writing (a
//!   process that dies closes it: its locks are free although nothing was written), and one
//!   thread that blocks reading it.
//! - Windows: a directory change notification (`ReadDirectoryChangesW`) on the file's
//!   directory, filtered by the file's name, and one thread that waits for it or for `stop`.
//!   A write is reported once it reaches the file's metadata; every commit of a shared store
//!   flushes the file, which gets it there.
//! - Elsewhere (Apple systems among them) there is no watch: waiters poll with backoff, slower
//!   to wake, equally correct.
//!
//! Where a watch cannot be made (Linux's `fs.inotify.max_user_instances` reached, a directory
//! that cannot be opened) there is none either, and waiters poll the file with backoff.

use std::path::Path;

/// What the watch reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(any(target_os = "linux", windows)), allow(dead_code))] // no watch there
pub enum Change {
    /// The file was written, or (Linux) closed by a process that had it open for writing.
    Written,
    /// The watch ended (the file was deleted or replaced, `stop`, or reading the notifications
    /// failed): nothing is reported any more, and waiters must poll.
    Ended,
}

/// A running watch; [`FileWatch::stop`] ends it. Dropping it without `stop` leaves the thread
/// to end when the process does.
pub struct FileWatch {
    inner: imp::Inner,
}

impl FileWatch {
    /// Watches `path` and calls `on_change` (on the watch thread) after changes to it, and once
    /// with [`Change::Ended`] when the watch ends. `None` when no watch can be made here.
    pub fn start(path: &Path, on_change: impl Fn(Change) + Send + 'static) -> Option<FileWatch> {
        imp::Inner::start(path, on_change).map(|inner| FileWatch { inner })
    }

    /// Ends the watch and waits for its thread, so `on_change` is never called afterwards.
    pub fn stop(self) {
        self.inner.stop();
    }

    /// Forgets the watch without ending it or running any destructor: in a `fork()` child,
    /// which has no watch thread to end (the parent's lives on in the parent).
    #[allow(clippy::forget_non_drop)] // where there is no watch, there is nothing to drop
    pub fn leak(self) {
        std::mem::forget(self);
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use std::path::Path;
    use std::thread::JoinHandle;

    use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};

    use super::Change;

    pub struct Inner {
        watches: Watches,
        wd: WatchDescriptor,
        thread: JoinHandle<()>,
    }

    impl Inner {
        pub fn start(path: &Path, on_change: impl Fn(Change) + Send + 'static) -> Option<Inner> {
            let mut inotify = Inotify::init().ok()?;
            let mut watches = inotify.watches();
            let wd = watches
                .add(path, WatchMask::MODIFY | WatchMask::CLOSE_WRITE)
                .ok()?;
            let thread = std::thread::Builder::new()
                .name("postbox-watch".into())
                .spawn(move || {
                    let mut buffer = [0u8; 4096];
                    'read: loop {
                        let Ok(events) = inotify.read_events_blocking(&mut buffer) else {
                            break;
                        };
                        let mut changed = false;
                        for e in events {
                            // Removing the watch (`stop`, or the file deleted) delivers IGNORED.
                            if e.mask.contains(EventMask::IGNORED) {
                                break 'read;
                            }
                            changed |= e.mask.intersects(
                                EventMask::MODIFY | EventMask::CLOSE_WRITE | EventMask::Q_OVERFLOW,
                            );
                        }
                        if changed {
                            on_change(Change::Written);
                        }
                    }
                    on_change(Change::Ended);
                })
                .ok()?;
            Some(Inner {
                watches,
                wd,
                thread,
            })
        }

        pub fn stop(mut self) {
            // The IGNORED event this removal delivers ends the thread's blocking read. If the
            // removal fails the watch is already gone (the file was deleted), which delivered
            // IGNORED too.
            let _ = self.watches.remove(self.wd);
            let _ = self.thread.join();
        }
    }
}

#[cfg(windows)]
mod imp {
    use std::ffi::OsString;
    use std::fs::File;
    use std::os::windows::ffi::OsStringExt;
    use std::os::windows::fs::OpenOptionsExt;
    use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle};
    use std::path::Path;
    use std::sync::Arc;
    use std::thread::JoinHandle;

    use windows_sys::Win32::Storage::FileSystem::{
        FILE_ACTION_REMOVED, FILE_ACTION_RENAMED_OLD_NAME, FILE_FLAG_BACKUP_SEMANTICS,
        FILE_FLAG_OVERLAPPED, FILE_LIST_DIRECTORY, FILE_NOTIFY_CHANGE_FILE_NAME,
        FILE_NOTIFY_CHANGE_LAST_WRITE, FILE_NOTIFY_CHANGE_SIZE, ReadDirectoryChangesW,
    };
    use windows_sys::Win32::System::IO::{CancelIoEx, GetOverlappedResult, OVERLAPPED};
    use windows_sys::Win32::System::Threading::{
        CreateEventW, INFINITE, SetEvent, WaitForMultipleObjects,
    };

    use super::Change;

    /// Bytes of notifications one read can hold (the most a network share passes on).
    const BUFFER: usize = 64 << 10;

    pub struct Inner {
        stop: Arc<OwnedHandle>,
        thread: JoinHandle<()>,
    }

    /// A new unnamed event, auto-reset or manual-reset.
    fn event(manual_reset: bool) -> Option<OwnedHandle> {
        // SAFETY: no attributes and no name; the handle returned is owned from here on.
        let raw = unsafe {
            CreateEventW(
                std::ptr::null(),
                i32::from(manual_reset),
                0,
                std::ptr::null(),
            )
        };
        if raw.is_null() {
            return None;
        }
        // SAFETY: a fresh event handle that nothing else owns or closes.
        Some(unsafe { OwnedHandle::from_raw_handle(raw) })
    }

    /// The directory, and the memory of its one pending read of changes. Boxed, so that the
    /// buffer and the `OVERLAPPED` the system writes to stay where they are while the reader
    /// moves to its thread.
    struct Reader {
        dir: File,
        done: OwnedHandle,
        overlapped: OVERLAPPED,
        // u32s: the notifications must be DWORD-aligned.
        buffer: Vec<u32>,
        pending: bool,
    }

    // SAFETY: the handles are usable from any thread, and the memory of the pending read is
    // owned by the reader itself: it travels with it and nothing else points into it.
    unsafe impl Send for Reader {}

    impl Reader {
        /// Asks for the next changes. The system gathers changes for the directory from the
        /// first such call on, so the watch makes it before `start` returns.
        fn begin(&mut self) -> bool {
            self.overlapped = OVERLAPPED {
                hEvent: self.done.as_raw_handle(),
                ..Default::default()
            };
            // SAFETY: `dir` is a directory opened with FILE_LIST_DIRECTORY and
            // FILE_FLAG_OVERLAPPED; `buffer` and `overlapped` are boxed with the reader and
            // stay untouched until the read completes or is cancelled and settled (`finish`,
            // `Drop`).
            let started = unsafe {
                ReadDirectoryChangesW(
                    self.dir.as_raw_handle(),
                    self.buffer.as_mut_ptr().cast(),
                    BUFFER as u32,
                    0,
                    FILE_NOTIFY_CHANGE_LAST_WRITE
                        | FILE_NOTIFY_CHANGE_SIZE
                        | FILE_NOTIFY_CHANGE_FILE_NAME,
                    std::ptr::null_mut(),
                    &mut self.overlapped,
                    None,
                )
            };
            self.pending = started != 0;
            self.pending
        }

        /// The bytes of changes the completed read returned (0: more than the buffer holds).
        fn finish(&mut self) -> Option<u32> {
            let mut got = 0u32;
            // SAFETY: the read completed (its event fired); this only collects its result.
            let ok = unsafe {
                GetOverlappedResult(self.dir.as_raw_handle(), &self.overlapped, &mut got, 0)
            };
            self.pending = false;
            (ok != 0).then_some(got)
        }
    }

    impl Drop for Reader {
        fn drop(&mut self) {
            if self.pending {
                let mut got = 0u32;
                // SAFETY: cancels the pending read and waits until it is settled, after which
                // the system no longer writes to `buffer` or `overlapped`.
                unsafe {
                    CancelIoEx(self.dir.as_raw_handle(), &self.overlapped);
                    GetOverlappedResult(self.dir.as_raw_handle(), &self.overlapped, &mut got, 1);
                }
            }
        }
    }

    impl Inner {
        pub fn start(path: &Path, on_change: impl Fn(Change) + Send + 'static) -> Option<Inner> {
            let name = path.file_name()?.to_string_lossy().to_lowercase();
            let dir = std::fs::OpenOptions::new()
                .access_mode(FILE_LIST_DIRECTORY)
                .custom_flags(FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OVERLAPPED)
                .share_mode(super::super::lock::SHARE_ALL)
                .open(super::super::fs::dir_of(path))
                .ok()?;
            let mut reader = Box::new(Reader {
                dir,
                done: event(false)?,
                overlapped: OVERLAPPED::default(),
                buffer: vec![0u32; BUFFER / 4],
                pending: false,
            });
            if !reader.begin() {
                return None;
            }
            let stop = Arc::new(event(true)?);
            let stopping = stop.clone();
            let thread = std::thread::Builder::new()
                .name("postbox-watch".into())
                .spawn(move || {
                    run(reader, &stopping, &name, &on_change);
                    on_change(Change::Ended);
                })
                .ok()?;
            Some(Inner { stop, thread })
        }

        pub fn stop(self) {
            // SAFETY: `stop` is a live event handle owned by `self.stop`.
            unsafe { SetEvent(self.stop.as_raw_handle()) };
            let _ = self.thread.join();
        }
    }

    /// The watch thread: waits for the pending read or for `stop`, reports, and reads again;
    /// ends at `stop`, on a failure, or when the file is removed.
    #[allow(clippy::boxed_local)] // the box keeps the pending read's memory where it is
    fn run(mut reader: Box<Reader>, stop: &OwnedHandle, name: &str, on_change: &impl Fn(Change)) {
        loop {
            let waited = [reader.done.as_raw_handle(), stop.as_raw_handle()];
            // SAFETY: two live event handles.
            let which = unsafe { WaitForMultipleObjects(2, waited.as_ptr(), 0, INFINITE) };
            if which != 0 {
                // `stop`, or the wait failed: dropping the reader cancels its read.
                return;
            }
            let Some(got) = reader.finish() else {
                return;
            };
            let seen = if got == 0 {
                // More changes than the buffer holds: they were dropped, so look.
                Seen::Changed
            } else {
                let bytes: Vec<u8> = reader
                    .buffer
                    .iter()
                    .take((got as usize).div_ceil(4))
                    .flat_map(|w| w.to_le_bytes())
                    .collect();
                scan(&bytes, name)
            };
            // Read again before reporting, so that no change made meanwhile is missed.
            let again = matches!(seen, Seen::Gone) || reader.begin();
            match seen {
                Seen::Nothing => {}
                Seen::Changed => on_change(Change::Written),
                Seen::Gone => return,
            }
            if !again {
                return;
            }
        }
    }

    enum Seen {
        Nothing,
        Changed,
        Gone,
    }

    /// What the notifications in `bytes` (`FILE_NOTIFY_INFORMATION` records) say about the
    /// file `name` (lower case: Windows names are compared without case).
    fn scan(bytes: &[u8], name: &str) -> Seen {
        let word = |at: usize| {
            bytes
                .get(at..at + 4)
                .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        let mut seen = Seen::Nothing;
        let mut at = 0usize;
        loop {
            let (next, action, len) = (word(at), word(at + 4), word(at + 8) as usize);
            let Some(raw) = bytes.get(at + 12..at + 12 + len) else {
                return seen;
            };
            let units: Vec<u16> = raw
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect();
            if OsString::from_wide(&units).to_string_lossy().to_lowercase() == name {
                if action == FILE_ACTION_REMOVED || action == FILE_ACTION_RENAMED_OLD_NAME {
                    return Seen::Gone;
                }
                seen = Seen::Changed;
            }
            if next == 0 {
                return seen;
            }
            at += next as usize;
        }
    }
}

#[cfg(not(any(target_os = "linux", windows)))]
mod imp {
    use std::path::Path;

    pub enum Inner {}

    impl Inner {
        pub fn start(
            _path: &Path,
            _on_change: impl Fn(super::Change) + Send + 'static,
        ) -> Option<Inner> {
            None
        }

        pub fn stop(self) {
            match self {}
        }
    }
}

#[cfg(all(test, any(target_os = "linux", windows)))]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Duration;

    /// A watch of `path` whose reports arrive on the returned channel.
    fn watched(path: &std::path::Path) -> (FileWatch, crossbeam_channel::Receiver<Change>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        let watch = FileWatch::start(path, move |c| {
            let _ = tx.send(c);
        })
        .expect("a watch can be made here");
        (watch, rx)
    }

    #[test]
    fn a_write_to_the_file_calls_back_and_stop_ends_the_thread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"start").unwrap();
        let (watch, rx) = watched(&path);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"more").unwrap();
        f.sync_data().unwrap();
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(30)),
            Ok(Change::Written),
            "the write was seen"
        );
        watch.stop();
        // The thread reports its end, and the callback (with the sender) is gone after it.
        let mut last = None;
        while let Ok(c) = rx.try_recv() {
            last = Some(c);
        }
        assert_eq!(last, Some(Change::Ended));
        assert!(matches!(
            rx.recv_timeout(Duration::from_secs(30)),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected)
        ));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_process_closing_the_file_after_writing_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"start").unwrap();
        let (watch, rx) = watched(&path);
        // Opened for writing and closed without a write: what a dying process does.
        drop(std::fs::OpenOptions::new().write(true).open(&path).unwrap());
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(30)),
            Ok(Change::Written)
        );
        watch.stop();
    }

    #[test]
    fn deleting_the_file_ends_the_watch() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let (watch, rx) = watched(&path);
        std::fs::remove_file(&path).unwrap();
        // With no handle left open, the file goes away and the watch ends; the thread says so
        // last.
        let mut last = None;
        loop {
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(c) => last = Some(c),
                Err(e) => {
                    assert_eq!(e, crossbeam_channel::RecvTimeoutError::Disconnected);
                    break;
                }
            }
        }
        assert_eq!(last, Some(Change::Ended));
        watch.stop();
    }
}
