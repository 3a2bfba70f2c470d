//! `postbox_job`: a piece of work split into messages (its pieces), whose counts and tracking
//! rows change in the commits that settle the pieces; its continuation message is sent once,
//! in the commit that ends the last piece of a sealed job.

use std::ffi::c_int;

use postbox::{Job, JobOptions, JobProgress, MessageId, PieceState};

use crate::guard::{
    Failure, Out, Outcome, VersionedOut, arg_ref, arg_slice, arg_slice_mut, guard, take_box,
};
use crate::handle::{Handle, live};
use crate::queue::{build_message, postbox_queue, postbox_send_item, postbox_send_options};
use crate::status::{POSTBOX_OK, POSTBOX_TIMEOUT};
use crate::store::postbox_store;
use crate::tx::{postbox_tx, with_tx};
use crate::{StoreTag, timeout, unix_ms};

/// A job: work split into messages (its pieces), sent to any queues of one store with
/// `postbox_job_send` (alone or in a transaction). Each piece's completion or dead-lettering
/// updates the job's counts and the piece's tracking row in the commit that settles it, so any
/// number of workers, in any threads and processes, never lose an update. Once the job is
/// sealed (`postbox_job_seal`: no more pieces) and every piece has ended, it is done:
/// `postbox_job_wait` returns, and the continuation message, if the job has one, is sent in that
/// same commit, exactly once.
///
/// Created by `postbox_job_create` or opened again by id with `postbox_job_open` (in any
/// process); freed with `postbox_job_free` (the job stays in the store until
/// `postbox_job_delete`). Thread-safe.
pub struct postbox_job {
    job: Job,
    tag: StoreTag,
}

impl Handle for postbox_job {
    const ARG: &'static str = "job";

    fn tag(&self) -> StoreTag {
        self.tag
    }
}

/// A queue handle of the job's store, for a piece.
fn piece_queue<'a>(j: &postbox_job, queue: *const postbox_queue) -> Outcome<&'a postbox_queue> {
    let q = live(queue)?;
    if q.tag != j.tag {
        return Err(Failure::invalid(
            "the queue belongs to another store handle than the job",
        ));
    }
    Ok(q)
}

/// A job's counts, filled by `postbox_job_progress_get`, `postbox_job_seal` and
/// `postbox_job_wait`, all read from one snapshot.
///
/// Versioned: the caller sets `struct_size` to `sizeof(postbox_job_progress)` (or calls
/// `postbox_job_progress_init`) before the call. Later versions of the library append fields
/// and keep accepting the shorter struct of an older header, writing only the fields its
/// `struct_size` covers.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct postbox_job_progress {
    /// `sizeof(postbox_job_progress)`, set by the caller; written back unchanged.
    pub struct_size: u32,
    /// 1 when the job is sealed (no more pieces can be added), else 0.
    pub sealed: c_int,
    /// 1 when the job is done (sealed, and every piece completed or dead-lettered), else 0.
    pub done: c_int,
    /// Reserved (keeps the counts 8-byte aligned without padding); written as 0.
    pub reserved: u32,
    /// Pieces sent.
    pub total: u64,
    /// Pieces completed.
    pub completed: u64,
    /// Pieces dead-lettered (or removed unsettled by a purge or their queue's deletion).
    pub dead_lettered: u64,
    /// Pieces not yet ended: `total - completed - dead_lettered`.
    pub pending: u64,
}

/// The first version of `postbox_job_progress`: the smallest `struct_size` accepted.
const JOB_PROGRESS_V1: usize = size_of::<postbox_job_progress>();

// `VersionedOut` copies an older caller's prefix of the struct: it holds no padding.
const _: () = assert!(JOB_PROGRESS_V1 == 4 * size_of::<u32>() + 4 * size_of::<u64>());

fn progress_of(p: JobProgress) -> postbox_job_progress {
    postbox_job_progress {
        struct_size: JOB_PROGRESS_V1 as u32,
        sealed: c_int::from(p.sealed),
        done: c_int::from(p.done),
        reserved: 0,
        total: p.total,
        completed: p.completed,
        dead_lettered: p.dead_lettered,
        pending: p.pending,
    }
}

/// An optional progress out-parameter, checked up front.
fn progress_out(
    ptr: *mut postbox_job_progress,
) -> Outcome<Option<VersionedOut<postbox_job_progress>>> {
    if ptr.is_null() {
        Ok(None)
    } else {
        VersionedOut::required(ptr, JOB_PROGRESS_V1, "progress_out").map(Some)
    }
}

