//! Maps postbox's errors to the exception classes of `postbox._errors` (pure Python, so that
//! they can inherit from both `PostboxError` and the matching builtin, e.g. `ValueError`).

use postbox::{Error, ErrorKind};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let module = ERRORS.get_or_try_init(py, || py.import("postbox._errors").map(Bound::unbind))?;
    module.bind(py).getattr(name)
}

/// The exception class of an error: the kind's, refined by the variant where Python has a
/// narrower class.
fn class_name(e: &Error) -> &'static str {
    match e {
        Error::QueueNotFound(_) => "QueueNotFoundError",
        Error::MessageNotFound(_) => "MessageNotFoundError",
        _ => kind_class_name(e.kind()),
    }
}

/// The exception class of each kind; a kind this binding does not know yet (the enum is
/// non-exhaustive) falls back to the base class, which `_error_kinds()` lets a test catch.
pub fn kind_class_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Timeout => "Empty",
        ErrorKind::LockLost => "LockLostError",
        ErrorKind::QueueFull => "QueueFullError",
        ErrorKind::TooLarge => "MessageTooLargeError",
        ErrorKind::NotFound => "NotFoundError",
        ErrorKind::InvalidArgument => "InvalidArgumentError",
        ErrorKind::Corrupted => "StoreCorruptedError",
        ErrorKind::Io => "IoError",
        ErrorKind::Closed => "ClosedError",
        ErrorKind::Panic => "InternalError",
        ErrorKind::NotAStore => "NotAStoreError",
        ErrorKind::IncompatibleVersion => "IncompatibleVersionError",
        ErrorKind::AlreadyOpen => "AlreadyOpenError",
        ErrorKind::OutcomeUnknown => "OutcomeUnknownError",
        ErrorKind::Config => "ConfigError",
        ErrorKind::StorageFull => "StorageFullError",
        ErrorKind::Codec => "CodecError",
        ErrorKind::QueueNotFound => "QueueNotFoundError",
        ErrorKind::Forked => "ForkedError",
        ErrorKind::Conflict => "ConflictError",
        ErrorKind::InUse => "InUseError",
        ErrorKind::Unsupported => "UnsupportedError",
        _ => "PostboxError",
    }
}

/// Every error kind of the engine as `(code, class name)`: lets the test suite check that no
/// kind falls back to the base class.
#[pyfunction]
pub fn _error_kinds() -> Vec<(i32, &'static str)> {
    ErrorKind::ALL
        .iter()
        .map(|k| (k.code(), kind_class_name(*k)))
        .collect()
}

/// Builds the Python exception for `e`, with `code` (the stable `ErrorKind` number) and the
/// details of the variant as attributes.
pub fn to_py(e: Error) -> PyErr {
    Python::attach(|py| match build(py, &e) {
        Ok(err) => err,
        Err(import_failed) => import_failed,
    })
}

fn build(py: Python<'_>, e: &Error) -> PyResult<PyErr> {
    let cls = class(py, class_name(e))?;
    let text = e.to_string();
    let exc = match e {
        // IoError is also an OSError: pass (errno, strerror) so `errno` is set.
        Error::Io(_) if e.os_error().is_some() => cls.call1((e.os_error(), text))?,
        _ => cls.call1((text,))?,
    };
    exc.setattr("code", e.kind() as i32)?;
    match e {
        Error::LockLost(id) | Error::MessageNotFound(id) => exc.setattr("message_id", id.get())?,
        Error::SessionLockLost(group) => exc.setattr("group", group)?,
        Error::QueueNotFound(q) => exc.setattr("queue", q)?,
        Error::QueueInUse { queue, by } => {
            exc.setattr("queue", queue)?;
            exc.setattr("used_by", by)?;
        }
        Error::JobNotFound(id) => exc.setattr("job_id", id)?,
        Error::QueueFull { queue, limit } => {
            exc.setattr("queue", queue)?;
            exc.setattr("limit", limit)?;
        }
        Error::MessageTooLarge { size, max } => {
            exc.setattr("size", size)?;
            exc.setattr("max_size", max)?;
        }
        Error::Forked { opened_by, current } => {
            exc.setattr("opened_by", opened_by)?;
            exc.setattr("current", current)?;
        }
        Error::Conflict { table, key } => {
            exc.setattr("table", table)?;
            exc.setattr("key", pyo3::types::PyBytes::new(py, key))?;
        }
        Error::NotBuilt { feature, .. } => exc.setattr("feature", feature)?,
        _ => {}
    }
    Ok(PyErr::from_value(exc))
}

/// A misuse of a Python object's state (a settled message, a finished transaction): reported as
/// `InvalidArgumentError`, which is also a `ValueError`, as Python does for closed files.
pub fn invalid(msg: impl Into<String>) -> PyErr {
    to_py(Error::InvalidArgument(msg.into()))
}

/// `UnsupportedError`: `what` is the cargo feature `feature`, which this module was built
/// without; the message gives the build option that adds it.
#[cfg(not(all(feature = "admin", feature = "bridge")))]
pub fn not_built(what: &str, feature: &str) -> PyErr {
    to_py(Error::NotBuilt {
        what: what.to_owned(),
        feature: feature.to_owned(),
        how: format!(
            "build the module with it: MATURIN_PEP517_ARGS=\"--features {feature}\" pip install \
             --no-binary postbox-mq postbox-mq (from source, needs Rust), or maturin build \
             --release --features {feature} in python/"
        ),
    })
}

/// Whether this process is not `opened_by`: the object was inherited across `fork()`.
pub fn is_forked(opened_by: u32) -> bool {
    postbox::binding::process_id() != opened_by
}

/// `postbox.Empty`: nothing arrived before the timeout.
pub fn empty(queue: &str) -> PyErr {
    empty_because(format!("no message arrived in queue {queue:?}"))
}

/// `postbox.Empty` with its own text (a session that did not come, say).
pub fn empty_because(text: String) -> PyErr {
    Python::attach(|py| {
        let built = class(py, "Empty").and_then(|cls| {
            let exc = cls.call1((text,))?;
            exc.setattr("code", ErrorKind::Timeout as i32)?;
            Ok(PyErr::from_value(exc))
        });
        built.unwrap_or_else(|e| e)
    })
}

/// Extension for `postbox::Result` → `PyResult`.
pub trait IntoPy<T> {
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for postbox::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
