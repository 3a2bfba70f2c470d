//! The native module `postbox._postbox`, wrapped by the pure-Python package `postbox`.
//!
//! Every call that touches the disk or waits runs with the GIL released (`Python::detach`);
//! waits on the main thread end for a signal so that Ctrl-C raises `KeyboardInterrupt` at once,
//! and no wait wakes the process while idle (`wait.rs`). Errors become the exception classes of
//! `postbox._errors`, one per `postbox::ErrorKind`.

mod admin;
mod aio;
mod bridge;
mod collator;
mod convert;
mod errors;
mod job;
mod live;
mod message;
mod processor;
mod queue;
mod session;
mod shutdown_report;
mod store;
mod table;
mod topic;
mod tx;
mod wait;

use pyo3::prelude::*;

// Free-threaded CPython (3.13t and later) is not declared supported: the suite has not run
// on it. `gil_used = true` (pyo3 0.28+ defaults to false) makes such an interpreter re-enable
// the GIL when it imports the module. The abi3 wheel cannot load there anyway (free-threaded
// builds have no limited API); supporting one needs a version-specific cp3xt wheel.
#[pymodule(gil_used = true)]
mod _postbox {
    #[pymodule_export]
    use crate::admin::PyAdminServer;
    #[pymodule_export]
    use crate::aio::{_receive_async, PyAsyncReceive};
    #[pymodule_export]
    use crate::bridge::PyBridge;
    #[pymodule_export]
    use crate::collator::{PyCollated, PyCollator, PySeriesGap};
    #[pymodule_export]
    use crate::errors::_error_kinds;
    #[pymodule_export]
    use crate::job::{PyJob, PyJobPiece, PyJobProgress};
    #[pymodule_export]
    use crate::message::PyMessage;
    #[pymodule_export]
    use crate::processor::{_shutdown_all, PyProcessor};
    #[pymodule_export]
    use crate::queue::{PyBrowse, PyConsumer, PyQueue, PyQueueStats, PySent};
    #[pymodule_export]
    use crate::session::PySession;
    #[pymodule_export]
    use crate::shutdown_report::PyShutdownReport;
    #[pymodule_export]
    use crate::store::{PyQueueInfo, PyStore};
    #[pymodule_export]
    use crate::table::{PyTable, PyTxTable};
    #[pymodule_export]
    use crate::topic::{PyTopic, PyTopicStats};
    #[pymodule_export]
    use crate::tx::PyTransaction;

    use pyo3::prelude::*;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        // Advice in error messages names Python's spelling (`multi_process=True`).
        postbox::binding::set_language(postbox::binding::Language::Python);
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        // The optional parts this module was built with (README, "Features and defaults").
        let features: &[&str] = &[
            #[cfg(feature = "admin")]
            "admin",
            #[cfg(feature = "bridge")]
            "bridge",
        ];
        m.add("FEATURES", pyo3::types::PyFrozenSet::new(m.py(), features)?)?;
        m.add("MAX_PRIORITY", postbox::MAX_PRIORITY)?;
        m.add("MIN_PRIORITY", postbox::MIN_PRIORITY)?;
        m.add("DEFAULT_PRIORITY", postbox::DEFAULT_PRIORITY)?;
        m.add("REASON_TTL_EXPIRED", postbox::REASON_TTL_EXPIRED)?;
        m.add("REASON_MAX_DELIVERIES", postbox::REASON_MAX_DELIVERIES)?;
        m.add(
            "REASON_DESTINATION_MISSING",
            postbox::REASON_DESTINATION_MISSING,
        )?;
        m.add("RECEIPT_LABEL", postbox::RECEIPT_LABEL)?;
        m.add("RECEIPT_MESSAGE_ID", postbox::RECEIPT_MESSAGE_ID)?;
        m.add("RECEIPT_QUEUE", postbox::RECEIPT_QUEUE)?;
        m.add("RECEIPT_OUTCOME", postbox::RECEIPT_OUTCOME)?;
        m.add("RECEIPT_AT", postbox::RECEIPT_AT)?;
        m.add("RECEIPT_REASON", postbox::RECEIPT_REASON)?;
        Ok(())
    }
}
