//! A request in two halves — send it, then wait for its reply — so that a binding can wait in
//! short slices and check for signals between them (Ctrl-C in Python), which one blocking
//! [`Queue::request`] call cannot offer.

use std::time::Duration;

use crate::error::Result;
use crate::message::{Envelope, Message};
use crate::queue::Queue;
use crate::received::SettleError;

/// A request sent by [`send_request`], whose reply has not been taken yet.
#[derive(Debug)]
pub struct PendingRequest {
    replies: Queue,
    correlation_id: String,
    /// The reply, if it came while the request was being sent.
    early: Option<Envelope>,
}

/// Sends `message` as [`Queue::request`] does (`reply_to` set to the store handle's reply queue,
/// a fresh correlation id unless the message has one), without waiting for the reply.
///
/// # Errors
///
/// As [`Queue::request`].
pub fn send_request(queue: &Queue, mut message: Message) -> Result<PendingRequest> {
    // Set here, in `Queue::request`'s format, so that the wait below can select on it.
    if message.props.correlation_id.is_none() {
        message.props.correlation_id = Some(queue.engine.new_correlation_id());
    }
    let correlation_id = message.props.correlation_id.clone().unwrap_or_default();
    let early = queue.request(message, Duration::ZERO)?;
    let (_, name) = queue.engine.reply_queue()?;
    Ok(PendingRequest {
        replies: Queue::open_existing(&queue.engine, &name)?,
        correlation_id,
        early,
    })
}

impl PendingRequest {
    /// The correlation id the reply will carry.
    pub fn correlation_id(&self) -> &str {
        &self.correlation_id
    }

    /// Waits up to `timeout` for the reply; receives, completes and returns it. `None` when it
    /// did not come in time (call again to keep waiting).
    ///
    /// # Errors
    ///
    /// As [`Queue::receive_by_correlation_id`] and [`Received::complete`](crate::Received::complete).
    pub fn receive(&mut self, timeout: Duration) -> Result<Option<Envelope>> {
        if let Some(env) = self.early.take() {
            return Ok(Some(env));
        }
        match self
            .replies
            .receive_by_correlation_id(&self.correlation_id, timeout)?
        {
            None => Ok(None),
            Some(r) => {
                let env = r.envelope().clone();
                r.complete().map_err(SettleError::into_error)?;
                Ok(Some(env))
            }
        }
    }
}
