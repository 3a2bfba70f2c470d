//! Messages: what a sender builds ([`Message`]) and what a reader gets back ([`Envelope`]).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

pub use crate::message_id::MessageId;

/// The user property in which a message sent through a collator declares its series' length
/// (decimal text); set by [`Message::series_length`].
pub const SERIES_LENGTH_PROPERTY: &str = "postbox.series_length";
/// The user property that marks the last message of a series sent through a collator; set by
/// [`Message::last_in_series`].
pub const SERIES_LAST_PROPERTY: &str = "postbox.series_last";

/// The value of a user property: text or raw bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PropertyValue {
    /// UTF-8 text.
    String(String),
    /// Arbitrary bytes.
    Bytes(Vec<u8>),
}

impl From<&str> for PropertyValue {
    fn from(s: &str) -> Self {
        PropertyValue::String(s.to_owned())
    }
}

impl From<String> for PropertyValue {
    fn from(s: String) -> Self {
        PropertyValue::String(s)
    }
}

impl From<Vec<u8>> for PropertyValue {
    fn from(b: Vec<u8>) -> Self {
        PropertyValue::Bytes(b)
    }
}

impl From<&[u8]> for PropertyValue {
    fn from(b: &[u8]) -> Self {
        PropertyValue::Bytes(b.to_vec())
    }
}

/// The lowest priority.
pub const MIN_PRIORITY: u8 = 0;
/// The highest priority.
pub const MAX_PRIORITY: u8 = 7;
/// The priority of a message that sets none, unless its queue's `default_priority` says otherwise
/// (as MSMQ).
pub const DEFAULT_PRIORITY: u8 = 3;

/// The longest text property (`label`, `content_type`, `correlation_id`, `reply_to`,
/// `message_key`, `group`), in bytes of UTF-8. Longer ones are refused by `send` with
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
pub const MAX_TEXT_PROPERTY_LEN: usize = 1024;
/// The longest user property key, in bytes of UTF-8 (keys are 1 to this many bytes).
pub const MAX_PROPERTY_KEY_LEN: usize = 256;
/// The longest dead-letter reason, in bytes; a longer one is refused with
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
pub const MAX_REASON_LEN: usize = 256;
/// The longest dead-letter description, in bytes; a longer one is cut to this length (at a
/// character boundary), since it usually carries an error text nobody sized.
pub const MAX_DESCRIPTION_LEN: usize = 4096;

/// `description` cut to [`MAX_DESCRIPTION_LEN`] bytes at a character boundary.
pub(crate) fn truncate_description(description: &str) -> &str {
    if description.len() <= MAX_DESCRIPTION_LEN {
        return description;
    }
    let mut end = MAX_DESCRIPTION_LEN;
    while !description.is_char_boundary(end) {
        end -= 1;
    }
    &description[..end]
}

/// When a message becomes receivable: now, after a delay, or at a point in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Visibility {
    Now,
    After(Duration),
    At(SystemTime),
}

/// When a message expires if nobody received it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expiry {
    QueueDefault,
    After(Duration),
    At(SystemTime),
}

/// A message to send: a body plus the MSMQ / Service Bus properties.
///
/// Built with chained setters; every property is optional.
///
/// ```
/// use std::time::Duration;
/// use postbox::Message;
///
/// let msg = Message::new(b"resize image 42".to_vec())
///     .label("resize")
///     .priority(5)
///     .ttl(Duration::from_secs(3600))
///     .property("tenant", "acme");
/// assert_eq!(msg.body(), b"resize image 42");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub(crate) body: Vec<u8>,
    pub(crate) props: Properties,
    /// `None` until [`Message::priority`] sets it: the queue's `default_priority` applies.
    pub(crate) priority: Option<u8>,
    pub(crate) visibility: Visibility,
    pub(crate) expiry: Expiry,
    /// What the engine attaches to a send beyond the message itself (a job, a reserved id).
    pub(crate) tags: SendTags,
}

/// What became of one message of a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sent {
    /// The message's id; for a duplicate, the id of the message first sent with its key.
    pub id: MessageId,
    /// The queue's dedup window already held the message's `message_key`: nothing was stored.
    pub duplicate: bool,
}

