//! The applier thread: commits logged batches' redb transactions while the leader syncs the
//! log, or syncs a logical record while the leader runs its batch. Apart because it is a
//! thread of its own with its own channels (std's and crossbeam's, even under `--cfg shuttle`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::guarded;
use crate::engine::wal::{AppendError, Appended, Wal};
use crate::error::{Error, Result};

/// How long either side of a hand-over polls before it sleeps. Waking a sleeping thread costs
/// tens of microseconds on a virtual machine — as much as the work handed over — while the
/// answer to a hand-over (and, in a busy stream, the next one) comes within a sync's time. An
/// idle store sleeps after this long: no wake-ups while nothing happens.
const LINGER: Duration = Duration::from_micros(250);

/// Receives from `rx`, polling for up to `linger` before blocking.
fn spin_recv<T>(
    rx: &crossbeam_channel::Receiver<T>,
    linger: Duration,
) -> std::result::Result<T, crossbeam_channel::RecvError> {
    if linger.is_zero() {
        return rx.recv();
    }
    let start = Instant::now();
    loop {
        match rx.try_recv() {
            Ok(v) => return Ok(v),
            Err(crossbeam_channel::TryRecvError::Disconnected) => {
                return Err(crossbeam_channel::RecvError);
            }
            Err(crossbeam_channel::TryRecvError::Empty) => std::hint::spin_loop(),
        }
        if start.elapsed() >= linger {
            return rx.recv();
        }
    }
}

/// What the applier thread does for the leader, which meanwhile does the other half.
#[allow(clippy::large_enum_variant)] // one task in flight at a time: boxing would allocate per batch
enum Task {
    /// Commit a batch's transaction without a sync (the leader syncs its record).
    Commit(redb::WriteTransaction),
    /// Sync the record the leader wrote (the leader runs the batch meanwhile).
    Sync(Arc<Wal>),
}

enum Done {
    Committed(Result<()>, u64),
    Synced(std::result::Result<Appended, AppendError>),
}

fn perform(task: Task) -> Done {
    match task {
        Task::Commit(txn) => {
            let t = Instant::now();
            let r = guarded::catch(|| txn.commit().map_err(Error::from))
                .map_err(crate::engine::panic_to_error)
                .and_then(|r| r);
            Done::Committed(r, t.elapsed().as_nanos() as u64)
        }
        Task::Sync(wal) => Done::Synced(wal.sync_written()),
    }
}

/// Commits logged batches' redb transactions (without a sync), or syncs logical records, on
/// a thread of its own, so that the leader can do the other half meanwhile.
///
/// It runs only with a write-ahead log, which the concurrency checks do not drive, so it keeps
/// std's threads and crossbeam's channels under `--cfg shuttle` too.
pub struct Applier {
    jobs: Option<crossbeam_channel::Sender<Task>>,
    done: crossbeam_channel::Receiver<Done>,
    /// Set when the thread could not be started: the task runs on the leader's thread.
    inline: Option<Task>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Applier {
    pub(super) fn start() -> Applier {
        let (jobs, rx) = crossbeam_channel::bounded::<Task>(1);
        let (tx, done) = crossbeam_channel::bounded(1);
        let thread = std::thread::Builder::new()
            .name("postbox-apply".into())
            .spawn(move || {
                // Only a lone caller's stream (logical records: one job a batch) is worth
                // polling for; with many callers the processors are busier elsewhere.
                let mut linger = Duration::ZERO;
                while let Ok(task) = spin_recv(&rx, linger) {
                    linger = match task {
                        Task::Sync(_) => LINGER,
                        Task::Commit(_) => Duration::ZERO,
                    };
                    if tx.send(perform(task)).is_err() {
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

    fn give(&mut self, task: Task) {
        match &self.jobs {
            Some(jobs) => {
                if let Err(e) = jobs.send(task) {
                    self.inline = Some(e.into_inner());
                }
            }
            None => self.inline = Some(task),
        }
    }

    fn outcome(&mut self, linger: Duration) -> Option<Done> {
        if let Some(task) = self.inline.take() {
            return Some(perform(task));
        }
        spin_recv(&self.done, linger).ok()
    }

    /// Hands over a transaction to commit without a sync; [`Applier::wait`] gives the outcome.
    pub(super) fn hand(&mut self, txn: redb::WriteTransaction) {
        self.give(Task::Commit(txn));
    }

    /// Hands over the sync of the record last written to `wal` ([`Wal::write`]);
    /// [`Applier::wait_sync`] gives the outcome.
    pub(super) fn hand_sync(&mut self, wal: Arc<Wal>) {
        self.give(Task::Sync(wal));
    }

    /// The outcome of the transaction last handed over, and the nanoseconds its commit took.
    pub(super) fn wait(&mut self) -> (Result<()>, u64) {
        match self.outcome(Duration::ZERO) {
            Some(Done::Committed(r, ns)) => (r, ns),
            _ => (Err(Error::Panic("the apply thread stopped".into())), 0),
        }
    }

    /// The outcome of the sync last handed over.
    pub(super) fn wait_sync(&mut self) -> std::result::Result<Appended, AppendError> {
        match self.outcome(LINGER) {
            Some(Done::Synced(r)) => r,
            _ => Err(AppendError::NotSynced(Error::OutcomeUnknown(
                "the thread syncing the write-ahead log stopped".into(),
            ))),
        }
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
