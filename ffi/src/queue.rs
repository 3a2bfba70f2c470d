//! `postbox_queue`: open, send, peek, browse, get, receive, stats, purge, dead letters.

use std::ffi::{CString, c_char, c_int};
use std::time::Duration;

use postbox::binding::{FlatSend, FlatSendError, HeldMessage};
use postbox::sync::Mutex;
use postbox::{
    Browse, Envelope, Message, MessageId, MessageState, PropertyValue, Queue, QueueOptions,
    Received, Store, Transaction,
};

use crate::guard::{
    Failure, Out, Outcome, VersionedOut, arg_opt_str, arg_ref, arg_slice, arg_slice_mut, arg_str,
    guard, read_versioned, take_box,
};
use crate::message::{complete_batch, postbox_message};
use crate::status::{POSTBOX_NOT_FOUND, POSTBOX_OK, POSTBOX_TIMEOUT};
use crate::store::postbox_store;
use crate::tx::{postbox_tx, with_tx};
use crate::{
    POSTBOX_PROPERTY_BYTES, POSTBOX_PROPERTY_STRING, StoreTag, from_unix_ms, postbox_bytes, timeout,
};

/// Writes the handles of a batch receive into the caller's array, or reports
/// `POSTBOX_TIMEOUT` when nothing arrived.
fn hand_out(
    q: &postbox_queue,
    got: Vec<postbox::Received>,
    slots: &mut [*mut postbox_message],
    count: Out<usize>,
    timeout_ms: i64,
) -> Outcome<c_int> {
    if got.is_empty() {
        // The one output written on a failure: a caller looping on `*count_out` sees 0.
        count.write(0);
        return Err(Failure::new(
            POSTBOX_TIMEOUT,
            format!(
                "no message arrived in queue {:?} within {timeout_ms} ms",
                q.queue.name()
            ),
        ));
    }
    let n = got.len().min(slots.len());
    for (slot, r) in slots.iter_mut().zip(got) {
        *slot = postbox_message::new(HeldMessage::received(r), q.tag).into_raw();
    }
    count.write(n);
    Ok(POSTBOX_OK)
}

/// A handle to one queue of a store. Created by `postbox_queue_open`,
/// `postbox_queue_dead_letters` or `postbox_queue_journal`; freed with `postbox_queue_free`.
/// Thread-safe: any number of threads may send and receive through one queue handle at once.
pub struct postbox_queue {
    pub(crate) queue: Queue,
    /// The store the queue was opened from (a processor's transactional mode needs it).
    pub(crate) store: Store,
    pub(crate) tag: StoreTag,
    /// The queue names `postbox_queue_options_get` handed out (`forward_to`,
    /// `forward_dead_letters_to`), each distinct name once: they stay valid until the handle
    /// is freed, whatever other threads read meanwhile.
    names: Mutex<Vec<CString>>,
}

impl postbox_queue {
    /// A handle for C, boxed: the caller frees it with `postbox_queue_free`.
    pub(crate) fn boxed(queue: Queue, store: &Store, tag: StoreTag) -> *mut postbox_queue {
        Box::into_raw(Box::new(postbox_queue {
            queue,
            store: store.clone(),
            tag,
            names: Mutex::new(Vec::new()),
        }))
    }

    /// A NUL-terminated copy of `name` owned by this handle (NULL for `None`).
    fn name_ptr(&self, name: Option<&str>) -> Outcome<*const c_char> {
        let Some(name) = name else {
            return Ok(std::ptr::null());
        };
        let mut names = self.names.lock();
        if let Some(kept) = names.iter().find(|n| n.as_bytes() == name.as_bytes()) {
            return Ok(kept.as_ptr());
        }
        let kept = CString::new(name).map_err(|_| Failure::invalid("a queue name contains NUL"))?;
        // The bytes live on the heap: moving the CString into the vector keeps the pointer.
        let ptr = kept.as_ptr();
        names.push(kept);
        Ok(ptr)
    }
}

/// `postbox_queue_options.clear`: put `lock_duration` back to its default (30 s).
pub const POSTBOX_OPTION_LOCK_DURATION: u32 = 1;
/// `postbox_queue_options.clear`: put `max_deliveries` back to its default (10).
pub const POSTBOX_OPTION_MAX_DELIVERIES: u32 = 1 << 1;
/// `postbox_queue_options.clear`: no default time to live (messages live until received).
pub const POSTBOX_OPTION_DEFAULT_TTL: u32 = 1 << 2;
/// `postbox_queue_options.clear`: put `max_message_size` back to its default (4 MiB).
pub const POSTBOX_OPTION_MAX_MESSAGE_SIZE: u32 = 1 << 3;
/// `postbox_queue_options.clear`: no `max_messages` quota.
pub const POSTBOX_OPTION_MAX_MESSAGES: u32 = 1 << 4;
/// `postbox_queue_options.clear`: no `max_bytes` quota.
pub const POSTBOX_OPTION_MAX_BYTES: u32 = 1 << 5;
/// `postbox_queue_options.clear`: no duplicate detection (no `dedup_window`).
pub const POSTBOX_OPTION_DEDUP_WINDOW: u32 = 1 << 6;
/// `postbox_queue_options.clear`: no auto-forwarding (the queue keeps its messages again).
pub const POSTBOX_OPTION_FORWARD_TO: u32 = 1 << 7;
/// `postbox_queue_options.clear`: dead letters go to the queue's own dead-letter queue again.
pub const POSTBOX_OPTION_FORWARD_DEAD_LETTERS_TO: u32 = 1 << 8;
/// `postbox_queue_options.clear`: no journal (completed messages are removed again; what the
/// journal holds stays until purged).
pub const POSTBOX_OPTION_JOURNAL: u32 = 1 << 9;
/// `postbox_queue_options.clear`: no receipts (settles post nothing to another queue again).
pub const POSTBOX_OPTION_RECEIPTS_TO: u32 = 1 << 10;
/// `postbox_queue_options.clear`: the queue is no longer deleted when idle.
pub const POSTBOX_OPTION_AUTO_DELETE_ON_IDLE: u32 = 1 << 11;

const ALL_OPTIONS: u32 = (1 << 12) - 1;

