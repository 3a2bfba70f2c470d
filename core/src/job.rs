//! Jobs: work split into pieces, with a shared counter and a tracking table kept exact in the
//! same commit as each piece's settle.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::clock::to_system_time;
use crate::engine::queries as read;
use crate::engine::{Engine, JobRecord, QueueRef};
use crate::error::{Error, Result};
use crate::message::{Message, MessageId};
use crate::queue::Queue;

/// A job: a piece of work split into messages (its pieces), created with
/// [`Store::create_job`](crate::Store::create_job). Cheap to clone, `Send + Sync`.
///
/// Each piece's completion or dead-lettering updates the job's counts and the piece's row in
/// the same commit as the settle, so concurrent workers in any number of threads and processes
/// never lose an update. Once the job is [sealed](Job::seal) (no more pieces) and every piece
/// has ended, it is done: [`Job::wait`] returns, and its continuation message, if it has one,
/// is sent in that same commit, exactly once.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
/// use postbox::{JobOptions, Message};
/// use std::time::Duration;
/// let tiles = store.queue("tiles")?;
/// let stitch = store.queue("stitch")?;
/// let job = store.create_job(JobOptions::default().continuation(&stitch, Message::new("image 7")))?;
/// for tile in 0..4 {
///     job.send(&tiles, Message::new(format!("tile {tile}")))?;
/// }
/// job.seal()?;
/// while let Some(piece) = tiles.try_receive()? {
///     piece.complete()?;
/// }
/// assert!(job.wait(Duration::from_secs(5))?.is_some_and(|p| p.done));
/// assert_eq!(stitch.len()?, 1); // "stitch the tiles", sent once
/// # Ok::<(), postbox::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Job {
    pub(crate) engine: Arc<Engine>,
    pub(crate) id: u64,
}

/// Options of a new job.
#[derive(Debug, Clone, Default)]
pub struct JobOptions {
    pub(crate) continuation: Option<(Queue, Message)>,
}

impl JobOptions {
    /// Sends `message` to `queue` when the job is done, in the commit that ends its last piece
    /// (or seals it, if every piece had ended by then): exactly once.
    pub fn continuation(mut self, queue: &Queue, message: impl Into<Message>) -> Self {
        self.continuation = Some((queue.clone(), message.into()));
        self
    }
}

/// A job's counts, read from one snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct JobProgress {
    /// Pieces sent.
    pub total: u64,
    /// Pieces completed.
    pub completed: u64,
    /// Pieces dead-lettered (or removed unsettled by a purge or a queue's deletion).
    pub dead_lettered: u64,
    /// Pieces not yet ended: `total - completed - dead_lettered`.
    pub pending: u64,
    /// No more pieces can be added.
    pub sealed: bool,
    /// Sealed, and every piece has ended.
    pub done: bool,
}

/// One job of a [`Store::jobs`](crate::Store::jobs) listing.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JobInfo {
    /// The job's id ([`Job::id`]; [`Store::job`](crate::Store::job) opens it).
    pub id: u64,
    /// Its counts, as [`Job::progress`] would read them from the same snapshot.
    pub progress: JobProgress,
}

/// Every job in the store of `engine`, in id order, from one read snapshot.
pub(crate) fn list(engine: &Engine) -> Result<Vec<JobInfo>> {
    let jobs = engine.read(read::jobs)?;
    Ok(jobs
        .iter()
        .map(|(id, r)| JobInfo {
            id: *id,
            progress: progress(r),
        })
        .collect())
}

/// How a piece of a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PieceState {
    /// Not yet completed or dead-lettered.
    Pending,
    /// Completed at this time.
    Completed(SystemTime),
    /// Dead-lettered (or removed unsettled) at this time.
    DeadLettered(SystemTime),
}

fn progress(r: &JobRecord) -> JobProgress {
    JobProgress {
        total: r.total,
        completed: r.completed,
        dead_lettered: r.dead_lettered,
        pending: r.pending(),
        sealed: r.sealed,
        done: r.is_done(),
    }
}

impl Job {
    /// Creates a job in the store of `engine`.
    pub(crate) fn create(engine: &Arc<Engine>, options: JobOptions) -> Result<Job> {
        let continuation = match options.continuation {
            Some((q, m)) => {
                if !Arc::ptr_eq(&q.engine, engine) {
                    return Err(Error::invalid(
                        "the continuation queue belongs to another store",
                    ));
                }
                m.validate()?;
                Some((q.id, q.name.to_string(), m))
            }
            None => None,
        };
        let id = engine.call(move |b| b.create_job(continuation))?;
        Ok(Job {
            engine: engine.clone(),
            id,
        })
    }

