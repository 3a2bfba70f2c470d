//! Typed queues: bodies encoded from and decoded to a Rust type with serde, in the typed-body
//! envelope (`typed_body.rs`, docs/typed-bodies.md).

use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::message::REASON_DECODE_FAILED;
use crate::message::{Envelope, Message, MessageId};
use crate::processor::{Processor, ProcessorBuilder};
use crate::queue::Queue;
use crate::received::{Received, SettleError};
use crate::tx::Transaction;
use crate::typed_body::{Bincode, BodyCodec, Json, decode_typed_body};

impl Queue {
    /// A typed view of this queue: values of `T` are sent and received, encoded with bincode 2
    /// in the typed-body envelope (codec 2, readable by Rust only; see [`Queue::typed_json`]
    /// for bodies that C and Python programs read too). The queue stays an ordinary queue
    /// underneath.
    ///
    /// ```
    /// #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    /// struct Resize { image: String, width: u32 }
    ///
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// let jobs = store.queue("resize")?.typed::<Resize>();
    /// jobs.send(&Resize { image: "a.png".into(), width: 64 })?;
    /// let job = jobs.receive(std::time::Duration::from_secs(1))?.unwrap();
    /// assert_eq!(job.value().width, 64);
    /// job.complete()?;
    /// # Ok::<(), postbox::Error>(())
    /// ```
    pub fn typed<T: Serialize + DeserializeOwned>(&self) -> TypedQueue<T> {
        self.typed_with::<T, Bincode>()
    }

    /// A typed view whose sends are JSON in the typed-body envelope (codec 1), which the C
    /// API (`postbox_message_typed_body`) and Python (`postbox.TypedQueue`) read: a Rust
    /// producer and a consumer in another language agree on the bytes. Receives decode JSON
    /// and bincode bodies alike.
    ///
    /// ```
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Order { id: u64, item: String }
    ///
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// let orders = store.queue("orders")?.typed_json::<Order>();
    /// orders.send(&Order { id: 42, item: "tea".into() })?;
    /// let raw = orders.queue().peek()?.unwrap();
    /// assert_eq!(raw.body(), b"\xFFPBT\x01\x01{\"id\":42,\"item\":\"tea\"}");
    /// # Ok::<(), postbox::Error>(())
    /// ```
    pub fn typed_json<T: Serialize + DeserializeOwned>(&self) -> TypedQueue<T, Json> {
        self.typed_with::<T, Json>()
    }

    /// A typed view whose sends use codec `C` ([`Bincode`] or [`Json`]).
    pub fn typed_with<T: Serialize + DeserializeOwned, C: BodyCodec>(&self) -> TypedQueue<T, C> {
        TypedQueue {
            queue: self.clone(),
            _type: PhantomData,
        }
    }
}

/// A queue whose bodies are values of `T`, sent with codec `C` (see [`Queue::typed`] and
/// [`Queue::typed_json`]). Receives decode any body Rust can read, whatever `C` is: JSON and
/// bincode envelopes, and bincode bodies written before the envelope existed. Cheap to clone,
/// `Send + Sync` whatever `T` is.
pub struct TypedQueue<T, C = Bincode> {
    queue: Queue,
    _type: PhantomData<fn() -> (T, C)>,
}

impl<T, C> Clone for TypedQueue<T, C> {
    fn clone(&self) -> Self {
        TypedQueue {
            queue: self.queue.clone(),
            _type: PhantomData,
        }
    }
}

impl<T, C: BodyCodec> fmt::Debug for TypedQueue<T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedQueue")
            .field("queue", &self.queue.name())
            .field("type", &std::any::type_name::<T>())
            .field("codec", &C::ID)
            .finish()
    }
}

