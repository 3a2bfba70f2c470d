//! Cross-process wake-ups (multi-process mode): another process's commit writes the store file,
//! and a watch on the file tells this process at once (`poll::FileLook` decides whom to wake).
//!
//! On Linux the watch is an inotify instance and one thread that blocks reading it. Anywhere
//! else, or when the kernel refuses another inotify instance (`fs.inotify.max_user_instances`),
//! there is no watch and waiters poll the file with backoff instead: slower to wake, equally
//! correct.

use std::path::Path;

/// What the watch reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The file was written, or closed by a process that had it open for writing (a process
    /// that dies closes it: its locks are free although nothing was written).
    Written,
    /// The watch ended (the file was deleted or replaced, or reading the notifications
    /// failed): nothing is reported any more, and waiters must poll.
    Ended,
}

/// A running watch; [`FileWatch::stop`] ends it. Dropping it without `stop` leaves the thread
/// to end when the process does.
pub struct FileWatch {
    #[cfg(target_os = "linux")]
    inner: linux::Inner,
}

impl FileWatch {
    /// Watches `path` and calls `on_change` (on the watch thread) after changes to it, and once
    /// with [`Change::Ended`] when the watch ends. `None` when no watch can be made here.
    pub fn start(path: &Path, on_change: impl Fn(Change) + Send + 'static) -> Option<FileWatch> {
        #[cfg(target_os = "linux")]
        {
            linux::Inner::start(path, on_change).map(|inner| FileWatch { inner })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (path, on_change);
            None
        }
    }

    /// Ends the watch and waits for its thread, so `on_change` is never called afterwards.
    pub fn stop(self) {
        #[cfg(target_os = "linux")]
        self.inner.stop();
    }
}

#[cfg(target_os = "linux")]
mod linux {
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Duration;

    #[test]
    fn a_write_to_the_file_calls_back_and_stop_ends_the_thread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"start").unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        let watch = FileWatch::start(&path, move |c| {
            let _ = tx.send(c);
        })
        .expect("inotify is available on Linux");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"more").unwrap();
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

    #[test]
    fn a_process_closing_the_file_after_writing_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"start").unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        let watch = FileWatch::start(&path, move |c| {
            let _ = tx.send(c);
        })
        .unwrap();
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
        let (tx, rx) = crossbeam_channel::unbounded();
        let watch = FileWatch::start(&path, move |c| {
            let _ = tx.send(c);
        })
        .unwrap();
        std::fs::remove_file(&path).unwrap();
        // With no handle left open, the inode goes away and the kernel removes the watch; the
        // thread says so last.
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
