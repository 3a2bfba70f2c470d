//! Knowing what became of a message: replies and requests, temporary queues, checkpoints on a
//! held message, sends that say whether they were duplicates, and the queue listing with
//! options and last activity.

use std::ffi::{CString, c_char, c_int};

use postbox::binding::HeldMessage;
use postbox::{QueueOptions, Sent};

use crate::guard::{
    Failure, Out, Outcome, VersionedOut, arg_ref, arg_slice, arg_slice_mut, guard, progress_keys,
    read_versioned, take_box,
};
use crate::handle::{Handle, live};
use crate::message::postbox_message;
use crate::queue::{
    QUEUE_OPTIONS_V1, build_message, options_struct, postbox_queue, postbox_queue_options,
    postbox_send_item, postbox_send_options, queue_options,
};
use crate::status::{POSTBOX_NOT_FOUND, POSTBOX_OK, POSTBOX_TIMEOUT};
use crate::store::{postbox_store, postbox_strings};
use crate::tx::{postbox_tx, with_tx};
use crate::{timeout, unix_ms};

// ---------------------------------------------------------------------------------------------
// Replies and requests

/// Answers a received message and completes it, in one commit: the reply `body[0..body_len]`
/// with `options` (NULL for none; as `postbox_send`) goes to the queue named by the message's
/// `reply_to`, with its correlation id set to the message's correlation id, or to the
/// message's id in decimal if it has none (a correlation id in `options` is replaced) — what
/// `postbox_request` waits for. `reply_id_out` (may be NULL) receives the reply's id. The
/// handle stays readable and must still be freed.
///
/// As for every settle, only `POSTBOX_OK` and `POSTBOX_LOCK_LOST` end the handle's hold on the
/// message; after any other status nothing was sent or completed and the handle still holds
/// the lock. (A processor callback answers its message with `postbox_processor_reply`.)
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (nothing sent, and the handle no longer holds the
/// message); `POSTBOX_INVALID_ARGUMENT` (NULL message, a message without `reply_to`, bad body
/// or options, a message this handle does not hold); `POSTBOX_QUEUE_NOT_FOUND` (the reply
/// queue does not exist, e.g. a requester's temporary queue that went with it);
/// `POSTBOX_TOO_LARGE` / `POSTBOX_QUEUE_FULL` (the reply queue's limits); `POSTBOX_CLOSED`;
/// `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_reply(
    message: *mut postbox_message,
    body: *const u8,
    body_len: usize,
    options: *const postbox_send_options,
    reply_id_out: *mut u64,
) -> c_int {
    guard(|| {
        let m = arg_ref(message.cast_const(), "message")?;
        let out = Out::optional(reply_id_out);
        let reply = build_message(body, body_len, options, "body")?;
        m.live()?;
        let id = m.held.reply("replied", reply)?;
        out.write(id.get());
        Ok(POSTBOX_OK)
    })
}

/// Sends a request and waits up to `timeout_ms` milliseconds (0: do not wait; negative: without
/// limit) for its reply: the message `body[0..body_len]` with `options` (NULL for none) goes to
/// `queue` with `reply_to` set to this store handle's reply queue (a temporary queue made on
/// first use; a `reply_to` in `options` is replaced) and a fresh correlation id unless
/// `options` sets one. The first message on the reply queue with that correlation id (a
/// responder's `postbox_message_reply`) is received, completed and handed out: replies to
/// other requests, from any thread, stay for their own requesters. A reply that comes after
/// the timeout is dropped: this handle's next request removes every reply on the reply queue
/// that no waiting request expects, so late replies never pile up there.
///
/// `reply_out` receives a handle to the reply, already completed (read it with the
/// `postbox_message_*` accessors; it cannot be settled), which the caller frees with
/// `postbox_message_free`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_TIMEOUT` (no reply in time: a normal outcome; the request was sent);
/// otherwise as `postbox_send` and `postbox_receive`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_request(
    queue: *mut postbox_queue,
    body: *const u8,
    body_len: usize,
    options: *const postbox_send_options,
    timeout_ms: i64,
    reply_out: *mut *mut postbox_message,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let out = Out::required(reply_out, "reply_out")?;
        let m = build_message(body, body_len, options, "body")?;
        let env = q.queue.request(m, timeout(timeout_ms))?.ok_or_else(|| {
            Failure::new(
                POSTBOX_TIMEOUT,
                format!(
                    "no reply to a request to queue {:?} arrived within {timeout_ms} ms",
                    q.queue.name()
                ),
            )
        })?;
        out.write(postbox_message::new(HeldMessage::settled(env, "completed"), q.tag).into_raw());
        Ok(POSTBOX_OK)
    })
}