/// Options for `postbox_queue_open`, and what `postbox_queue_options_get` reads back.
///
/// The rule is the same in C, Rust and Python: **options not mentioned keep their stored
/// values**. A field left 0 (or NULL) is not mentioned: a new queue gets the default, an
/// existing queue keeps what it has. A non-zero field sets the option. A flag in `clear` puts
/// the option back to its default (for the optional ones: none, unlimited). A zeroed struct
/// with `struct_size` set changes nothing; `postbox_queue_options_init` makes one.
///
/// `postbox_queue_options_get` writes 0 (NULL) for an option that is not set (no TTL, no
/// quota, no dedup window, no forwarding, no journal, no receipts, no idle deletion) and the
/// stored value for the others, defaults included.
///
/// Versioned: fields are only ever appended. A caller built against an older header passes
/// its smaller `struct_size` (the fields before `clear`, before `forward_to`, or before
/// `receipts_to`); the fields it does not know are neither read (they are "not mentioned")
/// nor written.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct postbox_queue_options {
    /// `sizeof(postbox_queue_options)`. Structs from older headers (a smaller size) are still
    /// accepted.
    pub struct_size: u32,
    /// Deliveries before a message moves to the dead-letter queue (default 10).
    pub max_deliveries: u32,
    /// How long a receive holds a message before it returns to the queue, in ms (default 30 s).
    pub lock_duration_ms: u64,
    /// Time to live of messages that set none, in ms (default: none, they live until received).
    pub default_ttl_ms: u64,
    /// Largest accepted message in bytes (default 4 MiB). Counts the whole message: body, text
    /// properties, and user property keys and values.
    pub max_message_size: u64,
    /// Most messages (receivable, locked, scheduled) the queue holds (default: unlimited).
    pub max_messages: u64,
    /// Most message bytes the queue holds, counted as for `max_message_size` (default:
    /// unlimited).
    pub max_bytes: u64,
    /// How long a `message_key` is remembered for duplicate detection, in ms (default: none).
    pub dedup_window_ms: u64,
    /// `POSTBOX_OPTION_*` flags of the options to put back to their defaults. Setting a flag
    /// and the option's field at once is `POSTBOX_INVALID_ARGUMENT`. Written as 0 by
    /// `postbox_queue_options_get`.
    pub clear: u32,
    /// Reserved (the padding before `forward_to`, spelt out); ignored, written as 0.
    pub reserved: u32,
    /// Auto-forwarding: every message sent to this queue lands in queue `forward_to` instead,
    /// in the same commit (chains are followed; a loop, a missing queue or a temporary one is
    /// refused with `POSTBOX_INVALID_ARGUMENT`). The queue named is in use while named:
    /// `postbox_queue_delete` refuses it with `POSTBOX_IN_USE`, idle deletion skips it (as for
    /// `forward_dead_letters_to` and `receipts_to`). NUL-terminated UTF-8; NULL: not mentioned
    /// (default: none; `POSTBOX_OPTION_FORWARD_TO` clears it). From
    /// `postbox_queue_options_get`: a string owned by the queue handle, valid until it is freed
    /// (never free it), or NULL when not set.
    pub forward_to: *const c_char,
    /// Dead letters of this queue land in queue `forward_dead_letters_to` (with their
    /// dead-letter reason and source queue) instead of its own dead-letter queue. As
    /// `forward_to`: NULL not mentioned, `POSTBOX_OPTION_FORWARD_DEAD_LETTERS_TO` clears it, and
    /// `postbox_queue_options_get` writes a string owned by the queue handle.
    pub forward_dead_letters_to: *const c_char,
    /// Journal: completed messages are kept in the queue's journal (`postbox_queue_journal`),
    /// at most this many, the oldest dropped first (default: no journal; 0: not mentioned;
    /// `POSTBOX_OPTION_JOURNAL` turns it off).
    pub journal_max_messages: u64,
    /// Non-zero: the queue requires sessions: messages must carry a `group` and are received
    /// through sessions only (`postbox_session_accept`; `postbox_receive` and the selective
    /// receives of the queue are refused, the session has its own). Only when the queue is created: it
    /// cannot change later (asking an existing queue for another value is
    /// `POSTBOX_INVALID_ARGUMENT`). 0: not mentioned. Read back as 1 or 0.
    pub requires_session: c_int,
    /// Reserved (keeps the struct free of padding); ignored, written as 0.
    pub reserved2: u32,
    /// Receipts: whenever a message of this queue is completed or dead-lettered, a receipt is
    /// posted to queue `receipts_to` in the same commit: an empty body, label
    /// `POSTBOX_RECEIPT_LABEL`, the settled message's id in decimal as its correlation id, and
    /// the string properties `POSTBOX_RECEIPT_MESSAGE_ID`, `POSTBOX_RECEIPT_QUEUE`,
    /// `POSTBOX_RECEIPT_OUTCOME` (`"completed"` or `"dead-lettered"`), `POSTBOX_RECEIPT_AT` (ms
    /// since the Unix epoch, decimal) and, for a dead letter, `POSTBOX_RECEIPT_REASON`.
    /// Receipts are not held to the receipt queue's quotas. A missing (or temporary) queue is
    /// refused with `POSTBOX_INVALID_ARGUMENT`, and the queue is in use, as for `forward_to`. In
    /// a store an older postbox wrote, where it may be missing, a receipt becomes a dead letter
    /// of this queue (`POSTBOX_REASON_DESTINATION_MISSING`). As `forward_to`: NULL not
    /// mentioned (default: none),
    /// `POSTBOX_OPTION_RECEIPTS_TO` clears it, and `postbox_queue_options_get` writes a string
    /// owned by the queue handle.
    pub receipts_to: *const c_char,
    /// The queue, its dead-letter queue and its messages are deleted once this many ms have
    /// passed without activity (a send, receive, settle or lock renewal; a queue holding locked
    /// messages is never idle) — within a second after that (usually about a tenth of a
    /// second: activity is recorded to a tenth of a second), never before (default: never; 0:
    /// not mentioned;
    /// `POSTBOX_OPTION_AUTO_DELETE_ON_IDLE` turns it off).
    pub auto_delete_on_idle_ms: u64,
}

impl Default for postbox_queue_options {
    fn default() -> Self {
        postbox_queue_options {
            struct_size: 0,
            max_deliveries: 0,
            lock_duration_ms: 0,
            default_ttl_ms: 0,
            max_message_size: 0,
            max_messages: 0,
            max_bytes: 0,
            dedup_window_ms: 0,
            clear: 0,
            reserved: 0,
            forward_to: std::ptr::null(),
            forward_dead_letters_to: std::ptr::null(),
            journal_max_messages: 0,
            requires_session: 0,
            reserved2: 0,
            receipts_to: std::ptr::null(),
            auto_delete_on_idle_ms: 0,
        }
    }
}

/// The size of the struct before `clear` was added: callers built against that header pass it.
pub(crate) const QUEUE_OPTIONS_V1: usize = std::mem::offset_of!(postbox_queue_options, clear);
/// The size of the struct before `forward_to` was added (with `clear`; its padding is now
/// `reserved`): callers built against that header pass it, and neither read nor get the
/// forwarding, journal and session fields.
pub(crate) const QUEUE_OPTIONS_V2: usize = std::mem::offset_of!(postbox_queue_options, forward_to);
/// The size of the struct before `receipts_to` was added: callers built against that header
/// pass it, and neither read nor get the receipts and idle-deletion fields.
pub(crate) const QUEUE_OPTIONS_V3: usize = std::mem::offset_of!(postbox_queue_options, receipts_to);
const QUEUE_OPTIONS_FULL: usize = size_of::<postbox_queue_options>();

// The layouts older headers compiled against (on 64-bit targets), and no padding anywhere:
// `VersionedOut` copies an older caller's prefix of the struct.
const _: () = {
    assert!(QUEUE_OPTIONS_V1 == 2 * size_of::<u32>() + 6 * size_of::<u64>());
    assert!(QUEUE_OPTIONS_V2 == QUEUE_OPTIONS_V1 + 2 * size_of::<u32>());
    assert!(
        QUEUE_OPTIONS_V3
            == QUEUE_OPTIONS_V2
                + 2 * size_of::<*const c_char>()
                + size_of::<u64>()
                + size_of::<c_int>()
                + size_of::<u32>()
    );
    assert!(QUEUE_OPTIONS_FULL == QUEUE_OPTIONS_V3 + size_of::<*const c_char>() + size_of::<u64>());
};

/// One user property of a message to send.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct postbox_property {
    /// NUL-terminated UTF-8 key.
    pub key: *const c_char,
    /// `POSTBOX_PROPERTY_STRING` (the value must be UTF-8) or `POSTBOX_PROPERTY_BYTES`.
    pub kind: u32,
    /// The value's bytes (need not be NUL-terminated); may be NULL when `value_len` is 0.
    pub value: *const u8,
    /// Length of `value` in bytes.
    pub value_len: usize,
}