impl<T: Serialize + DeserializeOwned, C: BodyCodec> TypedQueue<T, C> {
    /// The untyped queue underneath.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// A message carrying `value`, to add properties (label, priority, delay…) before sending
    /// it with [`Queue::send`] or [`Transaction::send`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// let q = store.queue("numbers")?.typed::<u64>();
    /// q.queue().send(q.message(&7)?.priority(6))?;
    /// assert_eq!(*q.try_receive()?.unwrap().value(), 7);
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Codec`] when `value` cannot be encoded: a serializer error from a custom
    /// `Serialize`, or for JSON a map whose keys are neither strings nor numbers.
    pub fn message(&self, value: &T) -> Result<Message> {
        Ok(Message::new(C::encode_body(value)?))
    }

    /// Sends `value`; returns its id once it is durable.
    ///
    /// # Errors
    ///
    /// [`Error::Codec`] when `value` cannot be encoded; otherwise as [`Queue::send`].
    pub fn send(&self, value: &T) -> Result<MessageId> {
        self.queue.send(self.message(value)?)
    }

    /// Sends several values atomically, in one commit.
    ///
    /// # Errors
    ///
    /// [`Error::Codec`] when a value cannot be encoded (nothing is sent); otherwise as
    /// [`Queue::send_batch`].
    pub fn send_batch<'a, I>(&self, values: I) -> Result<Vec<MessageId>>
    where
        I: IntoIterator<Item = &'a T>,
        T: 'a,
    {
        let msgs = values
            .into_iter()
            .map(|v| self.message(v))
            .collect::<Result<Vec<_>>>()?;
        self.queue.send_batch(msgs)
    }

    /// Sends `value` when `tx` commits; returns the id it will have.
    ///
    /// # Errors
    ///
    /// [`Error::Codec`] when `value` cannot be encoded; otherwise as [`Transaction::send`].
    pub fn send_in(&self, tx: &mut Transaction, value: &T) -> Result<MessageId> {
        tx.send(&self.queue, self.message(value)?)
    }

    /// Locks and decodes the head message without waiting.
    ///
    /// # Errors
    ///
    /// As [`TypedQueue::receive`].
    pub fn try_receive(&self) -> Result<Option<TypedReceived<T>>> {
        self.queue.try_receive()?.map(decode_received).transpose()
    }

    /// Locks the next message, waiting up to `timeout`, and decodes its body.
    ///
    /// Bodies are decoded as [`decode_typed_body`](crate::decode_typed_body) says, whatever
    /// codec this view sends with. A body that does not decode as `T` never will, so instead of returning to the queue for
    /// futile retries the message is moved to the dead-letter queue with reason `DecodeFailed`
    /// and the codec error as description, and this call fails with [`Error::Codec`].
    ///
    /// # Errors
    ///
    /// [`Error::Codec`] for an undecodable body (see above); otherwise as [`Queue::receive`].
    pub fn receive(&self, timeout: Duration) -> Result<Option<TypedReceived<T>>> {
        self.queue
            .receive(timeout)?
            .map(decode_received)
            .transpose()
    }

    /// A [`Processor`] builder for this queue; start it with
    /// [`ProcessorBuilder::start_typed`] to get decoded values.
    pub fn processor(&self) -> ProcessorBuilder {
        Processor::builder(&self.queue)
    }
}

fn decode_received<T: DeserializeOwned>(received: Received) -> Result<TypedReceived<T>> {
    match decode_typed_body(received.body()) {
        Ok(value) => Ok(TypedReceived { received, value }),
        Err(e) => {
            let text = e.to_string();
            match received
                .dead_letter(REASON_DECODE_FAILED, &text)
                .map_err(Error::from)
            {
                Ok(()) | Err(Error::LockLost(_)) => Err(e),
                Err(other) => Err(Error::Codec(format!(
                    "{text}; moving the message to the dead-letter queue failed too: {other}"
                ))),
            }
        }
    }
}

/// A received message of a [`TypedQueue`] with its decoded value, locked until settled like a
/// [`Received`] (dropping it abandons it). Dereferences to the [`Envelope`].
#[derive(Debug)]
pub struct TypedReceived<T> {
    received: Received,
    value: T,
}

impl<T> Deref for TypedReceived<T> {
    type Target = Envelope;
    fn deref(&self) -> &Envelope {
        &self.received
    }
}

impl<T> TypedReceived<T> {
    /// The decoded body.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The value and the locked message, to settle separately.
    pub fn into_parts(self) -> (T, Received) {
        (self.value, self.received)
    }

    /// Removes the message for good.
    ///
    /// # Errors
    ///
    /// As [`Received::complete`].
    pub fn complete(self) -> Result<(), SettleError> {
        self.received.complete()
    }

    /// Returns the message to the queue.
    ///
    /// # Errors
    ///
    /// As [`Received::abandon`].
    pub fn abandon(self) -> Result<(), SettleError> {
        self.received.abandon()
    }

    /// Returns the message to the queue, receivable again after `delay`.
    ///
    /// # Errors
    ///
    /// As [`Received::abandon_after`].
    pub fn abandon_after(self, delay: Duration) -> Result<(), SettleError> {
        self.received.abandon_after(delay)
    }

    /// Moves the message to the dead-letter queue.
    ///
    /// # Errors
    ///
    /// As [`Received::dead_letter`].
    pub fn dead_letter(self, reason: &str, description: &str) -> Result<(), SettleError> {
        self.received.dead_letter(reason, description)
    }

    /// Extends the lock.
    ///
    /// # Errors
    ///
    /// As [`Received::renew_lock`].
    pub fn renew_lock(&mut self) -> Result<SystemTime> {
        self.received.renew_lock()
    }
}
