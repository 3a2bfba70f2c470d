//! Jobs: a shared counter and a tracking table for work split into pieces. A message sent as a
//! piece of a job carries state flag `0x10` and a `PIECE_JOB` row; when it is completed or
//! dead-lettered (or removed by a purge), the same commit marks its `JOB_PIECES` row and the
//! job's counts, and the commit that ends the last piece of a sealed job sends the job's
//! continuation, once.

use redb::ReadableTable;

use super::*;

/// A job's record in `JOBS`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobRecord {
    pub total: u64,
    pub completed: u64,
    pub dead_lettered: u64,
    /// No more pieces will be added: the job is done once every piece has ended.
    pub sealed: bool,
    pub created_at: u64,
    /// When the job was done (0: not yet).
    pub done_at: u64,
    /// The message sent when the job is done: its queue and `codec::encode_held` bytes.
    pub continuation: Option<(u32, Vec<u8>)>,
}

impl JobRecord {
    pub fn pending(&self) -> u64 {
        self.total
            .saturating_sub(self.completed + self.dead_lettered)
    }

    pub fn is_done(&self) -> bool {
        self.done_at != 0
    }

    /// `JOBS` value: a format byte, a CRC32C of the job id and the rest, then the fields.
    pub fn encode(&self, job: u64) -> Vec<u8> {
        let mut b = Vec::with_capacity(64);
        b.push(1u8);
        b.extend_from_slice(&[0; 4]);
        for v in [
            self.total,
            self.completed,
            self.dead_lettered,
            u64::from(self.sealed),
            self.created_at,
            self.done_at,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        if let Some((q, m)) = &self.continuation {
            b.extend_from_slice(&q.to_le_bytes());
            b.extend_from_slice(m);
        }
        let crc = job_crc(job, &b);
        b[1..5].copy_from_slice(&crc.to_le_bytes());
        b
    }

    pub fn decode(job: u64, b: &[u8]) -> std::result::Result<JobRecord, String> {
        const FIXED: usize = 5 + 6 * 8;
        if b.len() < FIXED || b[0] != 1 {
            return Err("unknown job record format".into());
        }
        let stored = u32::from_le_bytes([b[1], b[2], b[3], b[4]]);
        if stored != job_crc(job, b) {
            return Err("job record checksum mismatch".into());
        }
        let at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[5 + i * 8..13 + i * 8]);
            u64::from_le_bytes(a)
        };
        let continuation = match &b[FIXED..] {
            [] => None,
            rest if rest.len() >= 4 => Some((
                u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]),
                rest[4..].to_vec(),
            )),
            _ => return Err("truncated job continuation".into()),
        };
        Ok(JobRecord {
            total: at(0),
            completed: at(1),
            dead_lettered: at(2),
            sealed: at(3) != 0,
            created_at: at(4),
            done_at: at(5),
            continuation,
        })
    }
}

fn job_crc(job: u64, b: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&job.to_le_bytes());
    let crc = crc32c::crc32c_append(crc, &b[..1]);
    crc32c::crc32c_append(crc, &b[5..])
}

/// How a piece of a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PieceEnd {
    Completed = 1,
    DeadLettered = 2,
}

/// A `JOB_PIECES` value: outcome (0 pending) and when it ended.
pub fn encode_piece(outcome: u8, at: u64) -> [u8; 9] {
    let mut b = [0u8; 9];
    b[0] = outcome;
    b[1..9].copy_from_slice(&at.to_le_bytes());
    b
}

pub fn decode_piece(b: &[u8; 9]) -> (u8, u64) {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[1..9]);
    (b[0], u64::from_le_bytes(a))
}

/// The key a job's waiters wait on in the store's signals: above every queue id (which stay
/// below 2^30), so a file watch wakes them on any change (see `wake_waiters`).
pub fn job_signal(job: u64) -> u32 {
    JOB_SIGNAL_BASE | (job as u32 & !JOB_SIGNAL_BASE)
}

/// Signals at or above this key belong to jobs, not queues.
pub const JOB_SIGNAL_BASE: u32 = 1 << 31;

impl<'t> Batch<'t> {
    pub(super) fn load_job(&mut self, job: u64) -> Result<Option<JobRecord>> {
        if let Some(r) = self.job_cache.get(&job) {
            return Ok(Some(r.clone()));
        }
        match self.tables.jobs()?.get(job)? {
            None => Ok(None),
            Some(g) => JobRecord::decode(job, g.value())
                .map(Some)
                .map_err(|e| corrupted("job record", e)),
        }
    }

    /// Records the job's new state; written once, by `flush`, however many pieces of the job
    /// the batch touched.
    fn put_job(&mut self, job: u64, rec: &JobRecord) -> Result<()> {
        self.cache_changed();
        self.job_cache.insert(job, rec.clone());
        Ok(())
    }

    /// Writes the jobs this batch changed.
    pub(super) fn flush_jobs(&mut self) -> Result<()> {
        if self.job_cache.is_empty() {
            return Ok(());
        }
        for (job, rec) in std::mem::take(&mut self.job_cache) {
            self.tables
                .jobs()?
                .insert(job, rec.encode(job).as_slice())?;
        }
        Ok(())
    }