/// The properties of a message to send (`postbox_send`, `postbox_send_batch`). A zeroed struct
/// with `struct_size` set means "no properties, default priority, visible now, the queue's
/// default TTL"; `postbox_send_options_init` does exactly that. Strings are NUL-terminated UTF-8,
/// NULL for "not set". Everything is copied during the call.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct postbox_send_options {
    /// `sizeof(postbox_send_options)`.
    pub struct_size: u32,
    /// Priority 0 (lowest) to 7 (highest), used when `has_priority` is non-zero; otherwise 3.
    pub priority: u32,
    /// Non-zero: `priority` is set.
    pub has_priority: c_int,
    /// Non-zero: `sequence` is set.
    pub has_sequence: c_int,
    /// The sender's sequence number within its group.
    pub sequence: u64,
    /// A short description for people (MSMQ `Label`, Service Bus `Subject`).
    pub label: *const c_char,
    /// MIME type of the body, e.g. `application/json`.
    pub content_type: *const c_char,
    /// Ties a reply to its request.
    pub correlation_id: *const c_char,
    /// Name of the queue replies should go to.
    pub reply_to: *const c_char,
    /// Key for duplicate detection within the queue's dedup window.
    pub message_key: *const c_char,
    /// Ordered group (session) the message belongs to.
    pub group: *const c_char,
    /// Deliver no earlier than this many ms after the send commits; 0: at once.
    pub delay_ms: u64,
    /// Deliver no earlier than this time (ms since the Unix epoch); 0: not set. Setting both
    /// `delay_ms` and `visible_at_ms` is `POSTBOX_INVALID_ARGUMENT`.
    pub visible_at_ms: u64,
    /// Time to live in ms: not received by then, the message is dead-lettered (`TTLExpired`);
    /// 0: the queue's default.
    pub ttl_ms: u64,
    /// Absolute expiry (ms since the Unix epoch); 0: not set. Exclusive with `ttl_ms`.
    pub expires_at_ms: u64,
    /// User properties: an array of `property_count` entries (NULL when 0).
    pub properties: *const postbox_property,
    /// Number of entries in `properties`.
    pub property_count: usize,
    /// For a collator (`postbox_collate`): non-zero declares the length of the message's
    /// series, how many messages it has (any message of the series may declare it; several if
    /// they agree). 0: not declared. Kept with the message as the string user property
    /// `POSTBOX_SERIES_LENGTH_PROPERTY`, which released messages carry.
    pub series_length: u64,
    /// For a collator: non-zero marks this message as the last of its series (its `sequence`
    /// is the series' length). Kept as the user property `POSTBOX_SERIES_LAST_PROPERTY`.
    pub series_last: c_int,
    /// Reserved (keeps the struct free of padding); ignored.
    pub reserved: u32,
}

impl Default for postbox_send_options {
    fn default() -> Self {
        postbox_send_options {
            struct_size: 0,
            priority: 0,
            has_priority: 0,
            has_sequence: 0,
            sequence: 0,
            label: std::ptr::null(),
            content_type: std::ptr::null(),
            correlation_id: std::ptr::null(),
            reply_to: std::ptr::null(),
            message_key: std::ptr::null(),
            group: std::ptr::null(),
            delay_ms: 0,
            visible_at_ms: 0,
            ttl_ms: 0,
            expires_at_ms: 0,
            properties: std::ptr::null(),
            property_count: 0,
            series_length: 0,
            series_last: 0,
            reserved: 0,
        }
    }
}

/// The size of the struct before `series_length` was added: callers built against that header
/// pass it, and declare a collator series' length through the user property.
const SEND_OPTIONS_V1: usize = std::mem::offset_of!(postbox_send_options, series_length);
const SEND_OPTIONS_FULL: usize = size_of::<postbox_send_options>();

// The layout older headers compiled against, and no padding anywhere (a later field must not
// land in bytes an older caller left unset).
const _: () = {
    assert!(
        SEND_OPTIONS_V1
            == 4 * size_of::<u32>()
                + 5 * size_of::<u64>()
                + 7 * size_of::<*const c_char>()
                + size_of::<usize>()
    );
    assert!(SEND_OPTIONS_FULL == SEND_OPTIONS_V1 + size_of::<u64>() + 2 * size_of::<u32>());
};

/// One message of `postbox_send_batch`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct postbox_send_item {
    /// The body (may be NULL when `body_len` is 0).
    pub body: *const u8,
    /// Length of the body in bytes.
    pub body_len: usize,
    /// Properties, or NULL for none.
    pub options: *const postbox_send_options,
}

/// Exact counts of a queue, filled by `postbox_queue_stats`. This struct has no `struct_size`,
/// so it never grows; `postbox_queue_counts_get` fills `postbox_queue_counts`, which also
/// counts deferred messages and may gain fields.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct postbox_stats {
    /// Receivable now.
    pub active: u64,
    /// Held by a receiver or a transaction.
    pub locked: u64,
    /// Waiting for their visible time (scheduled, or abandoned with a delay).
    pub scheduled: u64,
    /// In this queue's dead-letter queue (0 for a dead-letter queue itself).
    pub dead_lettered: u64,
    /// Message bytes held (active, locked, scheduled and deferred), each message counted as for
    /// `max_message_size`: body, text properties, user property keys and values.
    pub bytes: u64,
}

/// Exact counts of a queue, filled by `postbox_queue_counts_get`: the successor of
/// `postbox_stats`, with the deferred messages and room to grow.
///
/// Versioned: the caller sets `struct_size` to `sizeof(postbox_queue_counts)` (or calls
/// `postbox_queue_counts_init`) before the call. Later versions of the library append fields
/// and keep accepting the shorter struct of an older header: a caller built against an older
/// header gets only the fields its `struct_size` covers, and nothing past them is written.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct postbox_queue_counts {
    /// `sizeof(postbox_queue_counts)`, set by the caller; written back unchanged.
    pub struct_size: u32,
    /// Reserved (keeps the counts 8-byte aligned without padding); written as 0.
    pub reserved: u32,
    /// Receivable now.
    pub active: u64,
    /// Held by a receiver or a transaction.
    pub locked: u64,
    /// Waiting for their visible time (scheduled, or abandoned with a delay).
    pub scheduled: u64,
    /// Set aside with `postbox_message_defer`: receivable only by id (`postbox_receive_by_id`).
    /// A deferred message locked by such a receive counts as `locked` until settled.
    pub deferred: u64,
    /// In this queue's dead-letter queue (0 for a dead-letter queue itself).
    pub dead_lettered: u64,
    /// Message bytes held (active, locked, scheduled and deferred), each message counted as for
    /// `max_message_size`: body, text properties, user property keys and values.
    pub bytes: u64,
}

/// The first version of `postbox_queue_counts`: the smallest `struct_size` accepted.
const QUEUE_COUNTS_V1: usize = size_of::<postbox_queue_counts>();

// `VersionedOut` copies an older caller's prefix of the struct: it holds no padding.
const _: () = assert!(QUEUE_COUNTS_V1 == 2 * size_of::<u32>() + 6 * size_of::<u64>());

/// An iterator over a queue's receivable messages in delivery order, without locking them.
/// Created by `postbox_browse_open`, advanced by `postbox_browse_next`, freed with
/// `postbox_browse_free`. Each step reads a fresh snapshot, so it sees concurrent changes and
/// never blocks writers. Thread-safe (steps are serialised), though one thread per browser is
/// the natural use.
pub struct postbox_browser {
    it: Mutex<Browse>,
    tag: StoreTag,
}

fn queue<'a>(q: *const postbox_queue) -> Outcome<&'a postbox_queue> {
    arg_ref(q, "queue")
}

/// A queue handle for a call that reads or writes the store: refused in a forked child.
pub(crate) fn live<'a>(q: *const postbox_queue) -> Outcome<&'a postbox_queue> {
    let q = queue(q)?;
    q.tag.check_process()?;
    Ok(q)
}

/// Fills `options` with the defaults and sets its `struct_size`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `options` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_queue_options_init(options: *mut postbox_queue_options) -> c_int {
    guard(|| {
        Out::required(options, "options")?.write(postbox_queue_options {
            struct_size: QUEUE_OPTIONS_FULL as u32,
            ..Default::default()
        });
        Ok(POSTBOX_OK)
    })
}

