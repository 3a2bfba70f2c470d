//! The fork guard of the Python handles, written once: every handle class says which process
//! opened it and what its methods use, and [`Live::live`] hands that out only in the opening
//! process (a `fork()` child gets `ForkedError`, invariant 11).

use pyo3::PyResult;

use crate::errors::IntoPy;

/// A Python handle that a `fork()` child must not use.
pub trait Live {
    /// What the handle's methods work on: the engine's object, or the mutex around it.
    type Inner: ?Sized;

    /// The process that opened the handle's store.
    fn opened_by(&self) -> u32;

    /// [`Inner`](Self::Inner) without the check: for what stays readable in a forked child (a
    /// name, a `repr`) and for [`live`](Self::live).
    fn inner(&self) -> &Self::Inner;

    /// The handle's inner object, or `ForkedError` in a process other than the one that opened
    /// it. Called first thing, before any mutex of this binding is taken: one that a parent
    /// thread held at fork time stays locked in the child.
    fn live(&self) -> PyResult<&Self::Inner> {
        postbox::binding::check_process(self.opened_by()).py_err()?;
        Ok(self.inner())
    }
}
