//! `postbox.Job`, `postbox.JobProgress` and `postbox.JobPiece`: work split into pieces, with
//! counts kept exact in the same commit as each piece's settle.

use postbox::{Job, JobProgress, MessageId, PieceState};
use pyo3::prelude::*;
use pyo3::types::{PyDateTime, PyDict};

use crate::convert;
use crate::errors::{IntoPy, empty_because};
use crate::live::Live;
use crate::queue::PyQueue;
use crate::wait::wait_interruptible;

/// A job: a piece of work split into messages (its pieces), from `Store.create_job()` or, by
/// id in any process, `Store.job(id)`.
///
/// Each piece's completion or dead-lettering updates the job's counts and the piece's row in
/// the same commit as the settle, so concurrent workers in any threads and processes never
/// lose an update. Once the job is sealed (`seal()`: no more pieces) and every piece has
/// ended, it is done: `wait()` returns, and its continuation message, if it has one, is sent in
/// that same commit, exactly once. A deleted job raises `NotFoundError` (with `job_id` set). In
/// a forked child every call raises `ForkedError`.
#[pyclass(frozen, module = "postbox._postbox", name = "Job")]
pub struct PyJob {
    pub job: Job,
    opened_by: u32,
}

impl Live for PyJob {
    type Inner = Job;

    fn opened_by(&self) -> u32 {
        self.opened_by
    }

    fn inner(&self) -> &Job {
        &self.job
    }
}

impl PyJob {
    pub fn new(job: Job) -> PyJob {
        PyJob {
            job,
            opened_by: postbox::binding::process_id(),
        }
    }

    fn call<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Job) -> postbox::Result<T> + Send,
    ) -> PyResult<T> {
        let job = self.live()?;
        py.detach(|| f(job)).py_err()
    }
}

#[pymethods]
impl PyJob {
    /// The job's id: `Store.job(id)` opens it again, in any process.
    #[getter]
    fn id(&self) -> u64 {
        self.job.id()
    }

    /// Sends a piece of this job to `queue` (with `Queue.send`'s keywords); returns its id.
    /// Raises `InvalidArgumentError` once the job is sealed, `NotFoundError` once deleted, and
    /// whatever `Queue.send` raises. A duplicate (its `message_key` in the queue's dedup window)
    /// is not a new piece.
    #[pyo3(signature = (queue, body, **props))]
    fn send(
        &self,
        py: Python<'_>,
        queue: &Bound<'_, PyQueue>,
        body: &Bound<'_, PyAny>,
        props: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<u64> {
        let m = convert::message(body, props, "send")?;
        let q = &queue.get().q;
        self.call(py, |j| j.send(q, m)).map(MessageId::get)
    }

    /// Sends several pieces to `queue` atomically (all or none, one commit); each item is a
    /// body or a dict as for `Queue.send_batch`. Returns their ids in order.
    fn send_batch(
        &self,
        py: Python<'_>,
        queue: &Bound<'_, PyQueue>,
        messages: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<u64>> {
        let mut batch = Vec::new();
        for item in messages.try_iter()? {
            batch.push(convert::batch_item(&item?)?);
        }
        let q = &queue.get().q;
        let ids = self.call(py, |j| j.send_batch(q, batch))?;
        Ok(ids.into_iter().map(MessageId::get).collect())
    }

    /// Says that every piece has been sent; returns the progress then. The job is done once
    /// every piece has ended (at once, if they already have: the continuation goes out in this
    /// commit). Sealing twice is harmless.
    fn seal(&self, py: Python<'_>) -> PyResult<PyJobProgress> {
        self.call(py, Job::seal).map(PyJobProgress::from)
    }

    /// The job's counts now, read from one snapshot.
    fn progress(&self, py: Python<'_>) -> PyResult<PyJobProgress> {
        self.call(py, Job::progress).map(PyJobProgress::from)
    }

    /// The ids of the pieces not yet ended, in id order.
    fn pending(&self, py: Python<'_>) -> PyResult<Vec<u64>> {
        let ids = self.call(py, Job::pending)?;
        Ok(ids.into_iter().map(MessageId::get).collect())
    }

    /// Every piece and how it stands (the job's tracking table), in id order.
    fn pieces(&self, py: Python<'_>) -> PyResult<Vec<PyJobPiece>> {
        let rows = self.call(py, Job::pieces)?;
        Ok(rows
            .into_iter()
            .map(|(id, state)| PyJobPiece::new(id, state))
            .collect())
    }

    /// Waits up to `timeout` seconds (`None`: forever) for the job to be done and returns its
    /// progress then; raises `postbox.Empty` when the time runs out first (as every wait
    /// does; `progress()` says how far it got). Woken by the commit that ends the last piece,
    /// in this process or (through the store's wake-up) in another. The GIL is released while
    /// waiting, and Ctrl-C interrupts it.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<PyJobProgress> {
        let job = self.live()?;
        let deadline = convert::deadline(timeout)?;
        match wait_interruptible(py, deadline, |slice| job.wait(slice))? {
            Some(p) => Ok(p.into()),
            None => {
                let p = self.call(py, Job::progress)?;
                Err(empty_because(format!(
                    "job {} was not done in time ({} of {} pieces pending{})",
                    job.id(),
                    p.pending,
                    p.total,
                    if p.sealed { "" } else { ", not sealed" }
                )))
            }
        }
    }

    /// Deletes the job and its tracking table; returns whether it existed. Pieces still
    /// pending stay in their queues as ordinary messages (their settles no longer count).
    fn delete(&self, py: Python<'_>) -> PyResult<bool> {
        self.call(py, Job::delete)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyJob>()
            .is_ok_and(|o| o.get().job.id() == self.job.id())
    }

    fn __hash__(&self) -> u64 {
        self.job.id()
    }

    fn __repr__(&self) -> String {
        format!("<postbox.Job {}>", self.job.id())
    }
}

/// A job's counts, read from one snapshot (`Job.progress()`, `seal()`, `wait()`).
#[pyclass(
    frozen,
    get_all,
    eq,
    hash,
    module = "postbox._postbox",
    name = "JobProgress"
)]
#[derive(PartialEq, Eq, Hash)]
pub struct PyJobProgress {
    /// Pieces sent.
    total: u64,
    /// Pieces completed.
    completed: u64,
    /// Pieces dead-lettered (or removed unsettled by a purge or a queue's deletion).
    dead_lettered: u64,
    /// Pieces not yet ended: `total - completed - dead_lettered`.
    pending: u64,
    /// No more pieces can be added.
    sealed: bool,
    /// Sealed, and every piece has ended.
    done: bool,
}