pub(crate) fn queue_options(o: &postbox_queue_options) -> Outcome<QueueOptions> {
    if o.clear & !ALL_OPTIONS != 0 {
        return Err(Failure::invalid(format!(
            "options.clear has unknown flags {:#x} (use the POSTBOX_OPTION_* flags)",
            o.clear & !ALL_OPTIONS
        )));
    }
    let d = QueueOptions::default();
    let mut q = QueueOptions::default();
    // Each option: its field (0: not mentioned), its flag, and what the flag does.
    let conflict = |field: &str| {
        Failure::invalid(format!(
            "options.{field} is set and its flag is in options.clear: choose one"
        ))
    };
    let clear = |flag: u32| o.clear & flag != 0;
    if o.lock_duration_ms != 0 {
        if clear(POSTBOX_OPTION_LOCK_DURATION) {
            return Err(conflict("lock_duration_ms"));
        }
        q = q.lock_duration(Duration::from_millis(o.lock_duration_ms));
    } else if clear(POSTBOX_OPTION_LOCK_DURATION) {
        q = q.lock_duration(d.lock_duration);
    }
    if o.max_deliveries != 0 {
        if clear(POSTBOX_OPTION_MAX_DELIVERIES) {
            return Err(conflict("max_deliveries"));
        }
        q = q.max_deliveries(o.max_deliveries);
    } else if clear(POSTBOX_OPTION_MAX_DELIVERIES) {
        q = q.max_deliveries(d.max_deliveries);
    }
    if o.default_ttl_ms != 0 {
        if clear(POSTBOX_OPTION_DEFAULT_TTL) {
            return Err(conflict("default_ttl_ms"));
        }
        q = q.default_ttl(Duration::from_millis(o.default_ttl_ms));
    } else if clear(POSTBOX_OPTION_DEFAULT_TTL) {
        q = q.no_default_ttl();
    }
    if o.max_message_size != 0 {
        if clear(POSTBOX_OPTION_MAX_MESSAGE_SIZE) {
            return Err(conflict("max_message_size"));
        }
        let size = usize::try_from(o.max_message_size)
            .map_err(|_| Failure::invalid("options.max_message_size does not fit in size_t"))?;
        q = q.max_message_size(size);
    } else if clear(POSTBOX_OPTION_MAX_MESSAGE_SIZE) {
        q = q.max_message_size(d.max_message_size);
    }
    if o.max_messages != 0 {
        if clear(POSTBOX_OPTION_MAX_MESSAGES) {
            return Err(conflict("max_messages"));
        }
        q = q.max_messages(o.max_messages);
    } else if clear(POSTBOX_OPTION_MAX_MESSAGES) {
        q = q.no_max_messages();
    }
    if o.max_bytes != 0 {
        if clear(POSTBOX_OPTION_MAX_BYTES) {
            return Err(conflict("max_bytes"));
        }
        q = q.max_bytes(o.max_bytes);
    } else if clear(POSTBOX_OPTION_MAX_BYTES) {
        q = q.no_max_bytes();
    }
    if o.dedup_window_ms != 0 {
        if clear(POSTBOX_OPTION_DEDUP_WINDOW) {
            return Err(conflict("dedup_window_ms"));
        }
        q = q.dedup_window(Duration::from_millis(o.dedup_window_ms));
    } else if clear(POSTBOX_OPTION_DEDUP_WINDOW) {
        q = q.no_dedup_window();
    }
    if let Some(name) = arg_opt_str(o.forward_to, "options.forward_to")? {
        if clear(POSTBOX_OPTION_FORWARD_TO) {
            return Err(conflict("forward_to"));
        }
        q = q.forward_to(name);
    } else if clear(POSTBOX_OPTION_FORWARD_TO) {
        q = q.no_forward_to();
    }
    if let Some(name) = arg_opt_str(o.forward_dead_letters_to, "options.forward_dead_letters_to")? {
        if clear(POSTBOX_OPTION_FORWARD_DEAD_LETTERS_TO) {
            return Err(conflict("forward_dead_letters_to"));
        }
        q = q.forward_dead_letters_to(name);
    } else if clear(POSTBOX_OPTION_FORWARD_DEAD_LETTERS_TO) {
        q = q.no_forward_dead_letters_to();
    }
    if o.journal_max_messages != 0 {
        if clear(POSTBOX_OPTION_JOURNAL) {
            return Err(conflict("journal_max_messages"));
        }
        q = q.journal(o.journal_max_messages);
    } else if clear(POSTBOX_OPTION_JOURNAL) {
        q = q.no_journal();
    }
    if let Some(name) = arg_opt_str(o.receipts_to, "options.receipts_to")? {
        if clear(POSTBOX_OPTION_RECEIPTS_TO) {
            return Err(conflict("receipts_to"));
        }
        q = q.receipts_to(name);
    } else if clear(POSTBOX_OPTION_RECEIPTS_TO) {
        q = q.no_receipts_to();
    }
    if o.auto_delete_on_idle_ms != 0 {
        if clear(POSTBOX_OPTION_AUTO_DELETE_ON_IDLE) {
            return Err(conflict("auto_delete_on_idle_ms"));
        }
        q = q.auto_delete_on_idle(Duration::from_millis(o.auto_delete_on_idle_ms));
    } else if clear(POSTBOX_OPTION_AUTO_DELETE_ON_IDLE) {
        q = q.no_auto_delete_on_idle();
    }
    if o.requires_session != 0 {
        q = q.requires_session(true);
    }
    Ok(q)
}

/// The C struct of stored options `o`; `name` keeps each queue name NUL-terminated for as long
/// as the struct is documented to be valid, and returns its pointer (NULL for `None`).
pub(crate) fn options_struct(
    o: &QueueOptions,
    mut name: impl FnMut(Option<&str>) -> Outcome<*const c_char>,
) -> Outcome<postbox_queue_options> {
    Ok(postbox_queue_options {
        struct_size: QUEUE_OPTIONS_FULL as u32,
        max_deliveries: o.max_deliveries,
        lock_duration_ms: ms_of(o.lock_duration),
        default_ttl_ms: o.default_ttl.map_or(0, ms_of),
        max_message_size: u64::try_from(o.max_message_size).unwrap_or(u64::MAX),
        max_messages: o.max_messages.unwrap_or(0),
        max_bytes: o.max_bytes.unwrap_or(0),
        dedup_window_ms: o.dedup_window.map_or(0, ms_of),
        clear: 0,
        reserved: 0,
        forward_to: name(o.forward_to.as_deref())?,
        forward_dead_letters_to: name(o.forward_dead_letters_to.as_deref())?,
        journal_max_messages: o.journal.unwrap_or(0),
        requires_session: c_int::from(o.requires_session),
        reserved2: 0,
        receipts_to: name(o.receipts_to.as_deref())?,
        auto_delete_on_idle_ms: o.auto_delete_on_idle.map_or(0, ms_of),
    })
}

/// A duration as whole ms for C, rounded up so that a set option never reads as 0 ("none").
fn ms_of(d: Duration) -> u64 {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 && !d.is_zero() { 1 } else { ms }
}

/// Opens queue `name` (NUL-terminated UTF-8, 1–255 bytes), creating it if it does not exist.
/// An existing queue keeps its messages, and its stored options except those `options`
/// mentions (see `postbox_queue_options`); with `options` NULL nothing changes (a new queue
/// gets the defaults). Names ending in `POSTBOX_DEAD_LETTER_SUFFIX` are reserved: such a name
/// opens the dead-letter queue of an existing queue (`postbox_queue_dead_letters` is the usual
/// way) and is refused otherwise.
///
/// `queue_out` receives a handle the caller owns and frees with `postbox_queue_free`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument, bad name, a name ending in
/// `POSTBOX_DEAD_LETTER_SUFFIX` whose queue does not exist, bad `struct_size`, unknown `clear`
/// flags, an option both set and cleared, an invalid option such as `max_message_size` above
/// 4 GiB - 1, a `forward_to` or `forward_dead_letters_to` that names a missing queue or closes a
/// loop, `requires_session` for an existing queue created without it);
/// `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors (`POSTBOX_IO`, `POSTBOX_CORRUPTED`,
/// `POSTBOX_STORAGE_FULL`, `POSTBOX_OUTCOME_UNKNOWN`).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_queue_open(
    store: *mut postbox_store,
    name: *const c_char,
    options: *const postbox_queue_options,
    queue_out: *mut *mut postbox_queue,
) -> c_int {
    guard(|| {
        let store = arg_ref(store, "store")?;
        let name = arg_str(name, "name")?;
        let out = Out::required(queue_out, "queue_out")?;
        let options = read_versioned(options, QUEUE_OPTIONS_V1, "options")?;
        store.tag.check_process()?;
        let q = match options {
            None => store.store.queue(name)?,
            Some(o) => store.store.queue_with(name, queue_options(&o)?)?,
        };
        out.write(postbox_queue::boxed(q, &store.store, store.tag));
        Ok(POSTBOX_OK)
    })
}

