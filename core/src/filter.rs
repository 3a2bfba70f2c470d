//! Subscription filters: which published messages a topic subscription receives. Plain data
//! and one `matches` rule, below the engine (which stores filters in subscription records).

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::message::{MAX_PROPERTY_KEY_LEN, MAX_TEXT_PROPERTY_LEN, Message, PropertyValue};

/// Which messages published to a topic a subscription receives.
///
/// ```
/// use postbox::Filter;
/// let all = Filter::All;
/// let eu_orders = Filter::correlation().label("order").property("region", "eu");
/// # let _ = (all, eu_orders);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Filter {
    /// Every message.
    #[default]
    All,
    /// Messages whose properties equal every field the filter sets (Service Bus's correlation
    /// filter): fields left unset match anything.
    Correlation(CorrelationFilter),
}

/// Equality on message properties; every field that is set must match (AND). Built with
/// [`Filter::correlation`] and its methods.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CorrelationFilter {
    /// The message's label must equal this.
    pub label: Option<String>,
    /// The message's correlation id must equal this.
    pub correlation_id: Option<String>,
    /// The message's content type must equal this.
    pub content_type: Option<String>,
    /// The message's reply-to queue must equal this.
    pub reply_to: Option<String>,
    /// The message's group must equal this.
    pub group: Option<String>,
    /// Each user property must be present with exactly this value.
    pub properties: BTreeMap<String, PropertyValue>,
}

impl Filter {
    /// An empty correlation filter (it matches everything until a field is set).
    pub fn correlation() -> Filter {
        Filter::Correlation(CorrelationFilter::default())
    }

    fn fields(&mut self) -> &mut CorrelationFilter {
        if let Filter::All = self {
            *self = Filter::correlation();
        }
        match self {
            Filter::Correlation(c) => c,
            Filter::All => unreachable!("replaced just above"),
        }
    }

    /// Requires this label.
    pub fn label(mut self, label: impl Into<String>) -> Filter {
        self.fields().label = Some(label.into());
        self
    }

    /// Requires this correlation id.
    pub fn correlation_id(mut self, id: impl Into<String>) -> Filter {
        self.fields().correlation_id = Some(id.into());
        self
    }

    /// Requires this content type.
    pub fn content_type(mut self, content_type: impl Into<String>) -> Filter {
        self.fields().content_type = Some(content_type.into());
        self
    }

    /// Requires this reply-to queue.
    pub fn reply_to(mut self, queue: impl Into<String>) -> Filter {
        self.fields().reply_to = Some(queue.into());
        self
    }

    /// Requires this group.
    pub fn group(mut self, group: impl Into<String>) -> Filter {
        self.fields().group = Some(group.into());
        self
    }

    /// Requires user property `key` with exactly `value`.
    pub fn property(mut self, key: impl Into<String>, value: impl Into<PropertyValue>) -> Filter {
        self.fields().properties.insert(key.into(), value.into());
        self
    }

    /// Whether `m` passes the filter.
    pub fn matches(&self, m: &Message) -> bool {
        let Filter::Correlation(c) = self else {
            return true;
        };
        let p = &m.props;
        let same = |want: &Option<String>, got: &Option<String>| {
            want.as_ref().is_none_or(|w| got.as_ref() == Some(w))
        };
        same(&c.label, &p.label)
            && same(&c.correlation_id, &p.correlation_id)
            && same(&c.content_type, &p.content_type)
            && same(&c.reply_to, &p.reply_to)
            && same(&c.group, &p.group)
            && c.properties.iter().all(|(k, v)| p.user.get(k) == Some(v))
    }

    /// Checks the bounds a message's own properties have.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a text field longer than
    /// [`MAX_TEXT_PROPERTY_LEN`](crate::MAX_TEXT_PROPERTY_LEN) or a property key that is empty
    /// or longer than [`MAX_PROPERTY_KEY_LEN`](crate::MAX_PROPERTY_KEY_LEN).
    pub(crate) fn validate(&self) -> Result<()> {
        let Filter::Correlation(c) = self else {
            return Ok(());
        };
        let texts = [
            ("label", &c.label),
            ("correlation_id", &c.correlation_id),
            ("content_type", &c.content_type),
            ("reply_to", &c.reply_to),
            ("group", &c.group),
        ];
        for (what, v) in texts {
            if v.as_ref().is_some_and(|s| s.len() > MAX_TEXT_PROPERTY_LEN) {
                return Err(Error::invalid(format!(
                    "a filter's {what} is at most {MAX_TEXT_PROPERTY_LEN} bytes"
                )));
            }
        }
        for k in c.properties.keys() {
            if k.is_empty() || k.len() > MAX_PROPERTY_KEY_LEN {
                return Err(Error::invalid(format!(
                    "a filter's property keys are 1 to {MAX_PROPERTY_KEY_LEN} bytes, got {}",
                    k.len()
                )));
            }
        }
        Ok(())
    }
}