/// Engine-side attachments of a message being sent, beside its envelope.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SendTags {
    /// The job this message is a piece of.
    pub job: Option<u64>,
    /// The id a transaction reserved for it when it was sent.
    pub reserved_id: Option<u64>,
    /// Deliveries it already had elsewhere: its delivery count starts here.
    pub prior_deliveries: u32,
}

/// The optional, variable-length properties shared by [`Message`] and [`Envelope`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Properties {
    pub label: Option<String>,
    pub content_type: Option<String>,
    pub correlation_id: Option<String>,
    pub reply_to: Option<String>,
    pub message_key: Option<String>,
    pub group: Option<String>,
    pub sequence: Option<u64>,
    pub user: BTreeMap<String, PropertyValue>,
}

impl Properties {
    /// Bytes of every text property and user property (keys and values).
    pub fn size(&self) -> u64 {
        let text = [
            &self.label,
            &self.content_type,
            &self.correlation_id,
            &self.reply_to,
            &self.message_key,
            &self.group,
        ]
        .into_iter()
        .map(|t| t.as_ref().map_or(0, |s| s.len() as u64))
        .sum::<u64>();
        let user = self
            .user
            .iter()
            .map(|(k, v)| {
                k.len() as u64
                    + match v {
                        PropertyValue::String(s) => s.len() as u64,
                        PropertyValue::Bytes(b) => b.len() as u64,
                    }
            })
            .sum::<u64>();
        text + user
    }

    fn validate(&self) -> crate::Result<()> {
        let text = [
            ("label", &self.label),
            ("content_type", &self.content_type),
            ("correlation_id", &self.correlation_id),
            ("reply_to", &self.reply_to),
            ("message_key", &self.message_key),
            ("group", &self.group),
        ];
        for (name, value) in text {
            if let Some(v) = value
                && v.len() > MAX_TEXT_PROPERTY_LEN
            {
                return Err(crate::Error::invalid(format!(
                    "{name} is {} bytes long; the limit is {MAX_TEXT_PROPERTY_LEN}",
                    v.len()
                )));
            }
        }
        for k in self.user.keys() {
            if k.is_empty() || k.len() > MAX_PROPERTY_KEY_LEN {
                return Err(crate::Error::invalid(format!(
                    "property keys are 1 to {MAX_PROPERTY_KEY_LEN} bytes long, got {} bytes",
                    k.len()
                )));
            }
        }
        Ok(())
    }
}

impl Message {
    /// A message with this body, the queue's default priority (`default_priority`, itself
    /// [`DEFAULT_PRIORITY`] unless set), visible now, with the queue's default time-to-live.
    pub fn new(body: impl Into<Vec<u8>>) -> Message {
        Message {
            body: body.into(),
            props: Properties::default(),
            priority: None,
            visibility: Visibility::Now,
            expiry: Expiry::QueueDefault,
            tags: SendTags::default(),
        }
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The size that counts against a queue's `max_message_size` and `max_bytes`: the body plus
    /// every text property and every user property key and value, in bytes.
    pub fn size(&self) -> u64 {
        self.body.len() as u64 + self.props.size()
    }

    /// Checks what can be checked without a queue: priority range and property bounds.
    pub(crate) fn validate(&self) -> crate::Result<()> {
        if let Some(p) = self.priority
            && p > MAX_PRIORITY
        {
            return Err(crate::Error::invalid(format!(
                "priority {p} is out of range 0..=7"
            )));
        }
        self.props.validate()
    }

    /// A short description for people (MSMQ `Label`, Service Bus `Subject`). Text properties are
    /// at most [`MAX_TEXT_PROPERTY_LEN`] bytes each.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.props.label = Some(label.into());
        self
    }

    /// The MIME type of the body, e.g. `application/json`.
    pub fn content_type(mut self, content_type: impl Into<String>) -> Self {
        self.props.content_type = Some(content_type.into());
        self
    }