/// Opens queue `name` only if it exists, never creating it (a late reply cannot re-create a
/// deleted temporary queue; a typo does not create a new queue). A dead-letter queue opens by
/// its full name. `queue_out` receives a handle the caller frees with `postbox_queue_free`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_QUEUE_NOT_FOUND` (no such queue); `POSTBOX_INVALID_ARGUMENT` (NULL
/// argument, bad name); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_queue_open_existing(
    store: *mut postbox_store,
    name: *const c_char,
    queue_out: *mut *mut postbox_queue,
) -> c_int {
    guard(|| {
        let store = arg_ref(store, "store")?;
        let name = arg_str(name, "name")?;
        let out = Out::required(queue_out, "queue_out")?;
        store.tag.check_process()?;
        let q = store.store.open_queue(name)?;
        out.write(postbox_queue::boxed(q, &store.store, store.tag));
        Ok(POSTBOX_OK)
    })
}

/// Reads the queue's options as stored now (another handle or process may have changed them)
/// into `options_out`, whose `struct_size` the caller sets first (`sizeof(postbox_queue_options)`,
/// or `postbox_queue_options_init`). Options that are not set (no default TTL, no quota, no
/// dedup window, no journal, no idle deletion) read as 0, and `forward_to` /
/// `forward_dead_letters_to` / `receipts_to` as NULL; the others read as their values,
/// defaults included; `clear` reads as 0. The names are NUL-terminated strings owned by the
/// queue handle: valid until `queue` is freed (never free them), unchanged by later calls. Passing the result to `postbox_queue_open` changes nothing.
/// A caller built against an older header (a smaller `struct_size`) gets only the fields its
/// struct has.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, bad `struct_size`);
/// `POSTBOX_QUEUE_NOT_FOUND` (the queue was deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`;
/// storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_queue_options_get(
    queue: *const postbox_queue,
    options_out: *mut postbox_queue_options,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let out = VersionedOut::required(options_out, QUEUE_OPTIONS_V1, "options_out")?;
        let o = q.queue.options()?;
        out.write(options_struct(&o, |name| q.name_ptr(name))?);
        Ok(POSTBOX_OK)
    })
}

/// Frees a queue handle (the queue and its messages stay in the store). NULL is a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_queue_free(queue: *mut postbox_queue) {
    guard(|| {
        drop(take_box(queue));
        Ok(())
    })
}

/// The queue's name (UTF-8, not NUL-terminated); absent view for NULL. Valid until the queue
/// handle is freed.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_queue_name(queue: *const postbox_queue) -> postbox_bytes {
    guard(|| {
        Ok(postbox_bytes::of(
            self::queue(queue)?.queue.name().as_bytes(),
        ))
    })
}

/// Whether this is a dead-letter queue; false for NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_queue_is_dead_letter(queue: *const postbox_queue) -> bool {
    guard(|| Ok(self::queue(queue)?.queue.is_dead_letter_queue()))
}

/// Opens this queue's dead-letter queue: a queue like any other (receive, peek, stats, purge),
/// whose messages carry the dead-letter details and can be moved back with
/// `postbox_message_resubmit`. `dead_letters_out` receives a handle the caller frees with
/// `postbox_queue_free`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, or `queue` is itself a dead-letter queue);
/// `POSTBOX_QUEUE_NOT_FOUND` (the queue was deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`;
/// storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_queue_dead_letters(
    queue: *const postbox_queue,
    dead_letters_out: *mut *mut postbox_queue,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let out = Out::required(dead_letters_out, "dead_letters_out")?;
        let dlq = q.queue.dead_letters()?;
        out.write(postbox_queue::boxed(dlq, &q.store, q.tag));
        Ok(POSTBOX_OK)
    })
}

/// Opens this queue's journal: the completed messages it keeps while its `journal_max_messages`
/// option is set (MSMQ's journal queue), oldest first within a priority, at most that many.
/// A queue like any other to browse, peek, get, receive and purge. `journal_out` receives a
/// handle the caller frees with `postbox_queue_free`. The journal stays (with what it holds)
/// when the option is turned off later, and goes when the queue is deleted.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, or the queue never had a journal: set its
/// `journal_max_messages` first); `POSTBOX_QUEUE_NOT_FOUND` (the queue was deleted);
/// `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_queue_journal(
    queue: *const postbox_queue,
    journal_out: *mut *mut postbox_queue,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let out = Out::required(journal_out, "journal_out")?;
        let journal = q.queue.journal()?;
        out.write(postbox_queue::boxed(journal, &q.store, q.tag));
        Ok(POSTBOX_OK)
    })
}

/// Reads the queue's exact counts into `stats_out`. Time-driven changes (expired locks and
/// messages, due scheduled messages) are applied first, so the counts are true as of the call.
/// Deferred messages (set aside with `postbox_message_defer`) are in none of these counts,
/// though their bytes are in `bytes`: `postbox_queue_counts_get` also reports deferred
/// messages.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_QUEUE_NOT_FOUND` (deleted);
/// `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_queue_stats(
    queue: *const postbox_queue,
    stats_out: *mut postbox_stats,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let out = Out::required(stats_out, "stats_out")?;
        let s = q.queue.stats()?;
        out.write(postbox_stats {
            active: s.active,
            locked: s.locked,
            scheduled: s.scheduled,
            dead_lettered: s.dead_lettered,
            bytes: s.bytes,
        });
        Ok(POSTBOX_OK)
    })
}

/// Fills `counts` with zeros and sets its `struct_size`, ready for `postbox_queue_counts_get`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `counts` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_queue_counts_init(counts: *mut postbox_queue_counts) -> c_int {
    guard(|| {
        Out::required(counts, "counts")?.write(postbox_queue_counts {
            struct_size: QUEUE_COUNTS_V1 as u32,
            ..Default::default()
        });
        Ok(POSTBOX_OK)
    })
}

/// Reads the queue's exact counts, deferred messages included, into `counts_out`, whose
/// `struct_size` the caller sets first (`sizeof(postbox_queue_counts)`, or
/// `postbox_queue_counts_init`). As `postbox_queue_stats`, time-driven changes are applied
/// first, so the counts are true as of the call. A caller built against an older header gets
/// only the fields its `struct_size` covers.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, bad `struct_size`: 0, smaller than the first
/// version of the struct, or larger than this library's); `POSTBOX_QUEUE_NOT_FOUND` (deleted);
/// `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_queue_counts_get(
    queue: *const postbox_queue,
    counts_out: *mut postbox_queue_counts,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let out = VersionedOut::required(counts_out, QUEUE_COUNTS_V1, "counts_out")?;
        let s = q.queue.stats()?;
        out.write(postbox_queue_counts {
            struct_size: QUEUE_COUNTS_V1 as u32,
            reserved: 0,
            active: s.active,
            locked: s.locked,
            scheduled: s.scheduled,
            deferred: s.deferred,
            dead_lettered: s.dead_lettered,
            bytes: s.bytes,
        });
        Ok(POSTBOX_OK)
    })
}

