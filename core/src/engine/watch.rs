//! Cross-process wake-ups (multi-process mode): another process's commit writes the store file,
//! and a watch on the file wakes this process's waiters at once, instead of at their next poll.
//!
//! On Linux the watch is an inotify instance and one thread that blocks reading it. Anywhere
//! else, or when the kernel refuses another inotify instance (`fs.inotify.max_user_instances`),
//! there is no watch and waiters keep polling with backoff: slower to wake, equally correct.
//! Polling also stays on beside the watch, since a write that lands while nobody is reading
//! coalesces with the one before it, and a dead process's locks show up in no write at all.

use std::path::Path;

/// A running watch; [`FileWatch::stop`] ends it. Dropping it without `stop` leaves the thread
/// to end when the process does.
pub struct FileWatch {
    #[cfg(target_os = "linux")]
    inner: linux::Inner,
}

impl FileWatch {
    /// Watches `path` and calls `on_change` (on the watch thread) after writes to it. `None`
    /// when no watch can be made here.
    pub fn start(path: &Path, on_change: impl Fn() + Send + 'static) -> Option<FileWatch> {
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

    pub struct Inner {
        watches: Watches,
        wd: WatchDescriptor,
        thread: JoinHandle<()>,
    }

    impl Inner {
        pub fn start(path: &Path, on_change: impl Fn() + Send + 'static) -> Option<Inner> {
            let mut inotify = Inotify::init().ok()?;
            let mut watches = inotify.watches();
            let wd = watches.add(path, WatchMask::MODIFY).ok()?;
            let thread = std::thread::Builder::new()
                .name("postbox-watch".into())
                .spawn(move || {
                    let mut buffer = [0u8; 4096];
                    loop {
                        let Ok(events) = inotify.read_events_blocking(&mut buffer) else {
                            return;
                        };
                        let mut changed = false;
                        for e in events {
                            // Removing the watch (`stop`, or the file deleted) delivers IGNORED.
                            if e.mask.contains(EventMask::IGNORED) {
                                return;
                            }
                            changed |= e.mask.contains(EventMask::MODIFY)
                                || e.mask.contains(EventMask::Q_OVERFLOW);
                        }
                        if changed {
                            on_change();
                        }
                    }
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
        let watch = FileWatch::start(&path, move || {
            let _ = tx.send(());
        })
        .expect("inotify is available on Linux");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"more").unwrap();
        rx.recv_timeout(Duration::from_secs(30))
            .expect("the write was seen");
        watch.stop();
        // The callback (and with it the sender) is gone once the thread has ended.
        while rx.try_recv().is_ok() {}
        assert!(matches!(
            rx.recv_timeout(Duration::from_secs(30)),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected)
        ));
    }

    #[test]
    fn deleting_the_file_ends_the_watch() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let (tx, rx) = crossbeam_channel::unbounded::<()>();
        let watch = FileWatch::start(&path, move || {
            let _ = tx.send(());
        })
        .unwrap();
        std::fs::remove_file(&path).unwrap();
        // With no handle left open, the inode goes away and the kernel removes the watch.
        loop {
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(()) => continue,
                Err(e) => {
                    assert_eq!(e, crossbeam_channel::RecvTimeoutError::Disconnected);
                    break;
                }
            }
        }
        watch.stop();
    }
}
