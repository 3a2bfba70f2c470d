//! `postbox.Collator`, `postbox.Collated` and `postbox.SeriesGap`: a series that arrives out of
//! order is released to a queue in order.

use postbox::{Collator, MessageId};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::convert;
use crate::errors::IntoPy;
use crate::live::Live;
use crate::queue::PyQueue;

/// A collator: messages of a series (their `group`), numbered by `sequence` from 1 and sent
/// by any number of producers in any order, are released to the destination queue in sequence
/// order, each as soon as every number before it has arrived. Holding and releasing happen in
/// the sending commit, so a crash loses or duplicates nothing, and a number sent again is
/// recognised (`Collated.duplicate`). In a forked child every call raises `ForkedError`.
#[pyclass(frozen, module = "postbox._postbox", name = "Collator")]
pub struct PyCollator {
    c: Collator,
    /// The process that opened it: checked before every call into the core.
    opened_by: u32,
}

impl Live for PyCollator {
    type Inner = Collator;

    fn opened_by(&self) -> u32 {
        self.opened_by
    }

    fn inner(&self) -> &Collator {
        &self.c
    }
}

impl PyCollator {
    pub fn new(c: Collator) -> PyCollator {
        PyCollator {
            c,
            opened_by: postbox::binding::process_id(),
        }
    }
}

#[pymethods]
impl PyCollator {
    /// The collator's name.
    #[getter]
    fn name(&self) -> &str {
        self.c.name()
    }

    /// The queue it releases into.
    #[getter]
    fn destination(&self) -> PyQueue {
        PyQueue::new(self.c.destination().clone())
    }

    /// Sends message `sequence` (from 1) of series `group`: held until every number before it
    /// has arrived, then released with the held messages that follow it without a gap.
    /// `series_length` declares the series' length; `last=True` marks this message as the last
    /// one (its number is the length). A declaration that contradicts the series raises
    /// `InvalidArgumentError`, also on a resend of a number the series has (it is not the same
    /// message). The other keywords are those of `Queue.send`.
    #[pyo3(signature = (body, *, group, sequence, series_length=None, last=false, **props))]
    #[allow(clippy::too_many_arguments)] // the Python signature: series keywords beside **props
    fn send(
        &self,
        py: Python<'_>,
        body: &Bound<'_, PyAny>,
        group: String,
        sequence: u64,
        series_length: Option<u64>,
        last: bool,
        props: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyCollated> {
        let c = self.live()?;
        let mut m = convert::message(body, props, "send")?
            .group(group)
            .sequence(sequence);
        if let Some(n) = series_length {
            m = m.series_length(n);
        }
        if last {
            m = m.last_in_series();
        }
        let got = py.detach(|| c.send(m)).py_err()?;
        Ok(PyCollated {
            released: got.released.into_iter().map(MessageId::get).collect(),
            duplicate: got.duplicate,
        })
    }

    /// How many messages the collator holds now, waiting for gaps to close.
    fn held(&self, py: Python<'_>) -> PyResult<u64> {
        let c = self.live()?;
        py.detach(|| c.held()).py_err()
    }

    /// Forgets series `series`: its progress goes, so that its name starts a new series from
    /// 1. Returns whether the collator knew it. A completed series is remembered (a late
    /// resend is a duplicate) until forgotten; forget it once no resend can come any more.
    /// Raises `InvalidArgumentError` while the collator holds messages of the series (waiting
    /// for a gap: forgetting would lose them).
    fn forget(&self, py: Python<'_>, series: &str) -> PyResult<bool> {
        let c = self.live()?;
        py.detach(|| c.forget(series)).py_err()
    }

    /// The series not yet complete (length unknown, or not all released), in series order.
    fn incomplete(&self, py: Python<'_>) -> PyResult<Vec<PySeriesGap>> {
        let c = self.live()?;
        let gaps = py.detach(|| c.incomplete()).py_err()?;
        Ok(gaps
            .into_iter()
            .map(|g| PySeriesGap {
                series: g.series,
                next: g.next,
                length: g.length,
                held: g.held,
            })
            .collect())
    }

    fn __repr__(&self) -> String {
        format!(
            "<postbox.Collator {:?} -> {:?}>",
            self.c.name(),
            self.c.destination().name()
        )
    }
}

/// What a collator did with one message.
#[pyclass(frozen, get_all, eq, module = "postbox._postbox", name = "Collated")]
#[derive(PartialEq, Eq)]
pub struct PyCollated {
    /// The ids in the destination queue of the messages this send released, in series order
    /// (empty while a gap remains before it).
    released: Vec<u64>,
    /// The series already had this number: nothing was stored.
    duplicate: bool,
}

#[pymethods]
impl PyCollated {
    fn __repr__(&self) -> String {
        format!(
            "Collated(released={:?}, duplicate={})",
            self.released,
            if self.duplicate { "True" } else { "False" }
        )
    }
}

/// A series a collator has not completed.
#[pyclass(frozen, get_all, eq, module = "postbox._postbox", name = "SeriesGap")]
#[derive(PartialEq, Eq)]
pub struct PySeriesGap {
    /// The series (the messages' `group`).
    series: String,
    /// The next number to release: the first missing one.
    next: u64,
    /// The series' length once declared, else `None`.
    length: Option<u64>,
    /// The numbers held beyond the gap, ascending.
    held: Vec<u64>,
}

#[pymethods]
impl PySeriesGap {
    fn __repr__(&self) -> String {
        let length = self
            .length
            .map_or_else(|| "None".to_owned(), |n| n.to_string());
        format!(
            "SeriesGap(series={:?}, next={}, length={length}, held={:?})",
            self.series, self.next, self.held
        )
    }
}
