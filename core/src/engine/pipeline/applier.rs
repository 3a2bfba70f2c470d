//! The applier thread: commits logged batches' redb transactions while the leader syncs the
//! log. Apart because it is a thread of its own with its own channels (std's and crossbeam's,
//! even under `--cfg shuttle`).

use std::time::Instant;

use crate::engine::guarded;
use crate::error::{Error, Result};

/// Commits logged batches' redb transactions (without a sync) on a thread of its own, so that
/// the leader can sync the log meanwhile.
///
/// It runs only with a write-ahead log, which the concurrency checks do not drive, so it keeps
/// std's threads and crossbeam's channels under `--cfg shuttle` too.
pub struct Applier {
    jobs: Option<crossbeam_channel::Sender<redb::WriteTransaction>>,
    done: crossbeam_channel::Receiver<(Result<()>, u64)>,
    /// Set when the thread could not be started: commits run on the leader's thread.
    inline: Option<redb::WriteTransaction>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Applier {
    pub(super) fn start() -> Applier {
        let (jobs, rx) = crossbeam_channel::bounded::<redb::WriteTransaction>(1);
        let (tx, done) = crossbeam_channel::bounded(1);
        let thread = std::thread::Builder::new()
            .name("postbox-apply".into())
            .spawn(move || {
                for txn in rx {
                    let t = Instant::now();
                    let r = guarded::catch(|| txn.commit().map_err(Error::from))
                        .map_err(crate::engine::panic_to_error)
                        .and_then(|r| r);
                    if tx.send((r, t.elapsed().as_nanos() as u64)).is_err() {
                        return;
                    }
                }
            })
            .ok();
        Applier {
            jobs: thread.as_ref().map(|_| jobs),
            done,
            inline: None,
            thread,
        }
    }

    pub(super) fn hand(&mut self, txn: redb::WriteTransaction) {
        match &self.jobs {
            Some(jobs) => {
                if let Err(e) = jobs.send(txn) {
                    self.inline = Some(e.into_inner());
                }
            }
            None => self.inline = Some(txn),
        }
    }

    /// The outcome of the transaction last handed over, and the nanoseconds its commit took.
    pub(super) fn wait(&mut self) -> (Result<()>, u64) {
        if let Some(txn) = self.inline.take() {
            let t = Instant::now();
            let r = txn.commit().map_err(Error::from);
            return (r, t.elapsed().as_nanos() as u64);
        }
        self.done
            .recv()
            .unwrap_or_else(|_| (Err(Error::Panic("the apply thread stopped".into())), 0))
    }
}

impl Drop for Applier {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