/// State of a piece (`postbox_job_piece.state`): not yet completed or dead-lettered.
pub const POSTBOX_PIECE_PENDING: u32 = 0;
/// State of a piece: completed (at `postbox_job_piece.at_ms`).
pub const POSTBOX_PIECE_COMPLETED: u32 = 1;
/// State of a piece: dead-lettered, or removed unsettled by a purge or its queue's deletion
/// (at `postbox_job_piece.at_ms`).
pub const POSTBOX_PIECE_DEAD_LETTERED: u32 = 2;

/// One row of a job's tracking table, filled by `postbox_job_pieces`. This struct has no
/// `struct_size` (it is filled in arrays), so it never grows.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct postbox_job_piece {
    /// The piece's message id.
    pub id: u64,
    /// `POSTBOX_PIECE_PENDING`, `POSTBOX_PIECE_COMPLETED` or `POSTBOX_PIECE_DEAD_LETTERED`.
    pub state: u32,
    /// Reserved (the padding before `at_ms`, spelt out); written as 0.
    pub reserved: u32,
    /// When the piece ended (ms since the Unix epoch); 0 while it is pending.
    pub at_ms: u64,
}

/// Copies `items` into the caller's array of `capacity` slots (as many as fit) and reports how
/// many there are.
fn fill<T: Copy>(items: &[T], slots: &mut [T], count: Out<usize>) {
    for (slot, item) in slots.iter_mut().zip(items) {
        *slot = *item;
    }
    count.write(items.len());
}

/// Creates a job in `store`. With `continuation` set (a queue of the same store handle), the
/// message `body[0..body_len]` with `options` (NULL for none; as `postbox_send`) is sent to it
/// when the job is done, in the commit that ends its last piece (or in `postbox_job_seal`, if
/// every piece had ended by then): exactly once. With `continuation` NULL the job has no
/// continuation (`body_len` must then be 0 and `options` NULL). Everything is copied. The
/// continuation queue is in use until the job is done or deleted: `postbox_queue_delete`
/// refuses it with `POSTBOX_IN_USE`.
///
/// `job_out` receives a handle the caller frees with `postbox_job_free`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `store` or `job_out`, NULL body with a
/// length, bad options, a body or options without a continuation queue, a queue of another
/// store handle, that is not an ordinary queue or is temporary); `POSTBOX_TOO_LARGE` (the continuation is
/// above its queue's `max_message_size`); `POSTBOX_QUEUE_NOT_FOUND` (the continuation queue
/// was deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_job_create(
    store: *mut postbox_store,
    continuation: *const postbox_queue,
    body: *const u8,
    body_len: usize,
    options: *const postbox_send_options,
    job_out: *mut *mut postbox_job,
) -> c_int {
    guard(|| {
        let s = arg_ref(store, "store")?;
        let out = Out::required(job_out, "job_out")?;
        s.live()?;
        let mut job_options = JobOptions::default();
        if continuation.is_null() {
            if body_len != 0 || !body.is_null() || !options.is_null() {
                return Err(Failure::invalid(
                    "a continuation body or options need a continuation queue",
                ));
            }
        } else {
            let q = live(continuation)?;
            if q.tag != s.tag {
                return Err(Failure::invalid(
                    "the continuation queue belongs to another store handle",
                ));
            }
            let m = build_message(body, body_len, options, "body")?;
            job_options = job_options.continuation(&q.queue, m);
        }
        let job = s.store.create_job(job_options)?;
        out.write(Box::into_raw(Box::new(postbox_job { job, tag: s.tag })));
        Ok(POSTBOX_OK)
    })
}

/// Opens job `id` (from `postbox_job_id`), created in this or another process. `job_out`
/// receives a handle the caller frees with `postbox_job_free`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (no such job: never created, or deleted);
/// `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_job_open(
    store: *mut postbox_store,
    id: u64,
    job_out: *mut *mut postbox_job,
) -> c_int {
    guard(|| {
        let s = arg_ref(store, "store")?;
        let out = Out::required(job_out, "job_out")?;
        s.live()?;
        let job = s.store.job(id)?;
        out.write(Box::into_raw(Box::new(postbox_job { job, tag: s.tag })));
        Ok(POSTBOX_OK)
    })
}

/// The job's id (never 0), to open it again with `postbox_job_open`; 0 for NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_job_id(job: *const postbox_job) -> u64 {
    guard(|| Ok(arg_ref(job, "job")?.job.id()))
}

/// Frees a job handle (the job stays in the store; `postbox_job_delete` removes it). NULL is a
/// no-op.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_job_free(job: *mut postbox_job) {
    guard(|| {
        drop(take_box(job));
        Ok(())
    })
}

