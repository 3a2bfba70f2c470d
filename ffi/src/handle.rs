//! The fork guard of the C handles, written once: every handle type says which store opening it
//! descends from ([`Handle::tag`]), and [`live`] (or [`Handle::live`], for a handle already
//! checked for NULL) turns a handle argument into a reference only in the process that opened
//! that store (invariant 11). The shape is rustls-ffi's `Castable`: a trait on the handle type
//! carries what the generic pointer check needs.

use crate::StoreTag;
use crate::guard::{Outcome, arg_ref};

/// A handle given to C that a `fork()` child must not use.
pub(crate) trait Handle {
    /// The argument name a NULL handle of this type is reported under
    /// (`"queue must not be NULL"`).
    const ARG: &'static str;

    /// The store opening (and so the process) this handle descends from.
    fn tag(&self) -> StoreTag;

    /// This handle, or `POSTBOX_FORKED` in a process other than the one that opened its store.
    /// Checked before the handle is used for anything: see `StoreTag::check_process`.
    fn live(&self) -> Outcome<&Self> {
        self.tag().check_process()?;
        Ok(self)
    }
}

/// A handle argument for a call that reads or writes the store: `POSTBOX_INVALID_ARGUMENT` for
/// NULL, `POSTBOX_FORKED` in a forked child.
pub(crate) fn live<'a, H: Handle>(p: *const H) -> Outcome<&'a H> {
    arg_ref(p, H::ARG)?.live()
}
