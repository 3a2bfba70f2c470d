//! Receiving as a future, a stream and an iterator: [`Queue::receive_async`],
//! [`Queue::stream`], [`Queue::iter`] and [`Queue::try_iter`].
//!
//! The future and the stream work on any executor (tokio, async-std, smol,
//! `futures::executor`, a hand-written one): they depend on no runtime, and their task is
//! woken by the store's own wake-ups, never by a polling timer of the runtime's
//! (docs/design.md § Waiting).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_core::Stream;
use futures_core::future::FusedFuture;
use futures_core::stream::FusedStream;

use crate::engine::AsyncReceive;
use crate::error::Result;
use crate::queue::Queue;
use crate::received::Received;

impl Queue {
    /// Locks the next message, waiting up to `timeout` (forever if `None`) without blocking a
    /// thread: the async [`Queue::receive`]. Resolves to `None` when the time ran out; a
    /// timeout of zero tries once, as [`Queue::try_receive`] does. The timeout runs from this
    /// call, not from the first poll.
    ///
    /// The future needs no particular runtime. Its task is woken when a message may be
    /// receivable: in a single-process store the writer serves the waiting receive in the very
    /// commit that makes a message receivable, and answers it at its deadline; in a
    /// [`multi_process`](crate::StoreBuilder::multi_process) store a commit of this process
    /// or a look at the file when it changes wakes it, and time-driven work, the deadline and,
    /// where the store polls the file, its next poll (see
    /// [`poll_interval`](crate::StoreBuilder::poll_interval)) are kept by one timer thread of
    /// the store. A poll never waits for the disk in a single-process store;
    /// in a multi-process one each attempt is one commit made on the polling thread, as a
    /// blocking receive's attempt is.
    ///
    /// **Cancellation.** Dropping the future before it resolves loses nothing and leaves
    /// nothing locked. A waiting receive is withdrawn. If the store had already locked a
    /// message for it (the drop raced with the delivery), that message goes back to the head
    /// of the queue and the delivery counted for it is uncounted, so the next receiver gets it
    /// with the same `delivery_count` as if this future had never existed. A message the
    /// future resolved with is a [`Received`] like any other: dropping that abandons it and
    /// the delivery stays counted.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// use std::time::Duration;
    /// let q = store.queue("jobs")?;
    /// q.send("work")?;
    /// # let run = |f| futures::executor::block_on(f);
    /// // Inside any async context (tokio, async-std, smol, futures::executor ...):
    /// let got = run(async {
    ///     let msg = q.receive_async(Some(Duration::from_secs(1))).await?.expect("a message");
    ///     assert_eq!(msg.body(), b"work");
    ///     msg.complete()?;
    ///     Ok::<_, postbox::Error>(())
    /// });
    /// got?;
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The future resolves to the errors of [`Queue::receive`]: [`Error::QueueNotFound`] if
    /// the queue was deleted, [`Error::Closed`] when the store is (or gets) closed,
    /// [`Error::Forked`] in a forked child, storage errors.
    ///
    /// [`Error::QueueNotFound`]: crate::Error::QueueNotFound
    /// [`Error::Closed`]: crate::Error::Closed
    /// [`Error::Forked`]: crate::Error::Forked
    pub fn receive_async(&self, timeout: Option<Duration>) -> ReceiveFuture {
        // A timeout too large for an `Instant` is no timeout.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        ReceiveFuture {
            queue: self.clone(),
            wait: AsyncReceive::new(self.queue_ref(), deadline),
        }
    }

    /// An endless [`Stream`] of received messages: each item is the next message, locked for
    /// the caller as [`Queue::receive`] locks it, waited for without limit (see
    /// [`Queue::receive_async`] for how the task is woken and what dropping does). It ends
    /// only after an error, which it yields first: [`Error::Closed`] once the store closes,
    /// [`Error::QueueNotFound`] once the queue is deleted.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// use futures::StreamExt;
    /// let q = store.queue("jobs")?;
    /// q.send_batch(["a", "b"])?;
    /// futures::executor::block_on(async {
    ///     let mut messages = q.stream();
    ///     for want in [b"a", b"b"] {
    ///         let msg = messages.next().await.expect("endless")?;
    ///         assert_eq!(msg.body(), want);
    ///         msg.complete()?;
    ///     }
    ///     Ok::<_, postbox::Error>(())
    /// })?;
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// [`Error::Closed`]: crate::Error::Closed
    /// [`Error::QueueNotFound`]: crate::Error::QueueNotFound
    pub fn stream(&self) -> ReceiveStream {
        ReceiveStream {
            queue: self.clone(),
            next: None,
            done: false,
        }
    }

    /// A blocking iterator of received messages, as crossbeam-channel's `Receiver::iter`:
    /// each step waits without limit for the next message and locks it
    /// ([`Queue::receive_blocking`]). It ends only after an error, which it yields first:
    /// the store closing yields [`Error::Closed`] once, then `None`.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// let q = store.queue("jobs")?;
    /// q.send_batch(["a", "b", "c"])?;
    /// for msg in q.iter().take(3) {
    ///     let msg = msg?;
    ///     msg.complete()?;
    /// }
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// [`Error::Closed`]: crate::Error::Closed
    pub fn iter(&self) -> Iter {
        Iter {
            queue: self.clone(),
            done: false,
        }
    }

    /// An iterator of the messages receivable now, without waiting, as crossbeam-channel's
    /// `Receiver::try_iter`: each step locks the head of the queue ([`Queue::try_receive`]),
    /// and the iteration ends when nothing is receivable, or after yielding an error.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// let q = store.queue("jobs")?;
    /// q.send_batch(["a", "b"])?;
    /// let held: Vec<_> = q.try_iter().collect::<postbox::Result<_>>()?;
    /// assert_eq!(held.len(), 2);
    /// q.complete_batch(held)?;
    /// # Ok::<(), postbox::Error>(())
    /// ```
    pub fn try_iter(&self) -> TryIter {
        TryIter {
            queue: self.clone(),
            done: false,
        }
    }
}