/// Creates a temporary queue: it belongs to this store handle and is deleted, with its
/// messages, when the store handle is closed or when the process dies (noticed by the next
/// process that opens the store, or by a shared store's next writer). Its name, unique and
/// starting with `POSTBOX_TEMPORARY_QUEUE_PREFIX` (`postbox_queue_name`), may be given out as a
/// `reply_to`; other handles open it with `postbox_queue_open_existing`. `options` (NULL for the
/// defaults) as in `postbox_queue_open`. `queue_out` receives a handle the caller frees with
/// `postbox_queue_free`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `store` or `queue_out`, bad options: a
/// temporary queue cannot require sessions or keep a journal); `POSTBOX_CLOSED`;
/// `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_queue_open_temporary(
    store: *mut postbox_store,
    options: *const postbox_queue_options,
    queue_out: *mut *mut postbox_queue,
) -> c_int {
    guard(|| {
        let s = arg_ref(store, "store")?;
        let out = Out::required(queue_out, "queue_out")?;
        let options = read_versioned(options, QUEUE_OPTIONS_V1, "options")?;
        s.live()?;
        let options = options.map(|o| queue_options(&o)).transpose()?;
        let q = s.store.temporary_queue(options)?;
        out.write(postbox_queue::boxed(q, &s.store, s.tag));
        Ok(POSTBOX_OK)
    })
}

// ---------------------------------------------------------------------------------------------
// Checkpoints

/// Records progress keys on a message this handle holds (work items done, e.g. "recipient 17
/// notified"), so that a redelivery after an abandon, a lock expiry or a crash can skip them
/// (`postbox_message_done_keys`); renews the lock in the same commit. `keys` is an array of
/// `count` NUL-terminated UTF-8 strings, each 1 to 1024 bytes (recording a key twice is
/// harmless); `count` may be 0 (only the lock is renewed). The keys go with the message when
/// it is completed or removed. `locked_until_ms_out` may be NULL; on success it receives the
/// new lock expiry (ms since the Unix epoch), which `postbox_message_locked_until_ms` also
/// reports from then on. A message received in a transaction records through it
/// (`postbox_tx_mark_done`); the message of a processor callback through the processor
/// (`postbox_processor_mark_done`).
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (nothing recorded; the handle no longer holds the
/// message); `POSTBOX_INVALID_ARGUMENT` (NULL message, NULL `keys` with a count, a NULL, empty,
/// over-long or non-UTF-8 key, a message this handle does not hold: peeked, received in a
/// transaction, settled); `POSTBOX_QUEUE_NOT_FOUND`; `POSTBOX_CLOSED`; `POSTBOX_FORKED`;
/// storage errors (the lock stays with the handle).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_mark_done(
    message: *mut postbox_message,
    keys: *const *const c_char,
    count: usize,
    locked_until_ms_out: *mut u64,
) -> c_int {
    guard(|| {
        let m = arg_ref(message.cast_const(), "message")?;
        let out = Out::optional(locked_until_ms_out);
        let keys = progress_keys(keys, count)?;
        m.live()?;
        let until = m.held.mark_done(keys)?;
        out.write(unix_ms(until));
        Ok(POSTBOX_OK)
    })
}