/// Sends one piece of the job to `queue` (a queue of the job's store handle): the message
/// `body[0..body_len]` with `options` (NULL for none), as `postbox_send` sends it.
///
/// With `tx` NULL the piece commits on its own and counts in the job at once. With a
/// transaction it is stored, and counted, when `tx` commits (a job sealed or deleted by then
/// fails the commit with `POSTBOX_INVALID_ARGUMENT` or `POSTBOX_NOT_FOUND`). Either way
/// `id_out` (may be NULL) receives the piece's message id. A duplicate (its `message_key` seen
/// within the queue's dedup window) is not a new piece: `id_out` then receives the original's
/// id.
///
/// # Returns
/// As `postbox_send`; also `POSTBOX_NOT_FOUND` (the job was deleted) and
/// `POSTBOX_INVALID_ARGUMENT` (NULL job, the job is sealed, a queue of another store handle).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_job_send(
    job: *mut postbox_job,
    queue: *mut postbox_queue,
    tx: *mut postbox_tx,
    body: *const u8,
    body_len: usize,
    options: *const postbox_send_options,
    id_out: *mut u64,
) -> c_int {
    guard(|| {
        let j = live(job)?;
        let q = piece_queue(j, queue)?;
        let out = Out::optional(id_out);
        let m = build_message(body, body_len, options, "body")?;
        let id = if tx.is_null() {
            j.job.send(&q.queue, m)?
        } else {
            with_tx(tx, j.tag, |t| Ok(t.send_piece(&j.job, &q.queue, m)?))?
        };
        out.write(id.get());
        Ok(POSTBOX_OK)
    })
}

/// Sends `count` pieces of the job to `queue` atomically: all in one commit (with `tx` NULL) or
/// with `tx`'s commit, or none. `ids_out` may be NULL, or an array of `count` elements that
/// receives the pieces' ids in order. `count` may be 0.
///
/// # Returns
/// As `postbox_job_send`; on any error no piece of the batch was sent, and the error names the
/// offending item (with a transaction, none of the batch joined it: the transaction stays
/// as it was and may still be committed).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_job_send_batch(
    job: *mut postbox_job,
    queue: *mut postbox_queue,
    tx: *mut postbox_tx,
    items: *const postbox_send_item,
    count: usize,
    ids_out: *mut u64,
) -> c_int {
    guard(|| {
        let j = live(job)?;
        let q = piece_queue(j, queue)?;
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
        let got: Vec<MessageId> = if tx.is_null() {
            j.job.send_batch(&q.queue, msgs)?
        } else {
            with_tx(tx, j.tag, |t| Ok(t.send_pieces(&j.job, &q.queue, msgs)?))?
        };
        if let Some(ids) = ids {
            for (slot, id) in ids.iter_mut().zip(got) {
                *slot = id.get();
            }
        }
        Ok(POSTBOX_OK)
    })
}

/// Seals the job: no more pieces can be sent. It is done once every piece has ended — at once
/// if they all have (its continuation is then sent by this call). Sealing twice is harmless.
/// `progress_out` may be NULL; otherwise (its `struct_size` set) it receives the job's counts
/// after the seal.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (the job was deleted); `POSTBOX_INVALID_ARGUMENT` (NULL
/// job, bad `struct_size`); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_job_seal(
    job: *mut postbox_job,
    progress_out: *mut postbox_job_progress,
) -> c_int {
    guard(|| {
        let j = live(job)?;
        let out = self::progress_out(progress_out)?;
        let p = j.job.seal()?;
        if let Some(out) = out {
            out.write(progress_of(p));
        }
        Ok(POSTBOX_OK)
    })
}

/// Fills `progress` with zeros and sets its `struct_size`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `progress` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_job_progress_init(progress: *mut postbox_job_progress) -> c_int {
    guard(|| {
        Out::required(progress, "progress")?.write(postbox_job_progress {
            struct_size: JOB_PROGRESS_V1 as u32,
            ..Default::default()
        });
        Ok(POSTBOX_OK)
    })
}

/// Reads the job's counts now into `progress_out`, whose `struct_size` the caller sets first
/// (`sizeof(postbox_job_progress)`, or `postbox_job_progress_init`).
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (the job was deleted); `POSTBOX_INVALID_ARGUMENT` (NULL,
/// bad `struct_size`); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_job_progress_get(
    job: *const postbox_job,
    progress_out: *mut postbox_job_progress,
) -> c_int {
    guard(|| {
        let j = live(job)?;
        let out = VersionedOut::required(progress_out, JOB_PROGRESS_V1, "progress_out")?;
        out.write(progress_of(j.job.progress()?));
        Ok(POSTBOX_OK)
    })
}

