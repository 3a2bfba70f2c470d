//! What a store holds by name: queues, topics, collators, jobs and tables — opening,
//! creating, listing and deleting them.

use super::{QueueInfo, Store};
use crate::app_table::Table;
use crate::collator::Collator;
use crate::engine::queries as read;
use crate::engine::validate_queue_name;
use crate::engine::{QueueEntry, QueueKind, QueueRecord, QueueRef};
use crate::error::{Error, Result};
use crate::job::{Job, JobInfo, JobOptions};
use crate::options::{QueueOptions, QueueSettings};
use crate::queue::Queue;
use crate::topic::Topic;

impl Store {
    /// Opens queue `name`, creating it with default options if it does not exist. An existing
    /// queue keeps its messages and its options.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name (empty, over 255 bytes, control characters, or
    /// the reserved dead-letter suffix) of a queue that does not exist.
    pub fn queue(&self, name: &str) -> Result<Queue> {
        self.open_or_create(name, None)
    }

    /// Opens queue `name` with `options`, creating it if missing. An existing queue keeps its
    /// messages and its stored options, except those `options` mention (see
    /// [`QueueOptions`]: options not mentioned keep their stored values).
    ///
    /// # Errors
    ///
    /// As [`Store::queue`], plus [`Error::InvalidArgument`] for invalid options (checked after
    /// merging with the stored ones).
    pub fn queue_with(&self, name: &str, options: QueueOptions) -> Result<Queue> {
        options.apply_to(&QueueSettings::default()).validate()?;
        self.open_or_create(name, Some(options))
    }