/// The progress keys recorded on a message this handle holds (`postbox_message_mark_done`, in
/// this delivery or earlier ones), read in one lookup. `keys_out` receives a list, sorted
/// bytewise, that the caller reads with `postbox_strings_count` / `postbox_strings_get` and
/// frees with `postbox_strings_free`. (In a transaction: `postbox_tx_done_keys`; in a processor
/// callback: `postbox_processor_done_keys`.)
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, or a message this handle does not hold:
/// peeked, received in a transaction, settled); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage
/// errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_done_keys(
    message: *const postbox_message,
    keys_out: *mut *mut postbox_strings,
) -> c_int {
    guard(|| {
        let m = arg_ref(message, "message")?;
        let out = Out::required(keys_out, "keys_out")?;
        m.live()?;
        let keys = m.held.done_keys()?;
        out.write(postbox_strings::boxed(keys.into_iter().collect())?);
        Ok(POSTBOX_OK)
    })
}

// ---------------------------------------------------------------------------------------------
// Sends that say what happened

/// `postbox_send`, saying whether the message was a duplicate: its `message_key` was within
/// the queue's dedup window (or, with a transaction, sent earlier in `tx`), so nothing is
/// stored and `id_out` receives the id of the message first sent with that key.
///
/// With `tx` NULL the send commits on its own. With a transaction the message is stored when
/// `tx` commits and `id_out` receives the id it will have (reserved now, never reused; unused if
/// the transaction aborts). The dedup window is checked again at commit: a message whose key
/// another sender stores in between is dropped then as a duplicate, its reserved id unused.
/// `id_out` and `duplicate_out` may be NULL.
///
/// # Returns
/// As `postbox_send`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_send_checked(
    queue: *mut postbox_queue,
    tx: *mut postbox_tx,
    body: *const u8,
    body_len: usize,
    options: *const postbox_send_options,
    id_out: *mut u64,
    duplicate_out: *mut bool,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let id = Out::optional(id_out);
        let duplicate = Out::optional(duplicate_out);
        let m = build_message(body, body_len, options, "body")?;
        let sent = if tx.is_null() {
            q.queue.send_checked(m)?
        } else {
            with_tx(tx, q.tag, |t| Ok(t.send_checked(&q.queue, m)?))?
        };
        id.write(sent.id.get());
        duplicate.write(sent.duplicate);
        Ok(POSTBOX_OK)
    })
}

/// `postbox_send_batch`, saying of each message whether it was a duplicate (see
/// `postbox_send_checked`). `ids_out` and `duplicates_out` may each be NULL, or an array of
/// `count` elements that receives, in order, the ids (for a duplicate, the original's) and the
/// duplicate flags.
///
/// # Returns
/// As `postbox_send_batch`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_send_batch_checked(
    queue: *mut postbox_queue,
    tx: *mut postbox_tx,
    items: *const postbox_send_item,
    count: usize,
    ids_out: *mut u64,
    duplicates_out: *mut bool,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let items = arg_slice(items, count, "items")?;
        let ids = if ids_out.is_null() {
            None
        } else {
            Some(arg_slice_mut(ids_out, count, "ids_out")?)
        };
        let duplicates = if duplicates_out.is_null() {
            None
        } else {
            Some(arg_slice_mut(duplicates_out, count, "duplicates_out")?)
        };
        let msgs = items
            .iter()
            .enumerate()
            .map(|(i, it)| {
                build_message(it.body, it.body_len, it.options, "body")
                    .map_err(|f| Failure::new(f.code, format!("items[{i}]: {}", f.message)))
            })
            .collect::<Outcome<Vec<_>>>()?;
        let sent: Vec<Sent> = if tx.is_null() {
            q.queue.send_batch_checked(msgs)?
        } else {
            with_tx(tx, q.tag, |t| Ok(t.send_batch_checked(&q.queue, msgs)?))?
        };
        if let Some(ids) = ids {
            for (slot, s) in ids.iter_mut().zip(&sent) {
                *slot = s.id.get();
            }
        }
        if let Some(duplicates) = duplicates {
            for (slot, s) in duplicates.iter_mut().zip(&sent) {
                *slot = s.duplicate;
            }
        }
        Ok(POSTBOX_OK)
    })
}

// ---------------------------------------------------------------------------------------------
// Queue listing