/// Removes every message of the queue (receivable, scheduled, deferred and locked: holders of
/// locks get `POSTBOX_LOCK_LOST` when they settle). The dead-letter queue is left alone.
/// `removed_out` may be NULL; on success it receives how many messages were removed.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL queue); `POSTBOX_QUEUE_NOT_FOUND` (deleted);
/// `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_queue_purge(queue: *mut postbox_queue, removed_out: *mut u64) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let out = Out::optional(removed_out);
        out.write(q.queue.purge()?);
        Ok(POSTBOX_OK)
    })
}

/// Fills `options` with the defaults (no properties, priority 3) and sets its `struct_size`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `options` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_send_options_init(options: *mut postbox_send_options) -> c_int {
    guard(|| {
        Out::required(options, "options")?.write(postbox_send_options {
            struct_size: SEND_OPTIONS_FULL as u32,
            ..Default::default()
        });
        Ok(POSTBOX_OK)
    })
}

/// Reads a C array of user properties (`postbox_send_options.properties`,
/// `postbox_filter.properties`): keys NUL-terminated UTF-8, each at most once, string values
/// UTF-8. `what` names the array in error messages.
pub(crate) fn user_properties<'a>(
    properties: *const postbox_property,
    count: usize,
    what: &str,
) -> Outcome<Vec<(&'a str, PropertyValue)>> {
    let props = arg_slice(properties, count, what)?;
    let mut keys = std::collections::HashSet::with_capacity(props.len());
    let mut out = Vec::with_capacity(props.len());
    for (i, p) in props.iter().enumerate() {
        let key = arg_str(p.key, "key")
            .map_err(|f| Failure::invalid(format!("{what}[{i}]: {}", f.message)))?;
        // A map would keep the last value silently; a C array with a key twice is a bug.
        if !keys.insert(key) {
            return Err(Failure::invalid(format!(
                "{what}[{i}]: key {key:?} is listed twice"
            )));
        }
        let value = arg_slice(p.value, p.value_len, "value")
            .map_err(|f| Failure::invalid(format!("{what}[{i}]: {}", f.message)))?;
        let value = match p.kind {
            POSTBOX_PROPERTY_STRING => {
                let s = std::str::from_utf8(value).map_err(|_| {
                    Failure::invalid(format!("{what}[{i}] is a string but not valid UTF-8"))
                })?;
                PropertyValue::String(s.to_owned())
            }
            POSTBOX_PROPERTY_BYTES => PropertyValue::Bytes(value.to_vec()),
            other => {
                return Err(Failure::invalid(format!(
                    "{what}[{i}].kind must be POSTBOX_PROPERTY_STRING or POSTBOX_PROPERTY_BYTES, got {other}"
                )));
            }
        };
        out.push((key, value));
    }
    Ok(out)
}

pub(crate) fn build_message(
    body: *const u8,
    body_len: usize,
    options: *const postbox_send_options,
    what: &str,
) -> Outcome<Message> {
    let body = arg_slice(body, body_len, what)?;
    let mut m = Message::new(body.to_vec());
    let Some(o) = read_versioned(options, SEND_OPTIONS_V1, "options")? else {
        return Ok(m);
    };
    if o.has_sequence != 0 {
        m = m.sequence(o.sequence);
    }
    if let Some(s) = arg_opt_str(o.label, "options.label")? {
        m = m.label(s);
    }
    if let Some(s) = arg_opt_str(o.content_type, "options.content_type")? {
        m = m.content_type(s);
    }
    if let Some(s) = arg_opt_str(o.correlation_id, "options.correlation_id")? {
        m = m.correlation_id(s);
    }
    if let Some(s) = arg_opt_str(o.reply_to, "options.reply_to")? {
        m = m.reply_to(s);
    }
    if let Some(s) = arg_opt_str(o.message_key, "options.message_key")? {
        m = m.message_key(s);
    }
    if let Some(s) = arg_opt_str(o.group, "options.group")? {
        m = m.group(s);
    }
    let ms = |v: u64| (v != 0).then(|| Duration::from_millis(v));
    let at = |v: u64| (v != 0).then(|| from_unix_ms(v));
    let times = FlatSend {
        priority: (o.has_priority != 0).then_some(i128::from(o.priority)),
        delay: ms(o.delay_ms),
        visible_at: at(o.visible_at_ms),
        ttl: ms(o.ttl_ms),
        expires_at: at(o.expires_at_ms),
    };
    m = times.apply(m).map_err(|e| {
        Failure::invalid(match e {
            FlatSendError::Priority(p) => format!("options.priority must be 0 to 7, got {p}"),
            FlatSendError::DelayAndVisibleAt => {
                "options.delay_ms and options.visible_at_ms are exclusive".to_owned()
            }
            FlatSendError::TtlAndExpiresAt => {
                "options.ttl_ms and options.expires_at_ms are exclusive".to_owned()
            }
        })
    })?;
    let mut declared_by_property = false;
    for (key, value) in user_properties(o.properties, o.property_count, "options.properties")? {
        declared_by_property |=
            key == postbox::SERIES_LENGTH_PROPERTY || key == postbox::SERIES_LAST_PROPERTY;
        m = m.property(key, value);
    }
    if o.series_length != 0 || o.series_last != 0 {
        if declared_by_property {
            return Err(Failure::invalid(
                "options.series_length / series_last and the (deprecated) series properties \
                 say the same thing: set the fields only",
            ));
        }
        if o.series_length != 0 {
            m = m.series_length(o.series_length);
        }
        if o.series_last != 0 {
            m = m.last_in_series();
        }
    }
    Ok(m)
}

/// Sends one message with body `body[0..body_len]` (copied; NULL allowed when `body_len` is 0)
/// and the properties in `options` (NULL for none).
///
/// With `tx` NULL the send commits on its own: when it returns `POSTBOX_OK` the message is
/// durable (under the default durability) and `id_out` (may be NULL) receives its id. With a
/// transaction the message is stored when `tx` commits; `id_out` then receives the id it will
/// have (reserved now, so it can go into an application row or another message of the same
/// transaction; never used if the transaction aborts). `tx` must come from the same store as
/// `queue`. A duplicate (its `message_key` within the queue's dedup window) stores nothing and
/// gets the original's id; `postbox_send_checked` also says so.
///
/// The message's size — body, text properties, user property keys and values — counts against
/// the queue's `max_message_size` and `max_bytes`. Text properties (`label` … `group`) are at
/// most `POSTBOX_MAX_TEXT_PROPERTY_LEN` bytes each, property keys 1 to
/// `POSTBOX_MAX_PROPERTY_KEY_LEN` bytes, each key at most once.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_TOO_LARGE` (the message is above the queue's `max_message_size`,
/// checked at once, also with a transaction); `POSTBOX_QUEUE_FULL` (quota; with a
/// transaction, reported by the commit); `POSTBOX_INVALID_ARGUMENT` (NULL queue, NULL body with
/// a length, bad options, priority above 7, invalid UTF-8, a text property or property key out
/// of bounds, a property key listed twice, a dead-letter queue, a transaction of another store,
/// a finished transaction); `POSTBOX_QUEUE_NOT_FOUND` (queue deleted; at once with a
/// transaction too); `POSTBOX_CLOSED` (at once with a transaction too); `POSTBOX_FORKED`;
/// `POSTBOX_STORAGE_FULL` (the disk is full: nothing was stored); `POSTBOX_OUTCOME_UNKNOWN`
/// (the commit failed after it may have reached the disk); other storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_send(
    queue: *mut postbox_queue,
    tx: *mut postbox_tx,
    body: *const u8,
    body_len: usize,
    options: *const postbox_send_options,
    id_out: *mut u64,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let out = Out::optional(id_out);
        let m = build_message(body, body_len, options, "body")?;
        let id = if tx.is_null() {
            q.queue.send(m)?
        } else {
            with_tx(tx, q.tag, |t| Ok(t.send(&q.queue, m)?))?
        };
        out.write(id.get());
        Ok(POSTBOX_OK)
    })
}

