//! Topics: publish once, deliver to every matching subscription.

use std::sync::Arc;

use crate::engine::{Engine, QueueEntry, QueueRecord, QueueRef, subscription_name};
use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::message::Message;
use crate::options::QueueOptions;
use crate::queue::Queue;

/// Exact counts of a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TopicStats {
    /// Messages published to the topic.
    pub published: u64,
    /// Published messages that matched no subscription (delivered nowhere).
    pub unmatched: u64,
    /// Subscriptions now.
    pub subscriptions: u64,
}

/// A topic: a message published to it goes, as a message of its own, to every subscription
/// whose [`Filter`] it passes, in one commit. Each subscription is a [`Queue`] with its own
/// options and dead-letter queue (named `<topic>/$subscriptions/<name>`). Subscriptions can be
/// added and removed while publishers run: each publish sees the subscriptions of its commit.
/// Cheap to clone, `Send + Sync`.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
/// use postbox::{Filter, Message};
/// let orders = store.topic("orders")?;
/// let audit = orders.subscribe("audit", Filter::All)?;
/// let eu = orders.subscribe("eu", Filter::correlation().property("region", "eu"))?;
/// assert_eq!(orders.publish(Message::new("o-1").property("region", "eu"))?, 2);
/// assert_eq!(orders.publish(Message::new("o-2").property("region", "us"))?, 1);
/// assert_eq!((audit.len()?, eu.len()?), (2, 1));
/// # Ok::<(), postbox::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Topic {
    pub(crate) engine: Arc<Engine>,
    pub(crate) name: Arc<str>,
    pub(crate) id: u32,
}

impl Topic {
    pub(crate) fn new(engine: Arc<Engine>, name: &str, rec: &QueueRecord) -> Topic {
        Topic {
            engine,
            name: name.into(),
            id: rec.id,
        }
    }

    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Opens subscription `name` with `filter`, creating it if missing; an existing one takes
    /// the new filter and keeps its messages and options. Its queue is named
    /// `<topic>/$subscriptions/<name>`, and that whole name is a queue name: at most 255 bytes
    /// of UTF-8 without control characters.
    ///
    /// # Errors
    ///
    /// [`Error::QueueNotFound`] if the topic was deleted; [`Error::InvalidArgument`] for an
    /// empty name or one with a `/`, a queue name over 255 bytes or with control characters,
    /// or a filter field out of bounds; storage errors.
    pub fn subscribe(&self, name: &str, filter: Filter) -> Result<Queue> {
        self.subscribe_inner(name, filter, None)
    }

    /// Like [`Topic::subscribe`], and the subscription queue takes the options `options`
    /// mentions (as [`Store::queue_with`](crate::Store::queue_with)).
    ///
    /// A subscription that requires sessions (`requires_session(true)`, or forwarding to a
    /// queue that does) takes only published messages with a group: a message without one
    /// skips it, as if its filter refused it, and still reaches the other subscriptions (it
    /// could not be delivered there, and failing the publish would fail it for all).
    ///
    /// # Errors
    ///
    /// As [`Topic::subscribe`], plus [`Error::InvalidArgument`] for invalid options.
    pub fn subscribe_with(
        &self,
        name: &str,
        filter: Filter,
        options: QueueOptions,
    ) -> Result<Queue> {
        self.subscribe_inner(name, filter, Some(options))
    }

    fn subscribe_inner(
        &self,
        name: &str,
        filter: Filter,
        options: Option<QueueOptions>,
    ) -> Result<Queue> {
        let (t, tname, sub) = (self.id, self.name.clone(), name.to_owned());
        let QueueEntry {
            name: qname,
            record: rec,
        } = self.engine.call(move |b| {
            b.subscribe(QueueRef::new(t, &tname), &sub, &filter, options.as_ref())
        })?;
        Ok(Queue::new(self.engine.clone(), &qname, rec))
    }

