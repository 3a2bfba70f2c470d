//! `postbox.ShutdownReport`: what a processor's `shutdown()` and `join()` report.

use postbox::ShutdownReport;
use pyo3::prelude::*;

/// What shutdown() and join() report.
#[pyclass(frozen, get_all, module = "postbox._postbox", name = "ShutdownReport")]
pub struct PyShutdownReport {
    processed: u64,
    failed: u64,
    dead_lettered: u64,
    lock_lost: u64,
    returned: u64,
    still_running: usize,
    finished: bool,
    /// Messages the processor could not settle or return (e.g. the store closed under it).
    unsettled: u64,
    /// Asked of a processor inherited across `fork()`, where its threads do not exist: nothing
    /// was stopped, waited for or written, and the counters are those at the fork.
    forked: bool,
}

#[pymethods]
impl PyShutdownReport {
    fn __repr__(&self) -> String {
        format!(
            "ShutdownReport(processed={}, failed={}, dead_lettered={}, lock_lost={}, returned={}, unsettled={}, still_running={}, finished={}{})",
            self.processed,
            self.failed,
            self.dead_lettered,
            self.lock_lost,
            self.returned,
            self.unsettled,
            self.still_running,
            if self.finished { "True" } else { "False" },
            if self.forked { ", forked=True" } else { "" }
        )
    }
}

/// The engine's report as Python sees it.
pub fn report_to_py(r: ShutdownReport) -> PyShutdownReport {
    PyShutdownReport {
        processed: r.processed,
        failed: r.failed,
        dead_lettered: r.dead_lettered,
        lock_lost: r.lock_lost,
        returned: r.returned,
        still_running: r.still_running,
        finished: r.finished,
        unsettled: r.unsettled,
        forked: r.forked,
    }
}