/// Sends `count` messages atomically: all are stored in one commit, or none. `ids_out` may be
/// NULL, or an array of `count` elements that receives the ids in order (with a transaction,
/// the ids reserved for them, as in `postbox_send`). `count` may be 0.
///
/// # Returns
/// As `postbox_send`; on any error no message of the batch was stored, and the error names the
/// offending item (with a transaction, none of the batch joined it: the transaction stays as it
/// was and may still be committed).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_send_batch(
    queue: *mut postbox_queue,
    tx: *mut postbox_tx,
    items: *const postbox_send_item,
    count: usize,
    ids_out: *mut u64,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let items = arg_slice(items, count, "items")?;
        let ids = if ids_out.is_null() {
            None
        } else {
            Some(arg_slice_mut(ids_out, count, "ids_out")?)
        };
        let msgs = items
            .iter()
            .enumerate()
            .map(|(i, it)| {
                build_message(it.body, it.body_len, it.options, "body")
                    .map_err(|f| Failure::new(f.code, format!("items[{i}]: {}", f.message)))
            })
            .collect::<Outcome<Vec<_>>>()?;
        if tx.is_null() {
            let got = q.queue.send_batch(msgs)?;
            if let Some(ids) = ids {
                for (slot, id) in ids.iter_mut().zip(got) {
                    *slot = id.get();
                }
            }
        } else {
            let got = with_tx(tx, q.tag, |t| Ok(t.send_batch_checked(&q.queue, msgs)?))?;
            if let Some(ids) = ids {
                for (slot, s) in ids.iter_mut().zip(got) {
                    *slot = s.id.get();
                }
            }
        }
        Ok(POSTBOX_OK)
    })
}

/// Reads the message at the head of the queue (the one a receive would take next) without
/// locking it. `message_out` receives a handle the caller frees with `postbox_message_free`; it
/// cannot be settled.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (nothing receivable: a normal outcome);
/// `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_QUEUE_NOT_FOUND` (the queue was deleted);
/// `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_peek(
    queue: *const postbox_queue,
    message_out: *mut *mut postbox_message,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let out = Out::required(message_out, "message_out")?;
        let env = q
            .queue
            .peek()?
            .ok_or_else(|| Failure::new(POSTBOX_NOT_FOUND, "the queue has nothing receivable"))?;
        out.write(
            postbox_message::new(HeldMessage::read(env, MessageState::Active), q.tag).into_raw(),
        );
        Ok(POSTBOX_OK)
    })
}

/// Waits up to `timeout_ms` milliseconds (0: do not wait; negative: without limit) for a
/// receivable message and reads the head of the queue without locking it, as `postbox_peek`;
/// another receiver may take it meanwhile.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_TIMEOUT` (nothing receivable in time); otherwise as `postbox_peek`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_peek_wait(
    queue: *const postbox_queue,
    timeout_ms: i64,
    message_out: *mut *mut postbox_message,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let out = Out::required(message_out, "message_out")?;
        let env = q.queue.peek_wait(timeout(timeout_ms))?.ok_or_else(|| {
            Failure::new(
                POSTBOX_TIMEOUT,
                format!(
                    "nothing receivable arrived in queue {:?} within {timeout_ms} ms",
                    q.queue.name()
                ),
            )
        })?;
        out.write(
            postbox_message::new(HeldMessage::read(env, MessageState::Active), q.tag).into_raw(),
        );
        Ok(POSTBOX_OK)
    })
}

/// Looks up message `id` of this queue, whatever its state (receivable, locked, scheduled,
/// deferred), without locking it. `message_out` receives a handle the caller frees with
/// `postbox_message_free`; `postbox_message_queue_state` says which state it found.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (no such message in this queue);
/// `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_get(
    queue: *const postbox_queue,
    id: u64,
    message_out: *mut *mut postbox_message,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let out = Out::required(message_out, "message_out")?;
        let (env, state) = q.queue.get_with_state(MessageId(id))?.ok_or_else(|| {
            Failure::new(
                POSTBOX_NOT_FOUND,
                format!("message {id} is not in queue {:?}", q.queue.name()),
            )
        })?;
        out.write(postbox_message::new(HeldMessage::read(env, state), q.tag).into_raw());
        Ok(POSTBOX_OK)
    })
}

/// Starts browsing the receivable messages of the queue in delivery order (priority, then send
/// order), without locking them. `browser_out` receives an iterator the caller frees with
/// `postbox_browse_free`. Nothing is read yet: a deleted queue or a closed store is reported
/// by `postbox_browse_next`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_FORKED`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_browse_open(
    queue: *const postbox_queue,
    browser_out: *mut *mut postbox_browser,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let out = Out::required(browser_out, "browser_out")?;
        out.write(Box::into_raw(Box::new(postbox_browser {
            it: Mutex::new(q.queue.browse()),
            tag: q.tag,
        })));
        Ok(POSTBOX_OK)
    })
}

/// Advances the browser: `message_out` receives the next message (a handle the caller frees
/// with `postbox_message_free`; it cannot be settled).
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_NOT_FOUND` at the end (and on every later call);
/// `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_QUEUE_NOT_FOUND` (the queue was deleted);
/// `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_browse_next(
    browser: *mut postbox_browser,
    message_out: *mut *mut postbox_message,
) -> c_int {
    guard(|| {
        let b = arg_ref(browser, "browser")?;
        let out = Out::required(message_out, "message_out")?;
        b.tag.check_process()?;
        let next = b.it.lock().next();
        let env =
            next.ok_or_else(|| Failure::new(POSTBOX_NOT_FOUND, "no further message to browse"))??;
        out.write(
            postbox_message::new(HeldMessage::read(env, MessageState::Active), b.tag).into_raw(),
        );
        Ok(POSTBOX_OK)
    })
}

/// Frees a browser. NULL is a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_browse_free(browser: *mut postbox_browser) {
    guard(|| {
        drop(take_box(browser));
        Ok(())
    })
}

/// Receives the next message, waiting up to `timeout_ms` milliseconds for one to arrive
/// (0: do not wait; negative: wait without limit).
///
/// With `tx` NULL (peek-lock): the message is locked for the queue's lock duration; settle it
/// with `postbox_message_complete` / `_abandon` / `_dead_letter` / `_resubmit`, or free it
/// unsettled to abandon it. With a transaction: the message belongs to `tx`, whose commit
/// completes it and whose abort returns it; the handle is for reading only.
///
/// `message_out` receives a handle the caller owns and frees with `postbox_message_free` (also
/// after settling it). The message's delivery count was incremented and persisted before it was
/// handed out; past the queue's `max_deliveries` it goes to the dead-letter queue instead.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_TIMEOUT` (nothing arrived in time: a normal outcome);
/// `POSTBOX_INVALID_ARGUMENT` (NULL queue or `message_out`, a transaction of another store or
/// already finished, a queue that requires sessions: accept a session instead);
/// `POSTBOX_QUEUE_NOT_FOUND` (queue deleted); `POSTBOX_CLOSED` (also when the store closes
/// during the wait); `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_receive(
    queue: *mut postbox_queue,
    tx: *mut postbox_tx,
    timeout_ms: i64,
    message_out: *mut *mut postbox_message,
) -> c_int {
    guard(|| {
        receive_one(
            queue,
            tx,
            timeout_ms,
            message_out,
            |q, wait| q.receive(wait),
            |t, q, wait| t.receive(q, wait),
        )
    })
}

