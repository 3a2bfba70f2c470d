//! `postbox_queue_options`: the C struct of queue options, its flags and versions, and its
//! conversion to and from `QueueOptions`.

use super::*;

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