    /// Ties a reply to its request.
    pub fn correlation_id(mut self, id: impl Into<String>) -> Self {
        self.props.correlation_id = Some(id.into());
        self
    }

    /// The name of the queue that replies should be sent to.
    pub fn reply_to(mut self, queue: impl Into<String>) -> Self {
        self.props.reply_to = Some(queue.into());
        self
    }

    /// The key used for duplicate detection within the queue's `dedup_window`.
    pub fn message_key(mut self, key: impl Into<String>) -> Self {
        self.props.message_key = Some(key.into());
        self
    }

    /// The group this message belongs to. On a queue that requires sessions
    /// ([`QueueOptions::requires_session`](crate::QueueOptions::requires_session)) it is the
    /// message's session: the group is delivered in send order, one message at a time, to the
    /// holder of its session only. Sent to a collator, it names the series. On any other queue
    /// it is only stored and returned with the message: it changes neither the order nor who
    /// may receive it (plain, by id, by correlation id, in parallel).
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.props.group = Some(group.into());
        self
    }

    /// Deliveries this message already had before it arrived here (a message forwarded from
    /// another broker, whose delivery count was `n`): it starts with this delivery count, so
    /// the queue's `max_deliveries` counts those attempts too. Default 0.
    pub fn prior_deliveries(mut self, n: u32) -> Self {
        self.tags.prior_deliveries = n;
        self
    }

    /// The sender's sequence number within its group. Stored and returned with the message; a
    /// collator orders its series by it, and no queue does (a session queue delivers a group in
    /// send order).
    pub fn sequence(mut self, sequence: u64) -> Self {
        self.props.sequence = Some(sequence);
        self
    }

    /// Priority from 0 (lowest) to 7 (highest); higher is delivered first. Values above 7 are
    /// rejected by `send` with [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Deliver no earlier than `delay` after the send commits (scheduled delivery).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.visibility = Visibility::After(delay);
        self
    }

    /// Deliver no earlier than `at` (scheduled delivery).
    pub fn visible_at(mut self, at: SystemTime) -> Self {
        self.visibility = Visibility::At(at);
        self
    }

    /// Time to live: if not received within `ttl` of the send, the message is moved to the
    /// dead-letter queue with reason `TTLExpired`. Overrides the queue's `default_ttl`.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.expiry = Expiry::After(ttl);
        self
    }

    /// Absolute expiry time; see [`Message::ttl`].
    pub fn expires_at(mut self, at: SystemTime) -> Self {
        self.expiry = Expiry::At(at);
        self
    }

    /// Declares the length of this message's series, for a collator (see
    /// [`Collator`](crate::Collator)); stored as the user property
    /// [`SERIES_LENGTH_PROPERTY`].
    pub fn series_length(self, n: u64) -> Self {
        self.property(SERIES_LENGTH_PROPERTY, n.to_string())
    }

    /// Marks this message as the last of its series, for a collator; stored as the user
    /// property [`SERIES_LAST_PROPERTY`].
    pub fn last_in_series(self) -> Self {
        self.property(SERIES_LAST_PROPERTY, "1")
    }

    /// Sets a user property (string → string or bytes); setting a key again replaces its value.
    /// Keys are 1 to [`MAX_PROPERTY_KEY_LEN`] bytes; values count towards the message size.
    pub fn property(mut self, key: impl Into<String>, value: impl Into<PropertyValue>) -> Self {
        self.props.user.insert(key.into(), value.into());
        self
    }
}

impl From<Vec<u8>> for Message {
    fn from(body: Vec<u8>) -> Self {
        Message::new(body)
    }
}

impl From<String> for Message {
    fn from(body: String) -> Self {
        Message::new(body.into_bytes())
    }
}

impl From<&[u8]> for Message {
    fn from(body: &[u8]) -> Self {
        Message::new(body.to_vec())
    }
}

impl From<&str> for Message {
    fn from(body: &str) -> Self {
        Message::new(body.as_bytes().to_vec())
    }
}

