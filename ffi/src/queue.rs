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
use crate::handle::{Handle, live};
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

impl Handle for postbox_queue {
    const ARG: &'static str = "queue";

    fn tag(&self) -> StoreTag {
        self.tag
    }
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

mod options;
mod receive;
mod send;

pub use options::*;
pub use receive::*;
pub use send::*;

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

impl Handle for postbox_browser {
    const ARG: &'static str = "browser";

    fn tag(&self) -> StoreTag {
        self.tag
    }
}

fn queue<'a>(q: *const postbox_queue) -> Outcome<&'a postbox_queue> {
    arg_ref(q, "queue")
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
        store.live()?;
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
        store.live()?;
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
