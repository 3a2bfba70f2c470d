//! `postbox_queue_options`: the C struct of queue options, its flags and versions, and its
//! conversion to and from `QueueOptions`.

use postbox::OptionValue;

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
/// `postbox_queue_options.clear`: put `default_priority` back to its default (3).
pub const POSTBOX_OPTION_DEFAULT_PRIORITY: u32 = 1 << 12;

const ALL_OPTIONS: u32 = (1 << 13) - 1;

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
/// stored value for the others, defaults included (`has_default_priority` is 1).
///
/// Versioned: fields are only ever appended. A caller built against an older header passes
/// its smaller `struct_size` (the fields before `clear`, before `forward_to`, before
/// `receipts_to`, or before `default_priority`); the fields it does not know are neither read
/// (they are "not mentioned") nor written.
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
    /// The priority, 0 (lowest) to 7 (highest), of a message sent to this queue without one
    /// (`postbox_send_options.has_priority` 0); a message that sets its priority keeps it. Read
    /// only when `has_default_priority` is non-zero (default 3; `POSTBOX_OPTION_DEFAULT_PRIORITY`
    /// puts it back). Above 7 is `POSTBOX_INVALID_ARGUMENT`.
    pub default_priority: u32,
    /// Non-zero: `default_priority` is set (0: not mentioned). Read back as 1.
    pub has_default_priority: c_int,
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
            default_priority: 0,
            has_default_priority: 0,
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
/// The size of the struct before `default_priority` was added: callers built against that
/// header pass it, and neither read nor get the default priority.
pub(crate) const QUEUE_OPTIONS_V4: usize =
    std::mem::offset_of!(postbox_queue_options, default_priority);
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
    assert!(QUEUE_OPTIONS_V4 == QUEUE_OPTIONS_V3 + size_of::<*const c_char>() + size_of::<u64>());
    assert!(QUEUE_OPTIONS_FULL == QUEUE_OPTIONS_V4 + size_of::<u32>() + size_of::<c_int>());
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