/// The one receive of a single message behind `postbox_receive` and the selective receives:
/// `peek_lock` without a transaction, `in_tx` with one.
fn receive_one(
    queue: *mut postbox_queue,
    tx: *mut postbox_tx,
    timeout_ms: i64,
    message_out: *mut *mut postbox_message,
    peek_lock: impl FnOnce(&Queue, Duration) -> postbox::Result<Option<Received>>,
    in_tx: impl FnOnce(&mut Transaction, &Queue, Duration) -> postbox::Result<Option<Envelope>>,
) -> Outcome<c_int> {
    let q = live(queue)?;
    let out = Out::required(message_out, "message_out")?;
    let wait = timeout(timeout_ms);
    let nothing = || {
        Failure::new(
            POSTBOX_TIMEOUT,
            format!(
                "no message arrived in queue {:?} within {timeout_ms} ms",
                q.queue.name()
            ),
        )
    };
    let m = if tx.is_null() {
        let r = peek_lock(&q.queue, wait)?.ok_or_else(nothing)?;
        postbox_message::new(HeldMessage::received(r), q.tag)
    } else {
        let env = with_tx(tx, q.tag, |t| Ok(in_tx(t, &q.queue, wait)?))?.ok_or_else(nothing)?;
        postbox_message::new(HeldMessage::in_transaction(env, (), None, None), q.tag)
    };
    out.write(m.into_raw());
    Ok(POSTBOX_OK)
}

/// Receives message `id` of the queue, waiting up to `timeout_ms` for it to be receivable
/// (sent, its scheduled time come, its lock released); other messages are left alone. As
/// `postbox_receive` otherwise, with or without a transaction. The one way to receive a
/// deferred message (`postbox_message_defer`); a lock on it that ends unsettled leaves it
/// deferred.
///
/// On a queue that requires sessions this is refused, with or without a transaction: a held
/// session is exclusive, so only the holder of a group takes its messages, through
/// `postbox_session_receive_by_id`.
///
/// # Returns
/// As `postbox_receive`: `POSTBOX_TIMEOUT` also when `id` is not a receivable message of
/// this queue by the deadline (another queue's, completed, or never sent);
/// `POSTBOX_INVALID_ARGUMENT` also on a queue that requires sessions.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_receive_by_id(
    queue: *mut postbox_queue,
    tx: *mut postbox_tx,
    id: u64,
    timeout_ms: i64,
    message_out: *mut *mut postbox_message,
) -> c_int {
    guard(|| {
        let id = MessageId(id);
        receive_one(
            queue,
            tx,
            timeout_ms,
            message_out,
            |q, wait| q.receive_by_id(id, wait),
            |t, q, wait| t.receive_by_id(q, id, wait),
        )
    })
}

/// Receives the first message (in delivery order) whose correlation id is `correlation_id`
/// (NUL-terminated UTF-8), waiting up to `timeout_ms` for one: on a reply queue shared by
/// several requesters, each takes only its own replies. As `postbox_receive` otherwise.
///
/// The pick reads the queue's receivable messages in delivery order until one matches, so its
/// cost grows with the receivable messages ahead of the match. Refused on a queue that requires
/// sessions, with or without a transaction: use `postbox_session_receive_by_correlation_id`.
///
/// # Returns
/// As `postbox_receive`; also `POSTBOX_INVALID_ARGUMENT` for a NULL or invalid
/// `correlation_id`, and on a queue that requires sessions.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_receive_by_correlation_id(
    queue: *mut postbox_queue,
    tx: *mut postbox_tx,
    correlation_id: *const c_char,
    timeout_ms: i64,
    message_out: *mut *mut postbox_message,
) -> c_int {
    guard(|| {
        let cid = arg_str(correlation_id, "correlation_id")?;
        receive_one(
            queue,
            tx,
            timeout_ms,
            message_out,
            |q, wait| q.receive_by_correlation_id(cid, wait),
            |t, q, wait| t.receive_by_correlation_id(q, cid, wait),
        )
    })
}

/// Receives up to `max` messages with peek-lock in one commit, waiting up to `timeout_ms` for
/// the first (as in `postbox_receive`). `messages_out` is a caller-provided array of `max`
/// pointers; on success its first `*count_out` entries receive handles the caller frees with
/// `postbox_message_free`, and the rest are left untouched.
///
/// # Returns
/// `POSTBOX_OK` (at least one message); `POSTBOX_TIMEOUT` (none arrived in time);
/// `POSTBOX_INVALID_ARGUMENT` (NULL argument, `max` 0); `POSTBOX_QUEUE_NOT_FOUND` (queue
/// deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors. On `POSTBOX_TIMEOUT`
/// `*count_out` is set to 0 (the one output written on a failure); on other failures it is
/// left alone.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_receive_batch(
    queue: *mut postbox_queue,
    max: usize,
    timeout_ms: i64,
    messages_out: *mut *mut postbox_message,
    count_out: *mut usize,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        if max == 0 {
            return Err(Failure::invalid("max must be at least 1"));
        }
        let slots = arg_slice_mut(messages_out, max, "messages_out")?;
        let count = Out::required(count_out, "count_out")?;
        let got = q.queue.receive_batch(max, timeout(timeout_ms))?;
        hand_out(q, got, slots, count, timeout_ms)
    })
}

/// Completes `count` received messages of `queue` in one commit, all or none. Every handle must
/// be a message of `queue` that it holds (checked before anything changes: a refusal leaves
/// every handle as it was). Once the commit ran, the handles are settled whatever the outcome
/// (on `POSTBOX_LOCK_LOST` none was completed and the others returned to the queue); free them
/// with `postbox_message_free` as usual.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (a lock was lost: nothing completed);
/// `POSTBOX_INVALID_ARGUMENT` (NULL queue or entry, a message not held, listed twice, or of
/// another store or of another queue); `POSTBOX_QUEUE_NOT_FOUND`; `POSTBOX_CLOSED`;
/// `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_complete_batch(
    queue: *mut postbox_queue,
    messages: *const *mut postbox_message,
    count: usize,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let messages = arg_slice(messages, count, "messages")?;
        complete_batch(&q.queue, q.tag, messages)?;
        Ok(POSTBOX_OK)
    })
}

/// Completes `done_count` received messages of `queue` and locks up to `max` more in **one**
/// commit — a batched consumer's loop step, one durable commit per batch instead of two. If
/// nothing is receivable right then, waits up to `timeout_ms` (as in `postbox_receive`; the
/// completion is durable by then). `done` may be NULL when `done_count` is 0. The completed
/// handles are settled whatever the outcome and still freed with `postbox_message_free`;
/// `messages_out` is a caller-provided array of `max` pointers whose first `*count_out` entries
/// receive new handles, also freed with `postbox_message_free`.
///
/// # Returns
/// `POSTBOX_OK` (at least one new message); `POSTBOX_TIMEOUT` (the messages were completed and
/// none arrived in time); `POSTBOX_LOCK_LOST` (a lock of `done` was lost: nothing completed or
/// received, the others returned to the queue); `POSTBOX_INVALID_ARGUMENT` (NULL argument,
/// `max` 0, a message not held, listed twice, of another store or of another queue: nothing
/// completed or received, every handle as it was); `POSTBOX_QUEUE_NOT_FOUND`; `POSTBOX_CLOSED`;
/// `POSTBOX_FORKED`; storage errors. On `POSTBOX_TIMEOUT` `*count_out` is set to 0.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_complete_batch_and_receive(
    queue: *mut postbox_queue,
    done: *const *mut postbox_message,
    done_count: usize,
    max: usize,
    timeout_ms: i64,
    messages_out: *mut *mut postbox_message,
    count_out: *mut usize,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        if max == 0 {
            return Err(Failure::invalid("max must be at least 1"));
        }
        let done = if done_count == 0 {
            &[][..]
        } else {
            arg_slice(done, done_count, "done")?
        };
        let slots = arg_slice_mut(messages_out, max, "messages_out")?;
        let count = Out::required(count_out, "count_out")?;
        let received = crate::message::take_batch(&q.queue, q.tag, done)?;
        let got = q
            .queue
            .complete_batch_and_receive(received, max, timeout(timeout_ms))?;
        hand_out(q, got, slots, count, timeout_ms)
    })
}