    /// Opens existing subscription `name`.
    ///
    /// # Errors
    ///
    /// [`Error::QueueNotFound`] when the topic has no such subscription; storage errors.
    pub fn subscription(&self, name: &str) -> Result<Queue> {
        let qname = subscription_name(&self.name, name);
        let (t, tname) = (self.id, self.name.clone());
        let subs = self
            .engine
            .call(move |b| b.subscriptions(QueueRef::new(t, &tname)))?;
        match subs.into_iter().find(|(_, n, _)| *n == qname) {
            Some(_) => Queue::open_existing(&self.engine, &qname),
            None => Err(Error::QueueNotFound(qname)),
        }
    }

    /// Removes subscription `name`, its queue and dead-letter queue with their messages.
    /// Returns whether it existed.
    ///
    /// # Errors
    ///
    /// [`Error::QueueInUse`](crate::Error::QueueInUse) when something names the subscription's
    /// queue (see [`Store::delete_queue`](crate::Store::delete_queue)); storage errors.
    pub fn unsubscribe(&self, name: &str) -> Result<bool> {
        let qname = subscription_name(&self.name, name);
        let (t, tname) = (self.id, self.name.clone());
        self.engine.call(move |b| {
            let subs = b.subscriptions(QueueRef::new(t, &tname))?;
            if !subs.iter().any(|(_, n, _)| *n == qname) {
                return Ok(false);
            }
            b.delete_queue(&qname)
        })
    }

    /// The names of the topic's subscriptions (without the topic prefix), in name order.
    ///
    /// # Errors
    ///
    /// [`Error::QueueNotFound`] if the topic was deleted; storage errors.
    pub fn subscriptions(&self) -> Result<Vec<String>> {
        let (t, tname) = (self.id, self.name.clone());
        let prefix = subscription_name(&self.name, "");
        let subs = self
            .engine
            .call(move |b| b.subscriptions(QueueRef::new(t, &tname)))?;
        Ok(subs
            .into_iter()
            .filter_map(|(_, n, _)| n.strip_prefix(prefix.as_str()).map(str::to_owned))
            .collect())
    }

    /// Publishes `message`: every subscription whose filter it passes gets a copy, all in one
    /// commit. Returns how many did (0: counted as unmatched in [`Topic::stats`]). A message
    /// without a group skips the subscriptions that require sessions
    /// ([`Topic::subscribe_with`]).
    ///
    /// # Errors
    ///
    /// [`Error::QueueNotFound`] if the topic was deleted; the errors of
    /// [`Queue::send`] for any matching subscription (a full one refuses the whole publish,
    /// which then delivers nowhere).
    pub fn publish(&self, message: impl Into<Message>) -> Result<usize> {
        Ok(self
            .publish_batch([message.into()])?
            .pop()
            .unwrap_or_default())
    }

    /// Publishes several messages in one commit, all or none; returns, per message, how many
    /// subscriptions took it.
    ///
    /// # Errors
    ///
    /// As [`Topic::publish`].
    pub fn publish_batch<I>(&self, messages: I) -> Result<Vec<usize>>
    where
        I: IntoIterator,
        I::Item: Into<Message>,
    {
        let msgs: Vec<Message> = messages.into_iter().map(Into::into).collect();
        for m in &msgs {
            m.validate()?;
        }
        let (t, tname) = (self.id, self.name.clone());
        self.engine
            .call(move |b| b.publish(QueueRef::new(t, &tname), msgs))
    }

    /// Exact counts: published, unmatched, subscriptions.
    ///
    /// # Errors
    ///
    /// [`Error::QueueNotFound`] if the topic was deleted; storage errors.
    pub fn stats(&self) -> Result<TopicStats> {
        let (t, tname) = (self.id, self.name.clone());
        self.engine.call(move |b| {
            let subscriptions = b.subscriptions(QueueRef::new(t, &tname))?.len() as u64;
            let c = b.topic_counts(t)?;
            Ok(TopicStats {
                published: c.published,
                unmatched: c.unmatched,
                subscriptions,
            })
        })
    }
}