/// Where an option sits in `postbox_queue_options`: its field (named as in C) and flag, and how
/// the field holds its value. `QueueOptions::FIELDS` lists the options; this is only the C side
/// of each, checked against it by the tests (`every_option_has_its_c_field_and_flag`).
struct CField {
    /// The option's name in `QueueOptions::FIELDS`.
    name: &'static str,
    /// The field's name in the C struct.
    c_name: &'static str,
    /// Its `POSTBOX_OPTION_*` flag in `clear` (0: none, the option cannot be put back).
    flag: u32,
    /// The value the field mentions, or `None` when it is 0 (or NULL): not mentioned.
    read: fn(&postbox_queue_options) -> Outcome<Option<OptionValue>>,
    /// Stores a value read back (`OptionValue::Unset` as 0 or NULL).
    write: fn(&mut postbox_queue_options, OptionValue, &mut NameFn<'_>) -> Outcome<()>,
}

/// Keeps a queue name NUL-terminated and returns its pointer (see `options_struct`).
type NameFn<'a> = dyn FnMut(Option<&str>) -> Outcome<*const c_char> + 'a;

/// A whole-ms field: 0 is not mentioned.
fn read_ms(v: u64) -> Option<OptionValue> {
    (v != 0).then(|| OptionValue::Duration(Duration::from_millis(v)))
}
/// A count or size field: 0 is not mentioned.
fn read_number(v: u64) -> Option<OptionValue> {
    (v != 0).then_some(OptionValue::Number(v))
}
fn read_name(p: *const c_char, what: &str) -> Outcome<Option<OptionValue>> {
    Ok(arg_opt_str(p, what)?.map(|s| OptionValue::Text(s.to_owned())))
}
fn ms_value(v: OptionValue) -> u64 {
    match v {
        OptionValue::Duration(d) => ms_of(d),
        _ => 0,
    }
}
fn number_value(v: OptionValue) -> u64 {
    match v {
        OptionValue::Number(n) => n,
        _ => 0,
    }
}
fn name_value(v: OptionValue, name: &mut NameFn<'_>) -> Outcome<*const c_char> {
    match v {
        OptionValue::Text(s) => name(Some(&s)),
        _ => name(None),
    }
}

/// The C side of every queue option, in the order of the struct.
const C_FIELDS: &[CField] = &[
    CField {
        name: "max_deliveries",
        c_name: "max_deliveries",
        flag: POSTBOX_OPTION_MAX_DELIVERIES,
        read: |o| Ok(read_number(u64::from(o.max_deliveries))),
        write: |o, v, _| {
            o.max_deliveries = u32::try_from(number_value(v)).unwrap_or(u32::MAX);
            Ok(())
        },
    },
    CField {
        name: "lock_duration",
        c_name: "lock_duration_ms",
        flag: POSTBOX_OPTION_LOCK_DURATION,
        read: |o| Ok(read_ms(o.lock_duration_ms)),
        write: |o, v, _| {
            o.lock_duration_ms = ms_value(v);
            Ok(())
        },
    },
    CField {
        name: "default_ttl",
        c_name: "default_ttl_ms",
        flag: POSTBOX_OPTION_DEFAULT_TTL,
        read: |o| Ok(read_ms(o.default_ttl_ms)),
        write: |o, v, _| {
            o.default_ttl_ms = ms_value(v);
            Ok(())
        },
    },
    CField {
        name: "max_message_size",
        c_name: "max_message_size",
        flag: POSTBOX_OPTION_MAX_MESSAGE_SIZE,
        read: |o| Ok(read_number(o.max_message_size)),
        write: |o, v, _| {
            o.max_message_size = number_value(v);
            Ok(())
        },
    },
    CField {
        name: "max_messages",
        c_name: "max_messages",
        flag: POSTBOX_OPTION_MAX_MESSAGES,
        read: |o| Ok(read_number(o.max_messages)),
        write: |o, v, _| {
            o.max_messages = number_value(v);
            Ok(())
        },
    },
    CField {
        name: "max_bytes",
        c_name: "max_bytes",
        flag: POSTBOX_OPTION_MAX_BYTES,
        read: |o| Ok(read_number(o.max_bytes)),
        write: |o, v, _| {
            o.max_bytes = number_value(v);
            Ok(())
        },
    },
    CField {
        name: "dedup_window",
        c_name: "dedup_window_ms",
        flag: POSTBOX_OPTION_DEDUP_WINDOW,
        read: |o| Ok(read_ms(o.dedup_window_ms)),
        write: |o, v, _| {
            o.dedup_window_ms = ms_value(v);
            Ok(())
        },
    },
    CField {
        name: "forward_to",
        c_name: "forward_to",
        flag: POSTBOX_OPTION_FORWARD_TO,
        read: |o| read_name(o.forward_to, "options.forward_to"),
        write: |o, v, name| {
            o.forward_to = name_value(v, name)?;
            Ok(())
        },
    },
    CField {
        name: "forward_dead_letters_to",
        c_name: "forward_dead_letters_to",
        flag: POSTBOX_OPTION_FORWARD_DEAD_LETTERS_TO,
        read: |o| read_name(o.forward_dead_letters_to, "options.forward_dead_letters_to"),
        write: |o, v, name| {
            o.forward_dead_letters_to = name_value(v, name)?;
            Ok(())
        },
    },
    CField {
        name: "journal",
        c_name: "journal_max_messages",
        flag: POSTBOX_OPTION_JOURNAL,
        read: |o| Ok(read_number(o.journal_max_messages)),
        write: |o, v, _| {
            o.journal_max_messages = number_value(v);
            Ok(())
        },
    },
    CField {
        name: "requires_session",
        c_name: "requires_session",
        flag: 0,
        read: |o| Ok((o.requires_session != 0).then_some(OptionValue::Flag(true))),
        write: |o, v, _| {
            o.requires_session = c_int::from(v == OptionValue::Flag(true));
            Ok(())
        },
    },
    CField {
        name: "receipts_to",
        c_name: "receipts_to",
        flag: POSTBOX_OPTION_RECEIPTS_TO,
        read: |o| read_name(o.receipts_to, "options.receipts_to"),
        write: |o, v, name| {
            o.receipts_to = name_value(v, name)?;
            Ok(())
        },
    },
    CField {
        name: "auto_delete_on_idle",
        c_name: "auto_delete_on_idle_ms",
        flag: POSTBOX_OPTION_AUTO_DELETE_ON_IDLE,
        read: |o| Ok(read_ms(o.auto_delete_on_idle_ms)),
        write: |o, v, _| {
            o.auto_delete_on_idle_ms = ms_value(v);
            Ok(())
        },
    },
    CField {
        name: "default_priority",
        c_name: "default_priority",
        flag: POSTBOX_OPTION_DEFAULT_PRIORITY,
        read: |o| {
            Ok((o.has_default_priority != 0)
                .then_some(OptionValue::Number(u64::from(o.default_priority))))
        },
        write: |o, v, _| {
            o.default_priority = u32::try_from(number_value(v)).unwrap_or(u32::MAX);
            o.has_default_priority = 1;
            Ok(())
        },
    },
];

/// The C side of option `name` (every option has one: see the tests).
fn c_field(name: &str) -> Outcome<&'static CField> {
    C_FIELDS
        .iter()
        .find(|c| c.name == name)
        .ok_or_else(|| Failure::invalid(format!("queue option {name} has no C field")))
}