/// Why and from where a message was dead-lettered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterInfo {
    /// Machine-readable reason: `TTLExpired`, `MaxDeliveryCountExceeded`, or the reason given to
    /// [`Received::dead_letter`](crate::Received::dead_letter).
    pub reason: String,
    /// Human-readable detail (e.g. the handler's error text).
    pub description: String,
    /// The name of the queue the message was dead-lettered from.
    pub source_queue: String,
    /// When it was dead-lettered.
    pub at: SystemTime,
}

/// Reason given to messages whose time to live ran out.
pub const REASON_TTL_EXPIRED: &str = "TTLExpired";
/// Reason given to messages delivered `max_deliveries` times without being completed.
pub const REASON_MAX_DELIVERIES: &str = "MaxDeliveryCountExceeded";
/// Reason given to a message whose body a typed queue or typed processor could not decode.
pub const REASON_DECODE_FAILED: &str = "DecodeFailed";
/// Reason given to a message a commit promised to send — a receipt, a job's continuation —
/// whose queue no longer exists. Nothing deletes a queue that something names now (such a
/// deletion fails with [`Error::QueueInUse`](crate::Error::QueueInUse)); a store written by an
/// older postbox may still name a deleted one. The message is kept as a dead letter of the
/// queue whose settle sent it, with the missing queue in its description.
pub const REASON_DESTINATION_MISSING: &str = "DestinationMissing";

/// The label of a receipt posted by a queue with
/// [`receipts_to`](crate::QueueOptions::receipts_to). A receipt has an empty body, the settled
/// message's id (in decimal) as its correlation id, and the string properties
/// [`RECEIPT_MESSAGE_ID`], [`RECEIPT_QUEUE`], [`RECEIPT_OUTCOME`], [`RECEIPT_AT`] and, for a dead
/// letter, [`RECEIPT_REASON`].
pub const RECEIPT_LABEL: &str = "receipt";
/// Receipt property: the settled message's id, in decimal.
pub const RECEIPT_MESSAGE_ID: &str = "message_id";
/// Receipt property: the queue the message was settled in.
pub const RECEIPT_QUEUE: &str = "queue";
/// Receipt property: `"completed"` or `"dead-lettered"`.
pub const RECEIPT_OUTCOME: &str = "outcome";
/// Receipt property: when it was settled, in milliseconds since the Unix epoch (decimal).
pub const RECEIPT_AT: &str = "at";
/// Receipt property of a dead letter: its dead-letter reason.
pub const RECEIPT_REASON: &str = "reason";
/// Receipt outcome of a completed message.
pub const RECEIPT_COMPLETED: &str = "completed";
/// Receipt outcome of a dead-lettered message.
pub const RECEIPT_DEAD_LETTERED: &str = "dead-lettered";

/// Where a message is in its queue, as [`Queue::browse_all`](crate::Queue::browse_all)
/// reports it: the count of [`QueueStats`](crate::QueueStats) it is in (each state is one of
/// its fields). Time-driven changes count as done, as they do for `stats` and `browse`: a
/// message whose lock expired is `Active` again (`Deferred` if it was deferred), a scheduled
/// message whose time came is `Active`, before any write has moved them. A message whose
/// deliveries or time to live are used up is listed with the state it has until the next
/// write moves it to the dead-letter queue (where `stats`, itself a write, counts it).
///
/// A dead-letter queue's messages report their state in that queue (`Active`, or `Locked`
/// while a receiver holds one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MessageState {
    /// Receivable: a receive may take it ([`QueueStats::active`](crate::QueueStats::active)).
    Active,
    /// Held by a receiver or a transaction until it is settled or its lock expires
    /// ([`QueueStats::locked`](crate::QueueStats::locked)). A deferred message received by id
    /// is `Locked` while held.
    Locked,
    /// Waiting for its [`Envelope::visible_at`]: sent with a delay or abandoned with one
    /// ([`QueueStats::scheduled`](crate::QueueStats::scheduled)).
    Scheduled,
    /// Set aside with [`Received::defer`](crate::Received::defer): receivable by id only
    /// ([`QueueStats::deferred`](crate::QueueStats::deferred)).
    Deferred,
}

