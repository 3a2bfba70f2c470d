//! The applier thread: commits logged batches' redb transactions while the leader syncs the
//! log, and runs the batches acknowledged before redb applies them (`behind.rs`). Apart
//! because it is a thread of its own with its own channels (std's and crossbeam's, even under
//! `--cfg shuttle`).

use std::time::Instant;

use crate::engine::guarded;
use crate::error::{Error, Result};

/// Work for the applier thread, done in the order it was handed over.
pub(super) enum Work {
    /// Commit this transaction and report the outcome to [`Applier::wait`].
    Commit(Box<redb::WriteTransaction>),
    /// Run this batch, which reports its own outcome (see `behind.rs`).
    Run(Box<dyn FnOnce() + Send>),
}

/// Commits logged batches' redb transactions (without a sync) on a thread of its own, so that
/// the leader can sync the log meanwhile.
///
/// It runs only with a write-ahead log, which the concurrency checks do not drive, so it keeps
/// std's threads and crossbeam's channels under `--cfg shuttle` too.
pub struct Applier {
    jobs: Option<crossbeam_channel::Sender<Work>>,
    done: crossbeam_channel::Receiver<(Result<()>, u64)>,
    /// Set when the thread could not be started: commits run on the leader's thread.
    inline: Option<redb::WriteTransaction>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Applier {
    pub(super) fn start() -> Applier {
        let (jobs, rx) = crossbeam_channel::bounded::<Work>(1);
        let (tx, done) = crossbeam_channel::bounded(1);
        let thread = std::thread::Builder::new()
            .name("postbox-apply".into())
            .spawn(move || {
                for work in rx {
                    let txn = match work {
                        Work::Commit(txn) => *txn,
                        Work::Run(run) => {
                            // The batch answers for itself, also when it panics.
                            let _ = guarded::catch(run);
                            continue;
                        }
                    };
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

    /// Whether the thread runs: batches can be run behind their acknowledgement only then.
    pub(super) fn threaded(&self) -> bool {
        self.jobs.is_some()
    }

    pub(super) fn hand(&mut self, txn: redb::WriteTransaction) {
        match &self.jobs {
            Some(jobs) => {
                if let Err(e) = jobs.send(Work::Commit(Box::new(txn)))
                    && let Work::Commit(txn) = e.into_inner()
                {
                    self.inline = Some(*txn);
                }
            }
            None => self.inline = Some(txn),
        }
    }

    /// Hands a batch to run to the thread. `Err` gives it back when the thread is gone.
    pub(super) fn hand_run(
        &mut self,
        run: Box<dyn FnOnce() + Send>,
    ) -> std::result::Result<(), Box<dyn FnOnce() + Send>> {
        let Some(jobs) = &self.jobs else {
            return Err(run);
        };
        jobs.send(Work::Run(run)).map_err(|e| match e.into_inner() {
            Work::Run(run) => run,
            Work::Commit(_) => Box::new(|| {}),
        })
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
