//! The traffic a batch counts: the writer adds it to the store's totals once the batch commits.

/// Sends and completions of one queue, counted per batch and added once the batch commits.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Traffic {
    pub sent: u64,
    pub completed: u64,
}