pub(crate) fn queue_options(o: &postbox_queue_options) -> Outcome<QueueOptions> {
    if o.clear & !ALL_OPTIONS != 0 {
        return Err(Failure::invalid(format!(
            "options.clear has unknown flags {:#x} (use the POSTBOX_OPTION_* flags)",
            o.clear & !ALL_OPTIONS
        )));
    }
    let mut q = QueueOptions::default();
    // Each option: its field (0: not mentioned) sets it, its flag puts it back to the default
    // (none, for an optional one); both at once is refused.
    for f in QueueOptions::FIELDS {
        let c = c_field(f.name)?;
        let cleared = c.flag != 0 && o.clear & c.flag != 0;
        let value = match ((c.read)(o)?, cleared) {
            (Some(_), true) => {
                return Err(Failure::invalid(format!(
                    "options.{} is set and its flag is in options.clear: choose one",
                    c.c_name
                )));
            }
            (Some(v), false) => v,
            (None, true) if f.optional => OptionValue::Unset,
            (None, true) => f.default_value(),
            (None, false) => continue,
        };
        q.set(f.name, value)?;
    }
    Ok(q)
}

/// The C struct of stored options `o`; `name` keeps each queue name NUL-terminated for as long
/// as the struct is documented to be valid, and returns its pointer (NULL for `None`).
pub(crate) fn options_struct(
    o: &QueueOptions,
    mut name: impl FnMut(Option<&str>) -> Outcome<*const c_char>,
) -> Outcome<postbox_queue_options> {
    let mut out = postbox_queue_options {
        struct_size: QUEUE_OPTIONS_FULL as u32,
        ..Default::default()
    };
    for (f, v) in o.values() {
        (c_field(f.name)?.write)(&mut out, v, &mut name)?;
    }
    Ok(out)
}

/// A duration as whole ms for C, rounded up so that a set option never reads as 0 ("none").
fn ms_of(d: Duration) -> u64 {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 && !d.is_zero() { 1 } else { ms }
}

#[cfg(test)]
mod tests {
    use std::ffi::CString;

    use super::*;

    const HEADER: &str = include_str!("../../../include/postbox.h");

    /// The C struct's body in the committed header.
    fn header_struct() -> &'static str {
        let start = HEADER
            .find("typedef struct postbox_queue_options {")
            .expect("the header declares postbox_queue_options");
        let len = HEADER[start..]
            .find("} postbox_queue_options;")
            .expect("the struct ends");
        &HEADER[start..start + len]
    }

    #[test]
    fn every_option_has_its_c_field_and_flag() {
        let body = header_struct();
        let mut flags = 0;
        for f in QueueOptions::FIELDS {
            let c = c_field(f.name).unwrap_or_else(|_| panic!("{} has no C field", f.name));
            assert!(
                body.contains(&format!(" {};", c.c_name))
                    || body.contains(&format!("*{};", c.c_name)),
                "postbox.h lacks postbox_queue_options.{}",
                c.c_name
            );
            if f.name != "requires_session" {
                // Every option but the one fixed at creation can be put back.
                assert_ne!(c.flag, 0, "{} has no POSTBOX_OPTION_* flag", f.name);
                let define = format!(
                    "#define POSTBOX_OPTION_{} {}",
                    f.name.to_uppercase(),
                    if c.flag == 1 {
                        "1".to_string()
                    } else {
                        format!("(1 << {})", c.flag.trailing_zeros())
                    }
                );
                assert!(HEADER.contains(&define), "postbox.h lacks `{define}`");
                assert_eq!(flags & c.flag, 0, "{} shares its flag", f.name);
                flags |= c.flag;
            }
        }
        assert_eq!(flags, ALL_OPTIONS, "a flag without an option");
        assert_eq!(
            C_FIELDS.len(),
            QueueOptions::FIELDS.len(),
            "a C field without an option"
        );
    }

    #[test]
    fn every_option_goes_through_the_c_struct_and_back() {
        let set = QueueOptions::default()
            .lock_duration(Duration::from_secs(7))
            .max_deliveries(4)
            .default_ttl(Duration::from_secs(9))
            .max_message_size(1000)
            .max_messages(11)
            .max_bytes(12_000)
            .dedup_window(Duration::from_secs(13))
            .requires_session(true)
            .forward_to("f")
            .forward_dead_letters_to("d")
            .journal(14)
            .auto_delete_on_idle(Duration::from_secs(15))
            .receipts_to("r")
            .default_priority(0);
        let d = QueueOptions::default();
        for f in QueueOptions::FIELDS {
            assert_ne!(
                set.get(f.name),
                d.get(f.name),
                "{} is left at its default",
                f.name
            );
        }
        let mut kept = Vec::new();
        let c = options_struct(&set, |name| {
            Ok(match name {
                Some(n) => {
                    let s = CString::new(n).expect("no NUL");
                    kept.push(s);
                    kept.last().map_or(std::ptr::null(), |s| s.as_ptr())
                }
                None => std::ptr::null(),
            })
        })
        .expect("a C struct");
        assert_eq!(queue_options(&c).expect("options"), set);
        assert_eq!(c.has_default_priority, 1);
        // Every flag clears its option back to the default.
        let cleared = postbox_queue_options {
            clear: ALL_OPTIONS,
            ..Default::default()
        };
        assert_eq!(queue_options(&cleared).expect("options"), d);
    }
}
