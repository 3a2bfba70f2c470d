//! What a processor was configured with: the builder's settings, read by its threads.
//!
//! Apart from the builder so that the shared state can hold it without importing the code
//! that starts the threads.

use std::time::Duration;

use super::{Autoscale, EventCallback, RetryPolicy, ScaleCallback};

#[derive(Clone)]
pub(super) struct Config {
    pub(super) workers: usize,
    pub(super) retry: RetryPolicy,
    pub(super) handler_timeout: Option<Duration>,
    pub(super) max_auto_renew: Duration,
    pub(super) prefetch: usize,
    pub(super) combined_commit: bool,
    pub(super) autoscale: Option<Autoscale>,
    pub(super) drop_timeout: Duration,
    pub(super) on_scale: Option<ScaleCallback>,
    pub(super) on_event: Option<EventCallback>,
    /// Stack size of worker threads; `None` for the Rust default.
    pub(super) stack_size: Option<usize>,
    /// Session mode: each worker holds one session (group) at a time.
    pub(super) sessions: bool,
}
