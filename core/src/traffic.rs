//! How many messages went through a queue: the counters behind throughput rates.

use crate::queue::Queue;

/// Messages sent to and completed from one queue by this process since it opened the store
/// (see [`Queue::traffic`]). Two readings taken a second apart give sends and completions per
/// second; a store reopened starts again from zero, as a Prometheus counter may.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueTraffic {
    /// Messages stored in the queue: sends, forwards and topic copies, and dead letters
    /// arriving in a dead-letter queue are not counted (they move, they are not sent).
    pub sent: u64,
    /// Messages completed from the queue (a completion kept in a journal counts too).
    pub completed: u64,
}

impl Queue {
    /// This process's sends to and completions from this queue since the store was opened,
    /// counted when their commit succeeds. In a store several processes share, each counts its
    /// own; an application serving the admin endpoint (the only opener of a single-process
    /// store) sees all of it. Reads memory only: never fails, never blocks on the store.
    pub fn traffic(&self) -> QueueTraffic {
        let (sent, completed) = self.engine.traffic(self.id);
        QueueTraffic { sent, completed }
    }
}
