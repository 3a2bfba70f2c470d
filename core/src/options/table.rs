//! The queue option table: every queue option is declared once, in [`queue_option_table!`],
//! which generates the public [`QueueOptions`] (fields, builder methods, `FIELDS`, `get`/`set`
//! by name), the stored [`QueueSettings`] and the rule that applies one over the other.
//!
//! Adding an option here gives it to Rust, and through `QueueOptions::FIELDS` to the listings
//! that walk it. What stays written by hand: its check in `QueueSettings::validate`, its
//! extension tag in the queue record (`engine/codec/queue.rs`), the C struct field and flag
//! (`ffi/src/queue/options.rs`, checked against `FIELDS` by a test), and the Python stub.

use std::time::Duration;

use super::value::{FieldValue, OptionField, OptionValue};
use crate::error::{Error, Result};
use crate::message::DEFAULT_PRIORITY;

/// Generates the queue option types from the table that follows. Each entry:
///
/// ```text
/// /// field documentation
/// name: FieldType = default, unit "…", Bit,
///     set /// setter documentation
///     (arg: ArgType) => value stored,
///     [clear /// clearer documentation
///     no_name;]
/// ```
macro_rules! queue_option_table {
    ($(
        $(#[$fattr:meta])*
        $name:ident : $ty:ty = $default:expr, unit $unit:literal, $bit:ident,
            set $(#[$sattr:meta])* ($arg:ident : $argty:ty) => $conv:expr
            $(, clear $(#[$cattr:meta])* $clear:ident)?;
    )*) => {
        /// Per-queue settings: what [`Queue::options`](crate::Queue::options) reads back, and
        /// what [`Store::queue_with`](crate::Store::queue_with) applies.
        ///
        /// # Defaults
        ///
        /// - `lock_duration`: 30 s — how long a received message stays locked before it is
        ///   returned
        /// - `max_deliveries`: 10 — deliveries before a message is dead-lettered
        /// - `default_ttl`: none — messages live until received
        /// - `max_message_size`: 4 MiB (as MSMQ) — counts the whole message: body, every text
        ///   property and every user property (see [`Message::size`](crate::Message::size))
        /// - `max_messages`, `max_bytes`: none — quotas past which `send` fails with `QueueFull`
        ///   (`max_bytes` counts whole messages as `max_message_size` does)
        /// - `dedup_window`: none — how long a `message_key` is remembered for duplicate
        ///   detection
        /// - `default_priority`: [`DEFAULT_PRIORITY`](crate::DEFAULT_PRIORITY) (3) — the
        ///   priority of a message sent without one
        ///
        /// Every option is also listed, with its kind and unit, in [`QueueOptions::FIELDS`],
        /// and can be read and set by name ([`QueueOptions::get`], [`QueueOptions::set`]).
        ///
        /// # Changing the options of an existing queue
        ///
        /// Opening an existing queue with options changes **only the options mentioned**; the
        /// others keep their stored values (the same rule as in C and Python). An option is
        /// mentioned when its builder method was called (`.max_deliveries(5)`,
        /// `.no_default_ttl()`) or when its field holds a value other than the default. To put
        /// an option back to its default, call its builder method with the default value; to
        /// clear an optional one, call its `no_*` method.
        ///
        /// ```
        /// # let dir = tempfile::tempdir().unwrap();
        /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
        /// use postbox::QueueOptions;
        /// use std::time::Duration;
        /// store.queue_with("jobs", QueueOptions::default().max_deliveries(3).default_ttl(Duration::from_secs(60)))?;
        /// // Later, perhaps in another process: only the lock duration changes.
        /// let jobs = store.queue_with("jobs", QueueOptions::default().lock_duration(Duration::from_secs(5)))?;
        /// assert_eq!(jobs.options()?.max_deliveries, 3);
        /// let jobs = store.queue_with("jobs", QueueOptions::default().no_default_ttl())?;
        /// assert_eq!(jobs.options()?.default_ttl, None);
        /// # Ok::<(), postbox::Error>(())
        /// ```
        #[derive(Debug, Clone)]
        pub struct QueueOptions {
            $($(#[$fattr])* pub $name: $ty,)*
            /// The options named by builder methods (bit per [`Opt`]).
            mentioned: u32,
        }

        /// One bit per option, for [`QueueOptions::mentioned`].
        #[derive(Clone, Copy)]
        enum Opt {
            $($bit,)*
        }

        impl Opt {
            const fn bit(self) -> u32 {
                1 << self as u32
            }
        }

        impl PartialEq for QueueOptions {
            /// Compares the settings only, not which of them were mentioned.
            fn eq(&self, o: &Self) -> bool {
                true $(&& self.$name == o.$name)*
            }
        }

        impl Eq for QueueOptions {}

        impl Default for QueueOptions {
            fn default() -> Self {
                QueueOptions {
                    $($name: $default,)*
                    mentioned: 0,
                }
            }
        }

        impl QueueOptions {
            /// Every queue option, in the order of the option table.
            pub const FIELDS: &'static [OptionField] = &[$(OptionField {
                name: stringify!($name),
                kind: <$ty as FieldValue>::KIND,
                optional: <$ty as FieldValue>::OPTIONAL,
                unit: $unit,
            },)*];

            fn mention(mut self, o: Opt) -> Self {
                self.mentioned |= o.bit();
                self
            }

            $(
                $(#[$sattr])*
                pub fn $name(mut self, $arg: $argty) -> Self {
                    self.$name = $conv;
                    self.mention(Opt::$bit)
                }
                $(
                    $(#[$cattr])*
                    pub fn $clear(mut self) -> Self {
                        self.$name = None;
                        self.mention(Opt::$bit)
                    }
                )?
            )*

            /// The value of option `name`, or `None` if there is no such option.
            pub fn get(&self, name: &str) -> Option<OptionValue> {
                match name {
                    $(stringify!($name) => Some(self.$name.to_value()),)*
                    _ => None,
                }
            }

            /// Sets option `name` (and mentions it, as its builder method does);
            /// [`OptionValue::Unset`] clears an optional option. Fails with
            /// `InvalidArgument` for an unknown name or a value of the wrong kind.
            pub fn set(&mut self, name: &str, value: OptionValue) -> Result<()> {
                match name {
                    $(stringify!($name) => {
                        self.$name = FieldValue::from_value(name, value)?;
                        self.mentioned |= Opt::$bit.bit();
                    })*
                    _ => return Err(Error::invalid(format!("unknown queue option {name}"))),
                }
                Ok(())
            }

            /// Every option with its value, in the order of [`QueueOptions::FIELDS`].
            pub fn values(&self) -> impl Iterator<Item = (&'static OptionField, OptionValue)> + '_ {
                Self::FIELDS.iter().map(move |f| (f, self.get(f.name).unwrap_or(OptionValue::Unset)))
            }

            /// These options applied over `stored`: each option mentioned here (or holding a
            /// value other than its default) replaces the stored one; the rest are kept.
            pub(crate) fn apply_to(&self, stored: &QueueSettings) -> QueueSettings {
                let d = QueueOptions::default();
                let mut out = stored.clone();
                $(
                    if self.mentioned & Opt::$bit.bit() != 0 || self.$name != d.$name {
                        out.$name.clone_from(&self.$name);
                    }
                )*
                out
            }
        }

        /// A queue's options as stored: what every decision reads (invariant 12), and what the
        /// engine keeps in the queue record. [`QueueOptions`] is the public face: it reads
        /// these back and, when opening a queue, says which of them to change.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub(crate) struct QueueSettings {
            $(pub $name: $ty,)*
        }

        impl Default for QueueSettings {
            fn default() -> Self {
                let d = QueueOptions::default();
                QueueSettings {
                    $($name: d.$name,)*
                }
            }
        }

        impl From<&QueueSettings> for QueueOptions {
            fn from(s: &QueueSettings) -> QueueOptions {
                QueueOptions {
                    $($name: s.$name.clone(),)*
                    mentioned: 0,
                }
            }
        }
    };
}

queue_option_table! {
    /// How long a receive holds a message before it returns to the queue.
    lock_duration: Duration = Duration::from_secs(30), unit "ms", LockDuration,
        set /// Sets `lock_duration`.
        (d: Duration) => d;
    /// How many deliveries a message gets before it moves to the dead-letter queue.
    max_deliveries: u32 = 10, unit "deliveries", MaxDeliveries,
        set /// Sets `max_deliveries`.
        (n: u32) => n;
    /// Time to live of messages that do not set their own.
    default_ttl: Option<Duration> = None, unit "ms", DefaultTtl,
        set /// Sets `default_ttl`.
        (ttl: Duration) => Some(ttl),
        clear /// Clears `default_ttl`: messages that set no TTL live until received.
        no_default_ttl;
    /// Largest accepted message, in bytes (body and properties).
    max_message_size: usize = 4 << 20, unit "bytes", MaxMessageSize,
        set /// Sets `max_message_size`.
        (bytes: usize) => bytes;
    /// Most messages (receivable, locked and scheduled) the queue may hold.
    max_messages: Option<u64> = None, unit "messages", MaxMessages,
        set /// Sets `max_messages`.
        (n: u64) => Some(n),
        clear /// Clears `max_messages` (no limit).
        no_max_messages;
    /// Most message bytes the queue may hold.
    max_bytes: Option<u64> = None, unit "bytes", MaxBytes,
        set /// Sets `max_bytes`.
        (n: u64) => Some(n),
        clear /// Clears `max_bytes` (no limit).
        no_max_bytes;
    /// How long a `message_key` is remembered: a second send with the same key inside the
    /// window is accepted and discarded, returning the first message's id.
    dedup_window: Option<Duration> = None, unit "ms", DedupWindow,
        set /// Sets `dedup_window`.
        (d: Duration) => Some(d),
        clear /// Clears `dedup_window` (no duplicate detection).
        no_dedup_window;
    /// Messages must carry a `group` (their session) and are received through sessions only
    /// ([`Queue::accept_session`](crate::Queue::accept_session)): each group in send order,
    /// one message at a time. Fixed when the queue is created.
    requires_session: bool = false, unit "", RequiresSession,
        set /// Sets `requires_session` (only when the queue is created: it cannot change later).
        (on: bool) => on;
    /// Every message sent to this queue lands in this queue instead, in the same commit
    /// (Service Bus's auto-forwarding). Chains are followed; a loop is refused when set. Like
    /// every option that names a queue, the queue must exist and be a plain, non-temporary
    /// queue when the option is set, and it is *in use* while named: deleting it fails with
    /// [`Error::QueueInUse`](crate::Error::QueueInUse), and `auto_delete_on_idle` skips it.
    forward_to: Option<String> = None, unit "", ForwardTo,
        set /// Sets `forward_to`: sends to this queue land in queue `name`.
        (name: impl Into<String>) => Some(name.into()),
        clear /// Clears `forward_to`.
        no_forward_to;
    /// Dead letters of this queue go to this queue (with their dead-letter reason and source)
    /// instead of its own dead-letter queue: dead letters of many queues collect in one place.
    /// The queue it names is in use (see `forward_to`).
    forward_dead_letters_to: Option<String> = None, unit "", ForwardDeadLettersTo,
        set /// Sets `forward_dead_letters_to`: dead letters land in queue `name`.
        (name: impl Into<String>) => Some(name.into()),
        clear /// Clears `forward_dead_letters_to`.
        no_forward_dead_letters_to;
    /// Completed messages are kept in the queue's journal
    /// ([`Queue::journal`](crate::Queue::journal)), at most this many (the oldest dropped
    /// first); MSMQ's journal queue.
    journal: Option<u64> = None, unit "messages", Journal,
        set /// Keeps completed messages in the queue's journal, at most `max_messages` of them.
        (max_messages: u64) => Some(max_messages),
        clear /// Stops journaling (what the journal holds stays until purged).
        no_journal;
    /// The queue, its dead-letter queue and its messages are deleted after this long without
    /// activity (a send, receive, settle or lock renewal); a queue holding locked messages is
    /// never idle (Service Bus's `AutoDeleteOnIdle`). The queue goes within a second after
    /// that (usually about a tenth of a second: activity is recorded to a tenth of a second),
    /// never before; a send in the meantime starts the period again.
    auto_delete_on_idle: Option<Duration> = None, unit "ms", AutoDeleteOnIdle,
        set /// Deletes the queue after `idle` without activity (see the field).
        (idle: Duration) => Some(idle),
        clear /// Clears `auto_delete_on_idle`: the queue stays until deleted.
        no_auto_delete_on_idle;
    /// A receipt is posted to this queue, in the same commit, whenever a message of this queue
    /// is completed or dead-lettered: an empty-bodied message labelled `"receipt"` whose
    /// properties say what happened (see [`RECEIPT_LABEL`](crate::RECEIPT_LABEL)). A missing
    /// queue is refused when the option is set, as for `forward_to`, and the queue it names is
    /// in use (see `forward_to`).
    receipts_to: Option<String> = None, unit "", ReceiptsTo,
        set /// Posts a receipt to queue `name` for every message completed or dead-lettered here.
        (name: impl Into<String>) => Some(name.into()),
        clear /// Stops posting receipts.
        no_receipts_to;
    /// The priority (0 to [`MAX_PRIORITY`](crate::MAX_PRIORITY)) given to a message sent to
    /// this queue without one ([`Message::priority`](crate::Message::priority) not called); a
    /// message that sets its priority keeps it.
    default_priority: u8 = DEFAULT_PRIORITY, unit "", DefaultPriority,
        set /// Sets `default_priority` (0 to [`MAX_PRIORITY`](crate::MAX_PRIORITY)).
        (priority: u8) => priority;
}

// Beside the table, not with the descriptor type: the defaults are the table's.
impl OptionField {
    /// The option's default value.
    pub fn default_value(&self) -> OptionValue {
        super::QueueOptions::default()
            .get(self.name)
            .unwrap_or(OptionValue::Unset)
    }
}
