//! A request in two halves — send it, then wait for its reply — so that a binding can wait in
//! short slices and check for signals between them (Ctrl-C in Python), which one blocking
//! [`Queue::request`] call cannot offer.

use std::time::{Duration, Instant};

use crate::error::Result;
use crate::message::{Envelope, Message};
use crate::queue::{Queue, SentRequest};

/// A request sent by [`send_request`], whose reply has not been taken yet. While it lives, its
/// reply is awaited: dropping it gives the request up, and a reply that comes afterwards is
/// dropped as late ([`Queue::request`]).
#[derive(Debug)]
pub struct PendingRequest {
    queue: Queue,
    sent: SentRequest,
}

/// Sends `message` as [`Queue::request`] does (`reply_to` set to the store handle's reply queue,
/// a fresh correlation id unless the message has one), without waiting for the reply.
///
/// # Errors
///
/// As [`Queue::request`].
pub fn send_request(queue: &Queue, message: Message) -> Result<PendingRequest> {
    Ok(PendingRequest {
        sent: queue.send_request(message)?,
        queue: queue.clone(),
    })
}

impl PendingRequest {
    /// The correlation id the reply will carry.
    pub fn correlation_id(&self) -> &str {
        self.sent.correlation_id()
    }

    /// Waits up to `timeout` for the reply; receives, completes and returns it. `None` when it
    /// did not come in time (call again to keep waiting).
    ///
    /// # Errors
    ///
    /// As [`Queue::request`].
    pub fn receive(&mut self, timeout: Duration) -> Result<Option<Envelope>> {
        self.queue
            .receive_reply(&self.sent, Instant::now().checked_add(timeout))
    }
}
