//! `postbox_collator`: a series that arrives out of order is released to a queue in order;
//! `postbox_series_gaps`: the series a collator has not completed.

use std::ffi::{CString, c_char, c_int};

use postbox::{Collator, SeriesGap, Store};

use crate::guard::{Failure, Out, Outcome, arg_ref, arg_str, guard, take_box};
use crate::handle::{Handle, live};
use crate::queue::{build_message, postbox_queue, postbox_send_options};
use crate::status::POSTBOX_OK;
use crate::store::postbox_store;
use crate::{StoreTag, postbox_bytes};

/// A handle to one collator of a store: messages of a series (their `group`), numbered by
/// `sequence` from 1 and sent by any number of producers in any order, are released to the
/// collator's destination queue in sequence order, each as soon as every number before it has
/// arrived (1, 2, 3 at once; then 4, 5, 6 when 4 arrives). Holding and releasing happen in the
/// sending commit, so a crash loses or duplicates nothing, and a number sent again is
/// recognised as a duplicate and stored nowhere.
///
/// A series ends when one of its messages declares the series' length
/// (`postbox_send_options.series_length`) or marks itself last (`series_last`);
/// `postbox_collator_incomplete` lists the series with gaps. A completed series is remembered,
/// so that a late resend of one of its numbers is a duplicate, until `postbox_collator_forget`
/// retires it (or the collator is deleted).
///
/// Created by `postbox_collator_open`; freed with `postbox_collator_free`. Thread-safe: any
/// number of threads may send through one handle at once.
pub struct postbox_collator {
    collator: Collator,
    /// The store the collator was opened from (its destination's queue handle needs it).
    store: Store,
    tag: StoreTag,
}

impl Handle for postbox_collator {
    const ARG: &'static str = "collator";

    fn tag(&self) -> StoreTag {
        self.tag
    }
}

struct Gap {
    series: CString,
    next: u64,
    length: u64,
    held: Vec<u64>,
}

/// The series a collator has not completed, from `postbox_collator_incomplete`. Read it with
/// `postbox_series_gaps_count` and `postbox_series_gaps_get`; free it with
/// `postbox_series_gaps_free`. A snapshot taken at the call; immutable, so thread-safe.
pub struct postbox_series_gaps {
    items: Vec<Gap>,
}

/// Opens collator `name` (NUL-terminated UTF-8, named as a queue is: 1–255 bytes), which
/// releases into `destination`, creating it if it does not exist. An existing collator keeps
/// the messages it holds and must already release into `destination`. A collator, a queue and
/// a topic cannot share a name. `collator_out` receives a handle the caller owns and frees with
/// `postbox_collator_free`. Delete a collator, with the messages it holds, with
/// `postbox_queue_delete` (its destination stays). The destination is in use while the
/// collator exists: `postbox_queue_delete` refuses it with `POSTBOX_IN_USE`.
///
/// A collator whose destination no longer exists (only in a store an older postbox wrote)
/// refuses `postbox_collate` with `POSTBOX_QUEUE_NOT_FOUND`, keeping what it holds; opening it
/// with a `destination` makes that its destination and releases there what was ready.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument, bad name, the name of a queue or
/// topic, a collator that releases into another queue that still exists, a destination that
/// is not a plain queue (a dead-letter queue, say), is temporary, or comes from another store
/// handle);
/// `POSTBOX_QUEUE_NOT_FOUND` (the destination was deleted); `POSTBOX_CLOSED`;
/// `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_collator_open(
    store: *mut postbox_store,
    name: *const c_char,
    destination: *const postbox_queue,
    collator_out: *mut *mut postbox_collator,
) -> c_int {
    guard(|| {
        let store = arg_ref(store, "store")?;
        let name = arg_str(name, "name")?;
        let out = Out::required(collator_out, "collator_out")?;
        store.live()?;
        let dest = live(destination)
            .map_err(|f| Failure::new(f.code, format!("destination: {}", f.message)))?;
        if dest.tag != store.tag {
            return Err(Failure::invalid(
                "the destination queue belongs to another store handle than the collator",
            ));
        }
        let collator = store.store.collator(name, &dest.queue)?;
        out.write(Box::into_raw(Box::new(postbox_collator {
            collator,
            store: store.store.clone(),
            tag: store.tag,
        })));
        Ok(POSTBOX_OK)
    })
}