impl MessageState {
    /// Every state, in the order of [`QueueStats`](crate::QueueStats)' fields.
    pub const ALL: [MessageState; 4] = [
        MessageState::Active,
        MessageState::Locked,
        MessageState::Scheduled,
        MessageState::Deferred,
    ];

    /// The state's name as the bindings report it: `"active"`, `"locked"`, `"scheduled"` or
    /// `"deferred"` (Python's `Message.state` of a message read without a lock).
    pub fn name(self) -> &'static str {
        match self {
            MessageState::Active => "active",
            MessageState::Locked => "locked",
            MessageState::Scheduled => "scheduled",
            MessageState::Deferred => "deferred",
        }
    }
}

/// A stored message as read back by `peek`, `browse`, `get` or `receive`.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub(crate) id: MessageId,
    pub(crate) queue: String,
    pub(crate) body: Vec<u8>,
    pub(crate) props: Properties,
    pub(crate) priority: u8,
    pub(crate) enqueued_at: SystemTime,
    pub(crate) visible_at: Option<SystemTime>,
    pub(crate) expires_at: Option<SystemTime>,
    pub(crate) delivery_count: u32,
    pub(crate) dead_letter: Option<DeadLetterInfo>,
}

impl Envelope {
    /// The message's store-wide id.
    pub fn id(&self) -> MessageId {
        self.id
    }
    /// The queue the message is in now.
    pub fn queue(&self) -> &str {
        &self.queue
    }
    /// The body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }
    /// Takes the body out without copying.
    pub fn into_body(self) -> Vec<u8> {
        self.body
    }
    /// See [`Message::label`].
    pub fn label(&self) -> Option<&str> {
        self.props.label.as_deref()
    }
    /// See [`Message::content_type`].
    pub fn content_type(&self) -> Option<&str> {
        self.props.content_type.as_deref()
    }
    /// See [`Message::correlation_id`].
    pub fn correlation_id(&self) -> Option<&str> {
        self.props.correlation_id.as_deref()
    }
    /// See [`Message::reply_to`].
    pub fn reply_to(&self) -> Option<&str> {
        self.props.reply_to.as_deref()
    }
    /// See [`Message::message_key`].
    pub fn message_key(&self) -> Option<&str> {
        self.props.message_key.as_deref()
    }
    /// See [`Message::group`].
    pub fn group(&self) -> Option<&str> {
        self.props.group.as_deref()
    }
    /// See [`Message::sequence`].
    pub fn sequence(&self) -> Option<u64> {
        self.props.sequence
    }
    /// Priority 0–7.
    pub fn priority(&self) -> u8 {
        self.priority
    }
    /// When the send committed (millisecond precision).
    pub fn enqueued_at(&self) -> SystemTime {
        self.enqueued_at
    }
    /// When a scheduled message became (or becomes) receivable; `None` if it was not scheduled.
    pub fn visible_at(&self) -> Option<SystemTime> {
        self.visible_at
    }
    /// When the message expires; `None` if it lives forever.
    pub fn expires_at(&self) -> Option<SystemTime> {
        self.expires_at
    }
    /// How many times the message has been handed to a receiver, this delivery included.
    pub fn delivery_count(&self) -> u32 {
        self.delivery_count
    }
    /// A user property.
    pub fn property(&self, key: &str) -> Option<&PropertyValue> {
        self.props.user.get(key)
    }
    /// All user properties, sorted by key.
    pub fn properties(&self) -> &BTreeMap<String, PropertyValue> {
        &self.props.user
    }
    /// Set on messages in a dead-letter queue.
    pub fn dead_letter_info(&self) -> Option<&DeadLetterInfo> {
        self.dead_letter.as_ref()
    }
    /// A [`Message`] with the same body and properties, e.g. to forward it elsewhere.
    pub fn to_message(&self) -> Message {
        Message {
            body: self.body.clone(),
            props: self.props.clone(),
            priority: Some(self.priority),
            visibility: Visibility::Now,
            expiry: match self.expires_at {
                Some(at) => Expiry::At(at),
                None => Expiry::QueueDefault,
            },
            tags: SendTags::default(),
        }
    }
}