    /// The job's id: [`Store::job`](crate::Store::job) opens it again, in any process.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Sends `message` to `queue` as a piece of this job; returns its id.
    ///
    /// # Errors
    ///
    /// As [`Queue::send`]; [`Error::JobNotFound`] for a deleted job and
    /// [`Error::InvalidArgument`] for a sealed one. A duplicate (its `message_key` seen inside
    /// the queue's dedup window) is not a new piece.
    pub fn send(&self, queue: &Queue, message: impl Into<Message>) -> Result<MessageId> {
        self.check_queue(queue)?;
        let m = self.piece(message.into())?;
        let (q, name) = (queue.id, queue.name.to_string());
        let sent = self
            .engine
            .call(move |b| b.send_one(QueueRef::new(q, &name), m))?;
        Ok(sent.id)
    }

    /// Sends several pieces atomically (all or none, one commit); returns their ids.
    ///
    /// # Errors
    ///
    /// As [`Job::send`].
    pub fn send_batch<I>(&self, queue: &Queue, messages: I) -> Result<Vec<MessageId>>
    where
        I: IntoIterator,
        I::Item: Into<Message>,
    {
        self.check_queue(queue)?;
        let msgs = messages
            .into_iter()
            .map(|m| self.piece(m.into()))
            .collect::<Result<Vec<_>>>()?;
        let (q, name) = (queue.id, queue.name.to_string());
        self.engine
            .call(move |b| b.send(QueueRef::new(q, &name), msgs))
    }

    /// `m`, checked and marked as a piece of this job.
    fn piece(&self, mut m: Message) -> Result<Message> {
        m.validate()?;
        m.tags.job = Some(self.id);
        Ok(m)
    }

    pub(crate) fn check_queue(&self, queue: &Queue) -> Result<()> {
        if Arc::ptr_eq(&self.engine, &queue.engine) {
            Ok(())
        } else {
            Err(Error::invalid(
                "the queue belongs to another store than the job",
            ))
        }
    }

    /// Says that every piece has been sent. The job is done once they have all ended (at once,
    /// if they already have). Sealing twice is harmless.
    ///
    /// # Errors
    ///
    /// [`Error::JobNotFound`]; storage errors.
    pub fn seal(&self) -> Result<JobProgress> {
        let id = self.id;
        let r = self.engine.call(move |b| b.seal_job(id))?;
        Ok(progress(&r))
    }

    /// The job's counts now.
    ///
    /// # Errors
    ///
    /// [`Error::JobNotFound`]; storage errors.
    pub fn progress(&self) -> Result<JobProgress> {
        let id = self.id;
        let r = self
            .engine
            .read(|t| read::job(t, id))?
            .ok_or(Error::JobNotFound(id))?;
        Ok(progress(&r))
    }

    /// The ids of the pieces not yet ended, in id order.
    ///
    /// # Errors
    ///
    /// As [`Job::progress`].
    pub fn pending(&self) -> Result<Vec<MessageId>> {
        let id = self.id;
        let rows = self.engine.read(|t| {
            read::job(t, id)?.ok_or(Error::JobNotFound(id))?;
            read::job_pieces(t, id, true)
        })?;
        Ok(rows.into_iter().map(|(m, _, _)| MessageId(m)).collect())
    }

    /// Every piece and how it stands (the tracking table), in id order.
    ///
    /// # Errors
    ///
    /// As [`Job::progress`].
    pub fn pieces(&self) -> Result<Vec<(MessageId, PieceState)>> {
        let id = self.id;
        let rows = self.engine.read(|t| {
            read::job(t, id)?.ok_or(Error::JobNotFound(id))?;
            read::job_pieces(t, id, false)
        })?;
        Ok(rows
            .into_iter()
            .map(|(m, outcome, at)| {
                let state = match outcome {
                    1 => PieceState::Completed(to_system_time(at)),
                    2 => PieceState::DeadLettered(to_system_time(at)),
                    _ => PieceState::Pending,
                };
                (MessageId(m), state)
            })
            .collect())
    }

    /// Waits up to `timeout` for the job to be done; returns its progress then, or `None` when
    /// the time ran out first ([`Job::progress`] says how far it got), as every wait does.
    /// Woken by the commit that ends the last piece, in this process or (through the store's
    /// wake-up) in another.
    ///
    /// # Errors
    ///
    /// As [`Job::progress`].
    pub fn wait(&self, timeout: Duration) -> Result<Option<JobProgress>> {
        let deadline = Instant::now().checked_add(timeout);
        let r = self.engine.wait_job(self.id, deadline)?;
        let p = progress(&r);
        Ok(p.done.then_some(p))
    }

    /// Deletes the job and its tracking table. Pieces still pending stay in their queues as
    /// ordinary messages. Returns whether it existed.
    ///
    /// # Errors
    ///
    /// Storage errors.
    pub fn delete(&self) -> Result<bool> {
        let id = self.id;
        self.engine.call(move |b| b.delete_job(id))
    }
}