    /// Opens queue `name` only if it exists, never creating it: a late reply does not
    /// re-create a deleted temporary queue, and a typo does not create a new one. A
    /// dead-letter queue opens by its full name too.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// store.queue("jobs")?;
    /// assert!(store.open_queue("jobs").is_ok());
    /// let e = store.open_queue("jbos").unwrap_err();
    /// assert_eq!(e.kind(), postbox::ErrorKind::QueueNotFound);
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::QueueNotFound`] when no such queue exists; [`Error::InvalidArgument`] for a bad
    /// name (unless a queue has it: see [`Store::queues`]); storage errors.
    pub fn open_queue(&self, name: &str) -> Result<Queue> {
        self.check_existing_name(name)?;
        Queue::open_existing(&self.engine, name)
    }

    /// Checks a name given to find a queue that exists. Besides valid names, the name of a
    /// queue that exists passes: an older postbox let a topic subscription's queue name run
    /// past 255 bytes, and such a queue must still open, list and go.
    fn check_existing_name(&self, name: &str) -> Result<()> {
        let Err(e) = validate_queue_name(name) else {
            return Ok(());
        };
        if !name.is_empty()
            && self
                .engine
                .read(|t| read::queue_by_name(t, name))?
                .is_some()
        {
            Ok(())
        } else {
            Err(e)
        }
    }

    /// Opens topic `name`, creating it if missing. A topic and a queue cannot share a name.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, or the name of a queue; storage errors.
    pub fn topic(&self, name: &str) -> Result<Topic> {
        validate_queue_name(name)?;
        if let Some(rec) = self.engine.read(|t| read::queue_by_name(t, name))?
            && rec.kind == QueueKind::Topic
        {
            return Ok(Topic::new(self.engine.clone(), name, &rec));
        }
        let owned = name.to_owned();
        let rec = self.engine.call(move |b| b.open_topic(&owned))?;
        Ok(Topic::new(self.engine.clone(), name, &rec))
    }

    /// Opens topic `name` only if it exists.
    ///
    /// # Errors
    ///
    /// [`Error::QueueNotFound`] when there is no such topic; storage errors.
    pub fn open_topic(&self, name: &str) -> Result<Topic> {
        validate_queue_name(name)?;
        match self.engine.read(|t| read::queue_by_name(t, name))? {
            Some(rec) if rec.kind == QueueKind::Topic => {
                Ok(Topic::new(self.engine.clone(), name, &rec))
            }
            _ => Err(Error::QueueNotFound(name.to_owned())),
        }
    }

    /// Opens collator `name`, which releases into `destination`, creating it if missing. The
    /// destination is then in use (see [`Store::delete_queue`]) until the collator is deleted.
    ///
    /// A collator whose destination no longer exists — possible only in a store an older
    /// postbox wrote, since deleting a queue a collator names is refused now — refuses sends
    /// ([`Error::QueueNotFound`] naming that queue) and keeps what it holds; opening it with a
    /// `destination` makes that its destination and releases there, in order, everything that
    /// was ready.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, the name of a queue or topic, a collator that
    /// releases into another queue that still exists, or a destination that is not a plain
    /// queue or is temporary; [`Error::QueueNotFound`] if `destination` was deleted; storage
    /// errors.
    pub fn collator(&self, name: &str, destination: &Queue) -> Result<Collator> {
        validate_queue_name(name)?;
        let (owned, dest, dest_name) = (name.to_owned(), destination.id, destination.name.clone());
        let rec = self
            .engine
            .call(move |b| b.open_collator(&owned, QueueRef::new(dest, &dest_name)))?;
        Ok(Collator::new(
            self.engine.clone(),
            name,
            &rec,
            destination.clone(),
        ))
    }

    /// The names of all topics.
    ///
    /// # Errors
    ///
    /// Storage errors only.
    pub fn topics(&self) -> Result<Vec<String>> {
        self.engine.read(read::list_topics)
    }

    /// Creates a temporary queue: it belongs to this store handle's process and is deleted,
    /// with its messages, when the store is closed, when the process dies (noticed by the next
    /// process that opens the store, or by a shared store's next writer), or when the store is
    /// next opened in single-process mode. Its name (`$temporary/…`) is unique and may be given
    /// out as a `reply_to`. Used by [`Queue::request`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for invalid options (a temporary queue cannot require
    /// sessions or keep a journal); storage errors.
    pub fn temporary_queue(&self, options: Option<QueueOptions>) -> Result<Queue> {
        if let Some(o) = &options {
            o.apply_to(&QueueSettings::default()).validate()?;
        }
        let owner = self.engine.owner;
        let QueueEntry { name, record: rec } = self
            .engine
            .call(move |b| b.create_temporary_queue(owner, options.as_ref()))?;
        if rec.options.auto_delete_on_idle.is_some() {
            self.engine.ensure_janitor();
        }
        Ok(Queue::new(self.engine.clone(), &name, rec))
    }

    /// Creates a job (see [`Job`]). The queue of its continuation is in use (see
    /// [`Store::delete_queue`]) until the job is done or deleted.
    ///
    /// # Errors
    ///
    /// For a continuation: [`Error::QueueNotFound`], [`Error::MessageTooLarge`],
    /// [`Error::InvalidArgument`] (also for a temporary queue, which goes with its process
    /// while the job outlives it); storage errors.
    pub fn create_job(&self, options: JobOptions) -> Result<Job> {
        Job::create(&self.engine, options)
    }

    /// Every job in the store (created by [`Store::create_job`] in any process and not yet
    /// [deleted](Job::delete)), in id order, each with its progress: what a dashboard shows of
    /// batch progress. Done jobs are listed until deleted.
    ///
    /// The list is read from one snapshot, so the counts of all jobs belong to the same moment
    /// and the read never blocks writers. It costs a walk of the whole job table (one record
    /// per job; pieces are not read).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// use postbox::JobOptions;
    /// let q = store.queue("tiles")?;
    /// let job = store.create_job(JobOptions::default())?;
    /// job.send(&q, "tile 0")?;
    /// let jobs = store.jobs()?;
    /// assert_eq!(jobs.len(), 1);
    /// assert_eq!(jobs[0].id, job.id());
    /// assert_eq!(jobs[0].progress.pending, 1);
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] once the store was closed; storage errors (`Corrupted` for a damaged
    /// job record).
    pub fn jobs(&self) -> Result<Vec<JobInfo>> {
        crate::job::list(&self.engine)
    }

    /// Opens job `id`, created by [`Store::create_job`] in this or another process.
    ///
    /// # Errors
    ///
    /// [`Error::JobNotFound`]; storage errors.
    pub fn job(&self, id: u64) -> Result<Job> {
        self.engine
            .read(|t| read::job(t, id))?
            .ok_or(Error::JobNotFound(id))?;
        Ok(Job {
            engine: self.engine.clone(),
            id,
        })
    }

    /// Application table `name` (see [`Table`]); it exists once a row is written to it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a name that is empty or over 1 KiB; [`Error::Closed`].
    pub fn table(&self, name: &str) -> Result<Table> {
        self.engine.check_open()?;
        crate::engine::validate_app_key(name, b"")?;
        Ok(Table {
            engine: self.engine.clone(),
            name: name.into(),
        })
    }

    /// Every queue (as [`Store::queues`] lists them) with its options, whether it is
    /// temporary, and its last activity, read from one snapshot.
    ///
    /// # Errors
    ///
    /// Storage errors only.
    pub fn queue_infos(&self) -> Result<Vec<QueueInfo>> {
        self.engine.read(|t| {
            read::queue_records(t)?
                .into_iter()
                .map(|QueueEntry { name, record: rec }| {
                    let c = read::counts(t, rec.id)?;
                    Ok(QueueInfo {
                        options: QueueOptions::from(&rec.options),
                        temporary: rec.temporary_owner != 0,
                        last_activity: (c.last_activity != 0)
                            .then(|| crate::clock::to_system_time(c.last_activity)),
                        name,
                    })
                })
                .collect()
        })
    }

    fn open_or_create(&self, name: &str, options: Option<QueueOptions>) -> Result<Queue> {
        self.check_existing_name(name)?;
        if let Some(rec) = self.engine.read(|t| read::queue_by_name(t, name))?
            && matches!(rec.kind, QueueKind::Topic | QueueKind::Collator)
        {
            return Err(Error::invalid(format!(
                "{name:?} is {}, not a queue",
                rec.kind.described()
            )));
        }
        // Opening an existing queue with nothing to change needs no write transaction.
        let existing = self.engine.read(|t| read::queue_by_name(t, name))?;
        let rec: QueueRecord = match existing {
            Some(rec)
                if options
                    .as_ref()
                    .is_none_or(|o| o.apply_to(&rec.options) == rec.options) =>
            {
                rec
            }
            _ => {
                let owned = name.to_owned();
                self.engine
                    .call(move |b| b.open_queue(&owned, options.as_ref()))?
            }
        };
        if rec.options.auto_delete_on_idle.is_some() {
            self.engine.ensure_janitor();
        }
        Ok(Queue::new(self.engine.clone(), name, rec))
    }

    /// The names of all queues, topic subscriptions included (dead-letter queues are reached
    /// through [`Queue::dead_letters`], topics through [`Store::topics`]). Every queue is
    /// listed, and every name listed opens with [`Store::open_queue`] and deletes with
    /// [`Store::delete_queue`] — also the over-long subscription names an older postbox
    /// allowed (a subscription's whole queue name is at most 255 bytes now).
    ///
    /// # Errors
    ///
    /// Storage errors only.
    pub fn queues(&self) -> Result<Vec<String>> {
        self.engine.read(read::list_queues)
    }

    /// Deletes queue `name`, its dead-letter queue, and all their messages. Returns whether it
    /// existed. Handles to the queue fail with [`Error::QueueNotFound`] afterwards. A topic's
    /// name deletes the topic with every subscription; a collator's the collator.
    ///
    /// A queue that something names is *in use* and is not deleted: another queue's
    /// `forward_to`, `forward_dead_letters_to` or `receipts_to`, a collator that releases into
    /// it, or a job that is not done and sends its continuation there. Each of those promises
    /// to deliver into the queue, so the deletion is refused instead of losing what they
    /// deliver later. Clear the option, delete the collator or the job (or let it finish)
    /// first. `auto_delete_on_idle` skips a queue in use the same way.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// use postbox::{ErrorKind, QueueOptions};
    /// store.queue("audit")?;
    /// store.queue_with("orders", QueueOptions::default().receipts_to("audit"))?;
    /// let e = store.delete_queue("audit").unwrap_err();
    /// assert_eq!(e.kind(), ErrorKind::InUse); // "… it is the receipts_to of queue \"orders\" …"
    /// store.queue_with("orders", QueueOptions::default().no_receipts_to())?;
    /// assert!(store.delete_queue("audit")?);
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::QueueInUse`] when something names the queue (for a topic: one of its
    /// subscriptions), with nothing deleted; [`Error::InvalidArgument`] when `name` is a
    /// dead-letter queue or a journal.
    pub fn delete_queue(&self, name: &str) -> Result<bool> {
        self.check_existing_name(name)?;
        let owned = name.to_owned();
        self.engine.call(move |b| b.delete_queue(&owned))
    }
}