/// One queue of a `postbox_queue_infos` list, read with `postbox_queue_infos_get`.
///
/// Versioned: the caller sets `struct_size` to `sizeof(postbox_queue_info)` (or calls
/// `postbox_queue_info_init`) before the call; later versions append fields and keep accepting
/// the shorter struct of an older header, writing only the fields it covers.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct postbox_queue_info {
    /// `sizeof(postbox_queue_info)`, set by the caller; written back unchanged.
    pub struct_size: u32,
    /// 1 for a temporary queue (`postbox_queue_open_temporary`), else 0.
    pub temporary: c_int,
    /// The queue's name, NUL-terminated UTF-8, owned by the list: valid until it is freed.
    pub name: *const c_char,
    /// When the queue last saw a send, receive, settle or lock renewal (ms since the Unix
    /// epoch, recorded to a tenth of a second); 0 if never since the store was written by a
    /// version that records it.
    pub last_activity_ms: u64,
}

impl Default for postbox_queue_info {
    fn default() -> Self {
        postbox_queue_info {
            struct_size: 0,
            temporary: 0,
            name: std::ptr::null(),
            last_activity_ms: 0,
        }
    }
}

/// The first version of `postbox_queue_info`: the smallest `struct_size` accepted.
const QUEUE_INFO_V1: usize = size_of::<postbox_queue_info>();

// `VersionedOut` copies an older caller's prefix of the struct: it holds no padding.
const _: () =
    assert!(QUEUE_INFO_V1 == 2 * size_of::<u32>() + size_of::<*const c_char>() + size_of::<u64>());

struct QueueInfoItem {
    name: CString,
    temporary: bool,
    last_activity_ms: u64,
    options: QueueOptions,
    /// The queue names its options mention, NUL-terminated, for `postbox_queue_infos_options`.
    option_names: Vec<CString>,
}

/// The store's queues with their options, temporary flag and last activity, from
/// `postbox_store_queue_infos`: a snapshot taken at the call. Read it with
/// `postbox_queue_infos_count`, `postbox_queue_infos_get` and `postbox_queue_infos_options`;
/// free it with `postbox_queue_infos_free`. Immutable, so thread-safe.
pub struct postbox_queue_infos {
    items: Vec<QueueInfoItem>,
}

fn c_string(s: &str) -> Outcome<CString> {
    CString::new(s).map_err(|_| Failure::invalid("a queue name contains NUL"))
}

fn info_at<'a>(list: *const postbox_queue_infos, index: usize) -> Outcome<&'a QueueInfoItem> {
    let list: &'a postbox_queue_infos = arg_ref(list, "infos")?;
    list.items.get(index).ok_or_else(|| {
        Failure::new(
            POSTBOX_NOT_FOUND,
            format!(
                "index {index} is out of range (the list holds {} queues)",
                list.items.len()
            ),
        )
    })
}

/// Lists the store's queues, as `postbox_store_queues` names them (no dead-letter queues), each
/// with its stored options, whether it is temporary, and its last activity, read from one
/// snapshot. `infos_out` receives a list the caller frees with `postbox_queue_infos_free`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument); `POSTBOX_CLOSED`;
/// `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_store_queue_infos(
    store: *const postbox_store,
    infos_out: *mut *mut postbox_queue_infos,
) -> c_int {
    guard(|| {
        let s = arg_ref(store, "store")?;
        let out = Out::required(infos_out, "infos_out")?;
        s.live()?;
        let items = s
            .store
            .queue_infos()?
            .into_iter()
            .map(|i| {
                let option_names = [
                    &i.options.forward_to,
                    &i.options.forward_dead_letters_to,
                    &i.options.receipts_to,
                ]
                .into_iter()
                .flatten()
                .map(|n| c_string(n))
                .collect::<Outcome<Vec<_>>>()?;
                Ok(QueueInfoItem {
                    name: c_string(&i.name)?,
                    temporary: i.temporary,
                    last_activity_ms: i.last_activity.map_or(0, unix_ms),
                    options: i.options,
                    option_names,
                })
            })
            .collect::<Outcome<Vec<_>>>()?;
        out.write(Box::into_raw(Box::new(postbox_queue_infos { items })));
        Ok(POSTBOX_OK)
    })
}

