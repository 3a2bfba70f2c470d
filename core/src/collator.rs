//! Collators: reassemble a series that arrives out of order into send order.

use std::sync::Arc;

use crate::engine::{Engine, QueueRecord, QueueRef};
use crate::error::Result;
use crate::message::{Message, MessageId};
use crate::queue::Queue;

/// What a collator did with one message sent through it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Collated {
    /// The ids in the destination queue, in series order, of the messages this send released:
    /// this message's first when it was next in line, then those held behind it; empty while a
    /// gap remains before it (a held message gets its id when it is released, so that ids and
    /// delivery order follow the series).
    pub released: Vec<MessageId>,
    /// The series already had a message with this sequence number; nothing was stored, so a
    /// producer may resend after a crash without duplicating anything.
    pub duplicate: bool,
}

/// A series a collator has not completed: the first number it still waits for, and what it
/// holds beyond that gap.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SeriesGap {
    /// The series (the messages' `group`).
    pub series: String,
    /// The next sequence number to release: the first missing one.
    pub next: u64,
    /// The series' length, once a message declared it or was marked last.
    pub length: Option<u64>,
    /// The sequence numbers held, waiting for the gap to close.
    pub held: Vec<u64>,
}

/// A collator: messages of a series (their `group`) numbered by `sequence` from 1, sent by any
/// number of producers in any order, are released to the destination queue in sequence order,
/// each as soon as all before it have arrived — 1, 2, 3 at once, then 4, 5, 6 when 4 arrives.
/// Holding and releasing happen in the sending commit, so a crash loses or duplicates nothing,
/// and resending a number already seen is recognised ([`Collated::duplicate`]).
///
/// A series ends when a message declares its length ([`Message::series_length`]) or marks
/// itself last ([`Message::last_in_series`]); [`Collator::incomplete`] lists series with gaps.
/// A completed series is remembered (a late resend is a duplicate) until
/// [`Collator::forget`] retires it.
/// Released messages are not refused by the destination's quotas (they were accepted when
/// sent); their size is checked against its `max_message_size` when sent.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
/// use postbox::Message;
/// let tiles = store.queue("tiles")?;
/// let c = store.collator("tiles-in", &tiles)?;
/// for n in [2, 3, 1] {
///     c.send(Message::new(format!("tile {n}")).group("img-7").sequence(n))?;
/// }
/// assert_eq!(tiles.len()?, 3); // released 1, 2, 3 when 1 arrived
/// # Ok::<(), postbox::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Collator {
    engine: Arc<Engine>,
    name: Arc<str>,
    id: u32,
    destination: Queue,
}

impl Collator {
    pub(crate) fn new(
        engine: Arc<Engine>,
        name: &str,
        rec: &QueueRecord,
        destination: Queue,
    ) -> Collator {
        Collator {
            engine,
            name: name.into(),
            id: rec.id,
            destination,
        }
    }

    /// The collator's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The queue it releases into.
    pub fn destination(&self) -> &Queue {
        &self.destination
    }

    /// Sends one message of a series: held, then released with everything contiguous.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a message without a
    /// group or sequence number, a sequence number of 0 or beyond the series' declared length,
    /// or a length that contradicts the series (another declared length, or fewer messages
    /// than a number already sent) — a resend of a number the series has included: it is not
    /// the same message, so it is refused rather than taken as a duplicate; the errors of
    /// [`Queue::send`]; [`Error::QueueNotFound`](crate::Error::QueueNotFound) naming the
    /// destination when it no longer exists (only in a store an older postbox wrote: nothing
    /// deletes a queue a collator names now), with nothing stored.
    pub fn send(&self, message: impl Into<Message>) -> Result<Collated> {
        Ok(self.send_batch([message.into()])?.pop().unwrap_or_default())
    }

    /// Sends several messages in one commit, all or none.
    ///
    /// # Errors
    ///
    /// As [`Collator::send`].
    pub fn send_batch<I>(&self, messages: I) -> Result<Vec<Collated>>
    where
        I: IntoIterator,
        I::Item: Into<Message>,
    {
        let msgs: Vec<Message> = messages.into_iter().map(Into::into).collect();
        for m in &msgs {
            m.validate()?;
        }
        let (q, name, dest) = (self.id, self.name.clone(), self.destination.name.clone());
        let got = self
            .engine
            .call(move |b| b.collate(QueueRef::new(q, &name), &dest, msgs))?;
        Ok(got
            .into_iter()
            .map(|c| Collated {
                released: c.released.into_iter().map(MessageId).collect(),
                duplicate: c.duplicate,
            })
            .collect())
    }

    /// How many messages the collator holds now (exact, O(1)).
    ///
    /// # Errors
    ///
    /// [`Error::QueueNotFound`](crate::Error::QueueNotFound) if the collator was deleted.
    pub fn held(&self) -> Result<u64> {
        let (q, name) = (self.id, self.name.clone());
        self.engine.call(move |b| {
            b.require_collator(QueueRef::new(q, &name))?;
            Ok(b.counters(q)?.held)
        })
    }

    /// Forgets a series: its progress goes, so that its name starts a new series from 1
    /// (after `forget("po-1")`, `po-1` #1 is a new message, no longer a duplicate). Returns
    /// whether the collator knew the series.
    ///
    /// A collator keeps each series' progress after the series completes, so that a late
    /// resend of one of its numbers is still recognised as a duplicate; nothing retires it on
    /// its own. Forget a series once no resend of it can come any more, or give each run of
    /// work a series name of its own (an order number, a date). Deleting the collator forgets
    /// every series.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// use postbox::Message;
    /// let done = store.queue("done")?;
    /// let c = store.collator("parts", &done)?;
    /// let part = |n| Message::new("part").group("po-1").sequence(n).series_length(1);
    /// assert!(!c.send(part(1))?.duplicate);
    /// assert!(c.send(part(1))?.duplicate); // the series is complete and remembered
    /// assert!(c.forget("po-1")?);
    /// assert!(!c.send(part(1))?.duplicate); // a new series of the same name
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) while the collator holds
    /// messages of the series (waiting for a gap to close: forgetting would lose them);
    /// [`Error::QueueNotFound`](crate::Error::QueueNotFound) if the collator was deleted;
    /// storage errors.
    pub fn forget(&self, series: &str) -> Result<bool> {
        let (q, name, series) = (self.id, self.name.clone(), series.to_owned());
        self.engine
            .call(move |b| b.forget_series(QueueRef::new(q, &name), &series))
    }

    /// The series not yet complete, with their gaps.
    ///
    /// # Errors
    ///
    /// [`Error::QueueNotFound`](crate::Error::QueueNotFound) if the collator was deleted.
    pub fn incomplete(&self) -> Result<Vec<SeriesGap>> {
        let (q, name) = (self.id, self.name.clone());
        let rows = self
            .engine
            .call(move |b| b.incomplete_series(QueueRef::new(q, &name)))?;
        Ok(rows
            .into_iter()
            .map(|(series, s, held)| SeriesGap {
                series,
                next: s.next,
                length: (s.length != 0).then_some(s.length),
                held,
            })
            .collect())
    }
}
