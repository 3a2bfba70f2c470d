//! What the C and Python bindings share, written once so that both behave alike: the state of
//! a message handle and its settles ([`held`]), flat send options ([`send`]), the adapter
//! between a processor delivery and a foreign handler ([`lent`]), a request sent and waited
//! for in two steps ([`request`]), and waits another thread can end ([`interrupt`]: Python's
//! Ctrl-C).
//!
//! Hidden from the documentation: it serves the bindings in this repository and may change
//! with them. Rust programs use [`Received`](crate::Received) and
//! [`ProcessorBuilder`](crate::ProcessorBuilder) directly.

pub mod held;
pub mod interrupt;
pub mod lent;
pub mod request;
pub mod send;

pub use held::{HeldMessage, Hold, finish_lent};
pub use interrupt::{Interrupt, interrupted, interruptible};
pub use lent::{LentDelivery, retry_policy, take_transaction};
pub use request::{PendingRequest, send_request};
pub use send::{FlatSend, FlatSendError};

pub use crate::error::{Language, language, set_language};

/// This process's id, as the fork guards compare it: cached, and cleared in a `fork()` child,
/// where asking costs a system call (Unix). Bindings record it as a handle's opener.
pub fn process_id() -> u32 {
    crate::os::process::id()
}

/// Fails with [`Error::Forked`](crate::Error::Forked) in a process other than `opened_by`.
///
/// Bindings check this before taking any mutex of theirs: one that a parent thread held at
/// `fork()` stays locked in the child forever.
pub fn check_process(opened_by: u32) -> crate::Result<()> {
    let current = crate::os::process::id();
    if current == opened_by {
        Ok(())
    } else {
        Err(crate::Error::Forked { opened_by, current })
    }
}