/// Frees a collator handle (the collator and the messages it holds stay in the store). NULL is
/// a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_collator_free(collator: *mut postbox_collator) {
    guard(|| {
        drop(take_box(collator));
        Ok(())
    })
}

/// The collator's name (UTF-8, not NUL-terminated); absent view for NULL. Valid until the
/// collator handle is freed.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_collator_name(collator: *const postbox_collator) -> postbox_bytes {
    guard(|| {
        Ok(postbox_bytes::of(
            arg_ref(collator, "collator")?.collator.name().as_bytes(),
        ))
    })
}

/// Opens the queue the collator releases into. `queue_out` receives a handle the caller owns
/// and frees with `postbox_queue_free`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument); `POSTBOX_FORKED`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_collator_destination(
    collator: *const postbox_collator,
    queue_out: *mut *mut postbox_queue,
) -> c_int {
    guard(|| {
        let c = live(collator)?;
        let out = Out::required(queue_out, "queue_out")?;
        out.write(postbox_queue::boxed(
            c.collator.destination().clone(),
            &c.store,
            c.tag,
        ));
        Ok(POSTBOX_OK)
    })
}

/// Sends one message of a series through the collator, with body `body[0..body_len]` (copied;
/// NULL allowed when `body_len` is 0) and the properties in `options`, which must set `group`
/// (the series) and `has_sequence` with `sequence` (its number in the series, from 1). The
/// message is held until every number before it has arrived, then released to the destination
/// queue with every held message that follows it without a gap, all in this commit.
///
/// To declare the series' length, set `options.series_length` on one of its messages (any, and
/// more than one if they agree), or `options.series_last` on its last message. Numbers beyond
/// a declared length are refused, and so is a declaration that contradicts the series (another
/// length, or fewer messages than a number already sent) — on a resend of a number the series
/// has too: it is not the same message, so it is not taken as a duplicate. (Setting the user
/// properties `POSTBOX_SERIES_LENGTH_PROPERTY` to the length in decimal, or
/// `POSTBOX_SERIES_LAST_PROPERTY`, still works with a struct from an older header; it is
/// deprecated.)
///
/// `released_out` (may be NULL) receives how many messages this send released to the
/// destination: 0 while a gap remains before this message, 1 + the held messages that followed
/// it otherwise. `duplicate_out` (may be NULL) receives whether the series already had this
/// number (held or released): then nothing was stored, so a producer may resend after a crash
/// without duplicating anything. Released messages get their ids, and their place in the
/// destination's delivery order, when they are released.
///
/// # Returns
/// `POSTBOX_OK` (also for a duplicate); `POSTBOX_INVALID_ARGUMENT` (NULL `collator`, NULL body
/// with a length, bad options as for `postbox_send`, no group or no sequence, a sequence of 0
/// or beyond the series' declared length, a length that contradicts the series, a length
/// property that is not a positive decimal string, the fields and the deprecated properties
/// set together); `POSTBOX_TOO_LARGE` (above the destination's
/// `max_message_size`); `POSTBOX_QUEUE_NOT_FOUND` (the collator or its destination was
/// deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors. Released messages are not
/// refused by the destination's `max_messages` / `max_bytes` quotas.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_collate(
    collator: *const postbox_collator,
    body: *const u8,
    body_len: usize,
    options: *const postbox_send_options,
    released_out: *mut usize,
    duplicate_out: *mut bool,
) -> c_int {
    guard(|| {
        let c = live(collator)?;
        let released = Out::optional(released_out);
        let duplicate = Out::optional(duplicate_out);
        let m = build_message(body, body_len, options, "body")?;
        let got = c.collator.send(m)?;
        released.write(got.released.len());
        duplicate.write(got.duplicate);
        Ok(POSTBOX_OK)
    })
}