/// The future of [`Queue::receive_async`]: resolves to the next message, locked, or `None`
/// when the timeout ran out. Dropping it loses nothing and leaves nothing locked (see
/// [`Queue::receive_async`]). Polled again after it resolved, it gives `Ok(None)`.
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct ReceiveFuture {
    queue: Queue,
    wait: AsyncReceive,
}

impl Future for ReceiveFuture {
    type Output = Result<Option<Received>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.queue
            .engine
            .poll_receive(&mut this.wait, cx)
            .map(|r| r.map(|got| got.map(|l| this.queue.wrap(l))))
    }
}

impl FusedFuture for ReceiveFuture {
    fn is_terminated(&self) -> bool {
        self.wait.is_done()
    }
}

impl Drop for ReceiveFuture {
    fn drop(&mut self) {
        self.queue.engine.drop_receive(&mut self.wait);
    }
}

/// The stream of [`Queue::stream`].
#[derive(Debug)]
#[must_use = "streams do nothing unless polled"]
pub struct ReceiveStream {
    queue: Queue,
    next: Option<ReceiveFuture>,
    done: bool,
}

impl Stream for ReceiveStream {
    type Item = Result<Received>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            let next = this
                .next
                .get_or_insert_with(|| this.queue.receive_async(None));
            let got = match Pin::new(next).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(got) => got,
            };
            this.next = None;
            match got {
                Ok(Some(msg)) => return Poll::Ready(Some(Ok(msg))),
                // No deadline: not expected, but it is no reason to end.
                Ok(None) => {}
                Err(e) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(e)));
                }
            }
        }
    }
}

impl FusedStream for ReceiveStream {
    fn is_terminated(&self) -> bool {
        self.done
    }
}

/// The blocking iterator of [`Queue::iter`].
#[derive(Debug)]
pub struct Iter {
    queue: Queue,
    done: bool,
}

impl Iterator for Iter {
    type Item = Result<Received>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let got = self.queue.receive_blocking();
        self.done = got.is_err();
        Some(got)
    }
}

impl std::iter::FusedIterator for Iter {}

/// The iterator of [`Queue::try_iter`].
#[derive(Debug)]
pub struct TryIter {
    queue: Queue,
    done: bool,
}

impl Iterator for TryIter {
    type Item = Result<Received>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.queue.try_receive() {
            Ok(Some(msg)) => Some(Ok(msg)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl std::iter::FusedIterator for TryIter {}
