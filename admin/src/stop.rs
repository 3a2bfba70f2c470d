//! The stop token a long command checks between two commits.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Asks running commands to stop between two commits: what was committed stays, nothing is
/// half-done, and the command ends with [`fail::INTERRUPTED`](crate::fail::INTERRUPTED).
///
/// Cheap to clone; every clone is the same token. The `postbox` binary sets its token on the
/// first Ctrl-C; a library caller sets it from wherever it decides to stop.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    /// A token not yet set.
    pub fn new() -> Stop {
        Stop::default()
    }

    /// Sets the token; returns whether it was set already (a second Ctrl-C).
    pub fn stop(&self) -> bool {
        self.0.swap(true, Ordering::SeqCst)
    }

    /// Whether the token is set.
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}