/// Forgets series `series` (NUL-terminated UTF-8) of the collator: its progress goes, so that
/// its name starts a new series from 1 (after forgetting "po-1", "po-1" #1 is a new message,
/// no longer a duplicate). `forgotten_out` (may be NULL) receives whether the collator knew
/// the series.
///
/// A collator keeps each series' progress after the series completes, so that a late resend
/// of one of its numbers is still recognised as a duplicate; nothing retires it on its own.
/// Forget a series once no resend of it can come any more, or give each run of work a series
/// name of its own (an order number, a date). Deleting the collator forgets every series.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `collator` or `series`, invalid UTF-8, a
/// series of which the collator holds messages waiting for a gap to close: forgetting would
/// lose them); `POSTBOX_QUEUE_NOT_FOUND` (the collator was deleted); `POSTBOX_CLOSED`;
/// `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_collator_forget(
    collator: *const postbox_collator,
    series: *const c_char,
    forgotten_out: *mut bool,
) -> c_int {
    guard(|| {
        let c = live(collator)?;
        let series = arg_str(series, "series")?;
        let out = Out::optional(forgotten_out);
        out.write(c.collator.forget(series)?);
        Ok(POSTBOX_OK)
    })
}

/// Reads how many messages the collator holds now, waiting for gaps to close (exact).
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument); `POSTBOX_QUEUE_NOT_FOUND` (the
/// collator was deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_collator_held(
    collator: *const postbox_collator,
    count_out: *mut u64,
) -> c_int {
    guard(|| {
        let c = live(collator)?;
        let out = Out::required(count_out, "count_out")?;
        out.write(c.collator.held()?);
        Ok(POSTBOX_OK)
    })
}

fn gap(g: SeriesGap) -> Outcome<Gap> {
    Ok(Gap {
        series: CString::new(g.series).map_err(|_| Failure::invalid("a series contains NUL"))?,
        next: g.next,
        length: g.length.unwrap_or(0),
        held: g.held,
    })
}

/// Lists the series the collator has not completed, in series name order: every series whose
/// length is not known yet (no message declared it), or known but not all released. A series
/// whose declared length has been released in full is no longer listed. `gaps_out` receives a list the caller owns
/// and frees with `postbox_series_gaps_free`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument); `POSTBOX_QUEUE_NOT_FOUND` (the
/// collator was deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_collator_incomplete(
    collator: *const postbox_collator,
    gaps_out: *mut *mut postbox_series_gaps,
) -> c_int {
    guard(|| {
        let c = live(collator)?;
        let out = Out::required(gaps_out, "gaps_out")?;
        let items = c
            .collator
            .incomplete()?
            .into_iter()
            .map(gap)
            .collect::<Outcome<Vec<_>>>()?;
        out.write(Box::into_raw(Box::new(postbox_series_gaps { items })));
        Ok(POSTBOX_OK)
    })
}

/// The number of series in `gaps` (0 for NULL).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_series_gaps_count(gaps: *const postbox_series_gaps) -> usize {
    guard(|| Ok(arg_ref(gaps, "gaps")?.items.len()))
}

/// Reads series `index` of `gaps`. Every out-pointer may be NULL when its value is not wanted:
///
/// - `series_out`: the series (the messages' group), NUL-terminated UTF-8;
/// - `next_out`: the next number to release, i.e. the first missing one;
/// - `length_out`: the series' declared length, 0 while unknown;
/// - `held_out`, `held_count_out`: the numbers the collator holds beyond the gap, ascending
///   (`*held_out` may be NULL when the count is 0).
///
/// The string and the array are valid until `gaps` is freed.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `gaps`, `index` out of range).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_series_gaps_get(
    gaps: *const postbox_series_gaps,
    index: usize,
    series_out: *mut *const c_char,
    next_out: *mut u64,
    length_out: *mut u64,
    held_out: *mut *const u64,
    held_count_out: *mut usize,
) -> c_int {
    guard(|| {
        let gaps = arg_ref(gaps, "gaps")?;
        let g = gaps.items.get(index).ok_or_else(|| {
            Failure::invalid(format!(
                "index {index} is out of range (the list has {} series)",
                gaps.items.len()
            ))
        })?;
        Out::optional(series_out).write(g.series.as_ptr());
        Out::optional(next_out).write(g.next);
        Out::optional(length_out).write(g.length);
        Out::optional(held_out).write(if g.held.is_empty() {
            std::ptr::null()
        } else {
            g.held.as_ptr()
        });
        Out::optional(held_count_out).write(g.held.len());
        Ok(POSTBOX_OK)
    })
}

/// Frees a list from `postbox_collator_incomplete`. NULL is a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_series_gaps_free(gaps: *mut postbox_series_gaps) {
    guard(|| {
        drop(take_box(gaps));
        Ok(())
    })
}