    /// Creates a job; returns its id. `continuation` is sent to queue `(q, name)` when the job
    /// is done.
    pub fn create_job(&mut self, continuation: Option<(u32, String, Message)>) -> Result<u64> {
        let continuation = match continuation {
            Some((q, name, m)) => {
                let rec = self.require_queue(QueueRef::new(q, &name))?;
                self.check_reference("a job's continuation", &rec.record, &name)?;
                validate_message(&m, rec.record.options.max_message_size)?;
                Some((q, codec::encode_held("job", 0, &m)))
            }
            None => None,
        };
        let job = self.next_seq(Seq::Message)?;
        let rec = JobRecord {
            created_at: self.now,
            continuation,
            ..JobRecord::default()
        };
        self.put_job(job, &rec)?;
        Ok(job)
    }

    /// Checks that pieces may still be added to `job`.
    pub(super) fn check_job_open(&mut self, job: u64) -> Result<()> {
        match self.load_job(job)? {
            None => Err(Error::JobNotFound(job)),
            Some(r) if r.sealed => Err(Error::invalid(format!(
                "job {job} is sealed: no more pieces can be added"
            ))),
            Some(_) => Ok(()),
        }
    }

    /// Records message `id` as a new pending piece of `job` (its state row carries the flag).
    pub(super) fn add_piece(&mut self, job: u64, id: u64) -> Result<()> {
        let mut rec = self.load_job(job)?.ok_or(Error::JobNotFound(job))?;
        rec.total += 1;
        self.put_job(job, &rec)?;
        self.tables
            .job_pieces()?
            .insert((job, id), encode_piece(0, 0))?;
        self.tables.piece_job()?.insert(id, job)?;
        Ok(())
    }

    /// Ends the piece that message `id` is, if it is one: marks its row and its job's counts
    /// and clears the flag in `st` (the caller writes `st` or removes it).
    pub(super) fn end_piece(&mut self, id: u64, st: &mut State, end: PieceEnd) -> Result<()> {
        if !st.tracked {
            return Ok(());
        }
        st.tracked = false;
        let Some(job) = self.tables.piece_job()?.remove(id)?.map(|g| g.value()) else {
            return Ok(());
        };
        // A job deleted while its pieces were out leaves them untracked.
        let Some(mut rec) = self.load_job(job)? else {
            return Ok(());
        };
        let row = encode_piece(end as u8, self.now);
        self.tables.job_pieces()?.insert((job, id), row)?;
        match end {
            PieceEnd::Completed => rec.completed += 1,
            PieceEnd::DeadLettered => rec.dead_lettered += 1,
        }
        self.finish_if_done(job, &mut rec, Some(st.queue))?;
        self.put_job(job, &rec)
    }

    /// Seals `job`: no more pieces. Returns its record (done at once if nothing is pending).
    pub fn seal_job(&mut self, job: u64) -> Result<JobRecord> {
        let mut rec = self.load_job(job)?.ok_or(Error::JobNotFound(job))?;
        if !rec.sealed {
            rec.sealed = true;
            self.finish_if_done(job, &mut rec, None)?;
            self.put_job(job, &rec)?;
        }
        Ok(rec)
    }

    /// Marks a sealed job with nothing pending as done and sends its continuation, once.
    /// `source` is the queue of the piece whose end finished the job (`None` for a seal).
    ///
    /// Nothing deletes the queue of a pending continuation now (see `in_use`), but a store that
    /// an older postbox wrote may lack it. The continuation is then dead-lettered, reason
    /// `DestinationMissing`, where the finishing piece's dead letters go. Where there is no
    /// such place, a seal is refused (nothing written yet), and a piece removed with its
    /// deleted queue leaves the job not done, its continuation kept in its record: a removal
    /// cannot be refused half way. The continuation never vanishes.
    fn finish_if_done(&mut self, job: u64, rec: &mut JobRecord, source: Option<u32>) -> Result<()> {
        if !rec.sealed || rec.pending() != 0 || rec.is_done() {
            return Ok(());
        }
        if let Some((q, raw)) = &rec.continuation {
            let m =
                codec::decode_held("job", 0, raw).map_err(|e| corrupted("job continuation", e))?;
            if let Some(target) = self.queue(*q)? {
                let settings = target.record.options.clone();
                self.insert_message(*q, &settings, m)?;
            } else {
                let why = format!("the queue of job {job}'s continuation no longer exists");
                let Some(source) = source else {
                    return Err(Error::invalid(format!(
                        "job {job} cannot be done: {why} (deleted by an older postbox); delete the job to drop its continuation"
                    )));
                };
                let delivered = match self.queue(source)? {
                    Some(source) => self.dead_letter_undeliverable(&source, m, &why)?,
                    None => false,
                };
                if !delivered {
                    tracing::warn!(
                        job,
                        "{why} and its last piece went with its deleted queue: the job stays not done, its continuation kept"
                    );
                    return Ok(());
                }
            }
        }
        rec.done_at = self.now.max(1);
        self.woken.insert(job_signal(job));
        Ok(())
    }

    /// Deletes a job and its tracking rows; pieces still pending stay in their queues,
    /// untracked. Returns whether it existed.
    pub fn delete_job(&mut self, job: u64) -> Result<bool> {
        if self.load_job(job)?.is_none() {
            return Ok(false);
        }
        // A job created in this batch is only in the cache until `flush`.
        if self.job_cache.remove(&job).is_some() {
            self.cache_changed();
        }
        self.tables.jobs()?.remove(job)?;
        let pieces: Vec<u64> = self
            .tables
            .job_pieces()?
            .range((job, 0)..=(job, u64::MAX))?
            .map(|e| e.map(|(k, _)| k.value().1))
            .collect::<std::result::Result<_, _>>()?;
        for id in pieces {
            self.tables.job_pieces()?.remove((job, id))?;
            self.tables.piece_job()?.remove(id)?;
        }
        Ok(true)
    }
}
