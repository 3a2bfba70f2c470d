//! The identity of a message, a leaf below both messages and errors.

use std::fmt;

/// The store-wide identity of a message.
///
/// Ids are assigned at send time, strictly increasing in commit order across every queue of a
/// store (and across processes sharing it), and never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MessageId(pub u64);

impl MessageId {
    /// The raw number, for logs and foreign APIs.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