/// Waits up to `timeout_ms` milliseconds (0: do not wait; negative: without limit) for the job
/// to be done, woken by the commit that ends its last piece (in this process at once; from
/// another process within the store's polling interval). `progress_out` may be NULL; otherwise
/// (its `struct_size` set) it receives the job's counts when the call returns — also on
/// `POSTBOX_TIMEOUT`, the one failure on which it is written, so that a caller can report
/// progress between waits.
///
/// # Returns
/// `POSTBOX_OK` (the job is done); `POSTBOX_TIMEOUT` (not done in time: a normal outcome; not
/// sealed yet, perhaps); `POSTBOX_NOT_FOUND` (the job was deleted); `POSTBOX_INVALID_ARGUMENT`
/// (NULL job, bad `struct_size`); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_job_wait(
    job: *const postbox_job,
    timeout_ms: i64,
    progress_out: *mut postbox_job_progress,
) -> c_int {
    guard(|| {
        let j = live(job)?;
        let out = self::progress_out(progress_out)?;
        let p = match j.job.wait(timeout(timeout_ms))? {
            Some(p) => p,
            None => j.job.progress()?,
        };
        if let Some(out) = out {
            out.write(progress_of(p));
        }
        // Done since the wait gave up: that is done, too.
        if p.done {
            Ok(POSTBOX_OK)
        } else {
            Err(Failure::new(
                POSTBOX_TIMEOUT,
                format!(
                    "job {} was not done within {timeout_ms} ms ({} of {} pieces pending{})",
                    j.job.id(),
                    p.pending,
                    p.total,
                    if p.sealed { "" } else { ", not sealed" }
                ),
            ))
        }
    })
}

/// The ids of the job's pieces not yet ended, in id order. `ids_out` is a caller array of
/// `capacity` elements (may be NULL when `capacity` is 0); it receives the first
/// `min(capacity, *count_out)` ids. `count_out` receives the number of pending pieces: when it
/// is above `capacity` the array was too small (call again with a larger one; the set may have
/// changed meanwhile).
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (the job was deleted); `POSTBOX_INVALID_ARGUMENT` (NULL
/// job or `count_out`, NULL `ids_out` with a capacity); `POSTBOX_CLOSED`; `POSTBOX_FORKED`;
/// storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_job_pending(
    job: *const postbox_job,
    ids_out: *mut u64,
    capacity: usize,
    count_out: *mut usize,
) -> c_int {
    guard(|| {
        let j = live(job)?;
        let slots = arg_slice_mut(ids_out, capacity, "ids_out")?;
        let count = Out::required(count_out, "count_out")?;
        let ids: Vec<u64> = j.job.pending()?.into_iter().map(MessageId::get).collect();
        fill(&ids, slots, count);
        Ok(POSTBOX_OK)
    })
}

/// The job's tracking table: every piece and how it stands, in id order. `pieces_out` is a
/// caller array of `capacity` elements (may be NULL when `capacity` is 0); it receives the
/// first `min(capacity, *count_out)` rows. `count_out` receives the number of pieces: when it
/// is above `capacity` the array was too small.
///
/// # Returns
/// As `postbox_job_pending`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_job_pieces(
    job: *const postbox_job,
    pieces_out: *mut postbox_job_piece,
    capacity: usize,
    count_out: *mut usize,
) -> c_int {
    guard(|| {
        let j = live(job)?;
        let slots = arg_slice_mut(pieces_out, capacity, "pieces_out")?;
        let count = Out::required(count_out, "count_out")?;
        let rows: Vec<postbox_job_piece> = j
            .job
            .pieces()?
            .into_iter()
            .map(|(id, state)| {
                let (state, at) = match state {
                    PieceState::Completed(at) => (POSTBOX_PIECE_COMPLETED, unix_ms(at)),
                    PieceState::DeadLettered(at) => (POSTBOX_PIECE_DEAD_LETTERED, unix_ms(at)),
                    PieceState::Pending => (POSTBOX_PIECE_PENDING, 0),
                };
                postbox_job_piece {
                    id: id.get(),
                    state,
                    reserved: 0,
                    at_ms: at,
                }
            })
            .collect();
        fill(&rows, slots, count);
        Ok(POSTBOX_OK)
    })
}

/// Deletes the job and its tracking table; pieces still pending stay in their queues as
/// ordinary messages. The handle must still be freed; its other calls return
/// `POSTBOX_NOT_FOUND` from then on. `existed_out` may be NULL; on success it receives whether
/// the job existed (deleting it twice is not an error).
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL job); `POSTBOX_CLOSED`; `POSTBOX_FORKED`;
/// storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_job_delete(job: *mut postbox_job, existed_out: *mut bool) -> c_int {
    guard(|| {
        let j = live(job)?;
        let out = Out::optional(existed_out);
        out.write(j.job.delete()?);
        Ok(POSTBOX_OK)
    })
}