impl From<JobProgress> for PyJobProgress {
    fn from(p: JobProgress) -> PyJobProgress {
        PyJobProgress {
            total: p.total,
            completed: p.completed,
            dead_lettered: p.dead_lettered,
            pending: p.pending,
            sealed: p.sealed,
            done: p.done,
        }
    }
}

fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

#[pymethods]
impl PyJobProgress {
    fn _asdict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("total", self.total)?;
        d.set_item("completed", self.completed)?;
        d.set_item("dead_lettered", self.dead_lettered)?;
        d.set_item("pending", self.pending)?;
        d.set_item("sealed", self.sealed)?;
        d.set_item("done", self.done)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "JobProgress(total={}, completed={}, dead_lettered={}, pending={}, sealed={}, \
             done={})",
            self.total,
            self.completed,
            self.dead_lettered,
            self.pending,
            py_bool(self.sealed),
            py_bool(self.done)
        )
    }
}

/// One piece of a job and how it stands (`Job.pieces()`).
#[pyclass(frozen, eq, module = "postbox._postbox", name = "JobPiece")]
#[derive(PartialEq, Eq)]
pub struct PyJobPiece {
    id: u64,
    state: &'static str,
    ended_at: Option<std::time::SystemTime>,
}

impl PyJobPiece {
    fn new(id: MessageId, state: PieceState) -> PyJobPiece {
        let (state, ended_at) = match state {
            PieceState::Completed(at) => ("completed", Some(at)),
            PieceState::DeadLettered(at) => ("dead-lettered", Some(at)),
            _ => ("pending", None),
        };
        PyJobPiece {
            id: id.get(),
            state,
            ended_at,
        }
    }
}

#[pymethods]
impl PyJobPiece {
    /// The piece's message id.
    #[getter]
    fn id(&self) -> u64 {
        self.id
    }

    /// `"pending"`, `"completed"` or `"dead-lettered"` (dead-lettered also covers a piece
    /// removed unsettled by a purge or its queue's deletion).
    #[getter]
    fn state(&self) -> &'static str {
        self.state
    }

    /// When the piece was completed or dead-lettered; `None` while pending.
    #[getter]
    fn ended_at<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDateTime>>> {
        convert::opt_datetime(py, self.ended_at)
    }

    fn __repr__(&self) -> String {
        format!("JobPiece(id={}, state={:?})", self.id, self.state).replace('"', "'")
    }
}
