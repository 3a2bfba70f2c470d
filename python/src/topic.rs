//! `postbox.Topic` and `postbox.TopicStats`: publish once, every matching subscription gets a
//! copy.

use postbox::{Filter, Topic};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::convert;
use crate::errors::IntoPy;
use crate::live::Live;
use crate::queue::PyQueue;
use crate::store::queue_options;

/// A topic of the store: a message published to it goes, as a message of its own, to every
/// subscription whose filter it passes, in one commit. Each subscription is a `Queue` (named
/// `<topic>/$subscriptions/<name>`) with its own options and dead-letter queue. In a forked
/// child every call raises `ForkedError` (see `Store`).
#[pyclass(frozen, module = "postbox._postbox", name = "Topic")]
pub struct PyTopic {
    pub t: Topic,
    /// The process that opened it: checked before every call into the core.
    opened_by: u32,
}

impl Live for PyTopic {
    type Inner = Topic;

    fn opened_by(&self) -> u32 {
        self.opened_by
    }

    fn inner(&self) -> &Topic {
        &self.t
    }
}

impl PyTopic {
    pub fn new(t: Topic) -> PyTopic {
        PyTopic {
            t,
            opened_by: postbox::binding::process_id(),
        }
    }
}

#[pymethods]
impl PyTopic {
    /// The topic's name.
    #[getter]
    fn name(&self) -> &str {
        self.t.name()
    }

    /// Opens subscription `name` (no `/`), creating it if missing, and returns its queue.
    ///
    /// The filter keywords select the messages it receives: every one given must equal the
    /// message's (`properties`: each user property present with exactly that value). With no
    /// filter keyword it receives every message. An existing subscription takes the new filter
    /// and keeps its messages. The other keywords are queue options, as `Store.queue` takes
    /// them (only those given change an existing subscription). A subscription that requires
    /// sessions (`requires_session=True`, or `forward_to` a queue that does) takes only
    /// messages with a `group`: one without skips it and still reaches the others.
    #[pyo3(signature = (name, *, label=None, correlation_id=None, content_type=None,
        reply_to=None, group=None, properties=None, **options))]
    #[allow(clippy::too_many_arguments)]
    fn subscribe(
        &self,
        py: Python<'_>,
        name: &str,
        label: Option<String>,
        correlation_id: Option<String>,
        content_type: Option<String>,
        reply_to: Option<String>,
        group: Option<String>,
        properties: Option<&Bound<'_, PyAny>>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyQueue> {
        let t = self.live()?;
        let mut filter = Filter::All;
        if let Some(v) = label {
            filter = filter.label(v);
        }
        if let Some(v) = correlation_id {
            filter = filter.correlation_id(v);
        }
        if let Some(v) = content_type {
            filter = filter.content_type(v);
        }
        if let Some(v) = reply_to {
            filter = filter.reply_to(v);
        }
        if let Some(v) = group {
            filter = filter.group(v);
        }
        if let Some(p) = properties {
            for (k, v) in convert::properties(p)? {
                filter = filter.property(k, v);
            }
        }
        let q = match options.filter(|o| !o.is_empty()) {
            None => py.detach(|| t.subscribe(name, filter)).py_err()?,
            Some(o) => {
                let o = queue_options(Some(o), "subscribe")?;
                py.detach(|| t.subscribe_with(name, filter, o)).py_err()?
            }
        };
        Ok(PyQueue::new(q))
    }

    /// The queue of existing subscription `name`; raises `QueueNotFoundError` when there is
    /// none.
    fn subscription(&self, py: Python<'_>, name: &str) -> PyResult<PyQueue> {
        let t = self.live()?;
        let q = py.detach(|| t.subscription(name)).py_err()?;
        Ok(PyQueue::new(q))
    }

    /// Removes subscription `name` with its queue, dead-letter queue and their messages;
    /// returns whether it existed.
    fn unsubscribe(&self, py: Python<'_>, name: &str) -> PyResult<bool> {
        let t = self.live()?;
        py.detach(|| t.unsubscribe(name)).py_err()
    }

    /// The names of the subscriptions (without the topic prefix), in name order.
    fn subscriptions(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let t = self.live()?;
        py.detach(|| t.subscriptions()).py_err()
    }

    /// Publishes one message (same keywords as `Queue.send`): every subscription whose filter
    /// it passes gets a copy, in one commit. Returns how many did; 0 counts as unmatched in
    /// `stats()`. A full subscription refuses the whole publish. A message without a `group`
    /// skips the subscriptions that require sessions.
    #[pyo3(signature = (body, **props))]
    fn publish(
        &self,
        py: Python<'_>,
        body: &Bound<'_, PyAny>,
        props: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<usize> {
        let t = self.live()?;
        let m = convert::message(body, props, "publish")?;
        py.detach(|| t.publish(m)).py_err()
    }

    /// Exact counts: published, unmatched, subscriptions.
    fn stats(&self, py: Python<'_>) -> PyResult<PyTopicStats> {
        let t = self.live()?;
        let s = py.detach(|| t.stats()).py_err()?;
        Ok(PyTopicStats {
            published: s.published,
            unmatched: s.unmatched,
            subscriptions: s.subscriptions,
        })
    }

    fn __repr__(&self) -> String {
        format!("<postbox.Topic {:?}>", self.t.name())
    }
}

/// Exact counts of a topic.
#[pyclass(frozen, get_all, eq, module = "postbox._postbox", name = "TopicStats")]
#[derive(PartialEq, Eq)]
pub struct PyTopicStats {
    /// Messages published (committed publishes only).
    published: u64,
    /// Published messages that matched no subscription (delivered nowhere).
    unmatched: u64,
    /// Subscriptions now.
    subscriptions: u64,
}

#[pymethods]
impl PyTopicStats {
    fn _asdict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("published", self.published)?;
        d.set_item("unmatched", self.unmatched)?;
        d.set_item("subscriptions", self.subscriptions)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "TopicStats(published={}, unmatched={}, subscriptions={})",
            self.published, self.unmatched, self.subscriptions
        )
    }
}