/// The number of queues in `infos` (0 for NULL).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_queue_infos_count(infos: *const postbox_queue_infos) -> usize {
    guard(|| Ok(arg_ref(infos, "infos")?.items.len()))
}

/// Fills `info` with zeros and sets its `struct_size`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `info` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_queue_info_init(info: *mut postbox_queue_info) -> c_int {
    guard(|| {
        Out::required(info, "info")?.write(postbox_queue_info {
            struct_size: QUEUE_INFO_V1 as u32,
            ..Default::default()
        });
        Ok(POSTBOX_OK)
    })
}

/// Reads queue `index` (0 to `postbox_queue_infos_count() - 1`, in name order) of `infos`
/// into `info_out`, whose `struct_size` the caller sets first. Its `name` is owned by the
/// list: valid until `infos` is freed.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (`index` out of range); `POSTBOX_INVALID_ARGUMENT` (NULL,
/// bad `struct_size`).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_queue_infos_get(
    infos: *const postbox_queue_infos,
    index: usize,
    info_out: *mut postbox_queue_info,
) -> c_int {
    guard(|| {
        let out = VersionedOut::required(info_out, QUEUE_INFO_V1, "info_out")?;
        let i = info_at(infos, index)?;
        out.write(postbox_queue_info {
            struct_size: QUEUE_INFO_V1 as u32,
            temporary: c_int::from(i.temporary),
            name: i.name.as_ptr(),
            last_activity_ms: i.last_activity_ms,
        });
        Ok(POSTBOX_OK)
    })
}

/// Reads the stored options of queue `index` of `infos` into `options_out`, whose
/// `struct_size` the caller sets first, as `postbox_queue_options_get` reads them; the queue
/// names in it (`forward_to`, ...) are owned by the list: valid until `infos` is freed.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (`index` out of range); `POSTBOX_INVALID_ARGUMENT` (NULL,
/// bad `struct_size`).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_queue_infos_options(
    infos: *const postbox_queue_infos,
    index: usize,
    options_out: *mut postbox_queue_options,
) -> c_int {
    guard(|| {
        let out = VersionedOut::required(options_out, QUEUE_OPTIONS_V1, "options_out")?;
        let i = info_at(infos, index)?;
        out.write(options_struct(&i.options, |name| {
            let Some(name) = name else {
                return Ok(std::ptr::null());
            };
            i.option_names
                .iter()
                .find(|n| n.as_bytes() == name.as_bytes())
                .map(|n| n.as_ptr())
                .ok_or_else(|| Failure::invalid("a queue name contains NUL"))
        })?);
        Ok(POSTBOX_OK)
    })
}

/// Frees a list from `postbox_store_queue_infos`. NULL is a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_queue_infos_free(infos: *mut postbox_queue_infos) {
    guard(|| {
        drop(take_box(infos));
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn header_receipt_macros_match_the_engine() {
        let config = include_str!("../cbindgen.toml");
        for (name, value) in [
            ("POSTBOX_RECEIPT_LABEL", postbox::RECEIPT_LABEL),
            ("POSTBOX_RECEIPT_MESSAGE_ID", postbox::RECEIPT_MESSAGE_ID),
            ("POSTBOX_RECEIPT_QUEUE", postbox::RECEIPT_QUEUE),
            ("POSTBOX_RECEIPT_OUTCOME", postbox::RECEIPT_OUTCOME),
            ("POSTBOX_RECEIPT_AT", postbox::RECEIPT_AT),
            ("POSTBOX_RECEIPT_REASON", postbox::RECEIPT_REASON),
            ("POSTBOX_RECEIPT_COMPLETED", postbox::RECEIPT_COMPLETED),
            (
                "POSTBOX_RECEIPT_DEAD_LETTERED",
                postbox::RECEIPT_DEAD_LETTERED,
            ),
            (
                "POSTBOX_TEMPORARY_QUEUE_PREFIX",
                postbox::TEMPORARY_QUEUE_PREFIX,
            ),
        ] {
            let line = format!("#define {name} \"{value}\"");
            assert!(config.contains(&line), "ffi/cbindgen.toml lacks {line}");
        }
    }
}
