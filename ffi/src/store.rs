//! `postbox_store`: open, close, list and delete queues, pipeline counters.

use std::ffi::{CString, c_char, c_int};
use std::time::Duration;

use postbox::{Durability, Store};

use crate::StoreTag;
use crate::guard::{
    Failure, Out, Outcome, VersionedOut, arg_ref, arg_str, guard, read_versioned, take_box,
};
use crate::handle::Handle;
use crate::status::POSTBOX_OK;

/// Durability: every commit is on stable storage (fsync) before the call returns; a message
/// whose send returned `POSTBOX_OK` survives `kill -9` and power loss. The default.
pub const POSTBOX_DURABILITY_IMMEDIATE: u32 = 0;
/// Durability: commits are not synced. Much faster, but a crash or power loss loses recent work
/// (sends and completions that returned `POSTBOX_OK`). Not allowed with `multi_process`.
pub const POSTBOX_DURABILITY_NONE: u32 = 1;

/// Options for `postbox_store_open`. A zeroed struct with `struct_size` set means "all
/// defaults"; `postbox_store_options_init` does exactly that.
///
/// `struct_size` must be `sizeof(postbox_store_options)` of the header you compiled against; a
/// later version of the library appends fields and still accepts the shorter struct.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct postbox_store_options {
    /// `sizeof(postbox_store_options)`.
    pub struct_size: u32,
    /// `POSTBOX_DURABILITY_IMMEDIATE` (0, default) or `POSTBOX_DURABILITY_NONE`.
    pub durability: u32,
    /// Non-zero: share the file with other processes (C, Rust, Python). Default 0: this process
    /// owns the file, which is faster and releases every stale lock at open.
    pub multi_process: c_int,
    /// Non-zero: skip the checksum verification of every page at open (faster open of a large
    /// store). Damaged messages are then found later, by the operation that reads them; damage
    /// to the file's own structures may surface as a message or queue not found, or abort the
    /// process inside the storage engine's commit. Skip it only for files known to be sound.
    pub skip_verify_on_open: c_int,
    /// Page cache size in bytes; 0 means the default, 64 MiB. With the write-ahead log, the
    /// pages its background commits change stay in this cache, up to its size, until a
    /// checkpoint writes them: a smaller cache shortens the send during which a checkpoint
    /// lands, while reads of a backlog larger than the cache come from the operating system's
    /// page cache.
    pub cache_size: u64,
    /// Multi-process only, where no change notification on the file tells waiters of other
    /// processes' messages (on Linux inotify does, and waiters do not poll): the first,
    /// shortest interval at which a waiting receiver polls the file, in ms; 0 means the
    /// default, 1 ms.
    pub poll_floor_ms: u32,
    /// Multi-process only, where waiters poll (see `poll_floor_ms`): the longest polling
    /// interval (the backoff doubles up to it), in ms; 0 means the default, 1000 ms. A message
    /// sent by another process is seen within it, and an idle waiter wakes about once per it.
    pub poll_ceiling_ms: u32,
    /// Non-zero: make every durable commit a durable commit of the store file itself instead
    /// of one append to the write-ahead log beside it (`<path>-log`). Slower for one caller;
    /// the log is used only by single-process stores with `POSTBOX_DURABILITY_IMMEDIATE`.
    /// Added after the first version of this struct.
    pub skip_write_ahead_log: c_int,
    /// Reserved, ignored: it sits where the second version of this struct had padding, which
    /// a caller built against that version may leave uninitialised.
    pub reserved: u32,
    /// Non-zero: open the store even when the write-ahead log it needs (it was not closed
    /// cleanly) is missing or damaged, giving up the work only that log held. Without it such
    /// an open fails with `POSTBOX_CORRUPTED`, whose message names the log and what is wrong
    /// with it. With it, the records that can still be verified are replayed, the damaged log
    /// is kept aside as `<path>-log.damaged-<time>`, and `postbox_store_log_loss` says what
    /// was lost. Added after the second version of this struct.
    pub accept_log_loss: c_int,
}

/// The first version of `postbox_store_options`: the smallest `struct_size` accepted.
const STORE_OPTIONS_V1: usize = std::mem::offset_of!(postbox_store_options, skip_write_ahead_log);

/// Pipeline counters of one store handle, filled by `postbox_store_stats`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct postbox_commit_stats {
    /// redb write transactions committed by this process.
    pub commits: u64,
    /// Operations (sends, receives, settles, …) carried by those commits; `operations /
    /// commits` shows the effect of group commit.
    pub operations: u64,
}

/// The write-ahead log's counters of one store handle, filled by `postbox_store_log_stats`.
///
/// Versioned: the caller sets `struct_size` to `sizeof(postbox_log_stats)` (or calls
/// `postbox_log_stats_init`) before the call. Later versions of the library append fields and
/// keep accepting the shorter struct: a caller built against an older header gets only the
/// fields its `struct_size` covers, and nothing past them is written.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct postbox_log_stats {
    /// `sizeof(postbox_log_stats)`, set by the caller; written back unchanged.
    pub struct_size: u32,
    /// Reserved (keeps the counters 8-byte aligned without padding); written as 0.
    pub reserved: u32,
    /// Log records the open of this store replayed: work a crash left in the log, 0 after a
    /// clean close.
    pub replayed_records: u64,
    /// Records this handle appended to the log (one per durable commit through the log).
    pub log_records: u64,
    /// Bytes of those records.
    pub log_bytes: u64,
    /// Checkpoints: durable commits of the store file that made the log's records redundant.
    pub checkpoints: u64,
    /// Total nanoseconds of logged commits spent running their operations.
    pub run_ns: u64,
    /// Total nanoseconds spent applying them to the store file without a sync (overlaps the
    /// log write and sync).
    pub apply_ns: u64,
    /// Total nanoseconds spent writing their records to the log.
    pub write_ns: u64,
    /// Total nanoseconds spent syncing the log.
    pub sync_ns: u64,
}

/// The first version of `postbox_log_stats`: the smallest `struct_size` accepted.
const LOG_STATS_V1: usize = size_of::<postbox_log_stats>();

// `VersionedOut` copies an older caller's prefix of the struct: it holds no padding.
const _: () = assert!(LOG_STATS_V1 == 8 + 8 * 8);

/// An open store: one file holding many queues. Created by `postbox_store_open`, released by
/// `postbox_store_close`. Thread-safe: any number of threads may use one store handle at once.
pub struct postbox_store {
    pub(crate) store: Store,
    pub(crate) tag: StoreTag,
    /// `Store::log_loss` as C text, made once at open.
    log_loss: Option<CString>,
}

impl Handle for postbox_store {
    const ARG: &'static str = "store";

    fn tag(&self) -> StoreTag {
        self.tag
    }
}

/// A list of strings returned by postbox (e.g. queue names). Read it with
/// `postbox_strings_count` and `postbox_strings_get`; free it with `postbox_strings_free`.
/// Immutable, so thread-safe.
pub struct postbox_strings {
    items: Vec<CString>,
}

impl postbox_strings {
    /// A list for C, boxed: the caller frees it with `postbox_strings_free`.
    pub(crate) fn boxed(names: Vec<String>) -> Outcome<*mut postbox_strings> {
        let items = names
            .into_iter()
            .map(|n| CString::new(n).map_err(|_| Failure::invalid("a name contains NUL")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Box::into_raw(Box::new(postbox_strings { items })))
    }
}

/// Fills `options` with the defaults and sets its `struct_size`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `options` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_store_options_init(options: *mut postbox_store_options) -> c_int {
    guard(|| {
        let out = Out::required(options, "options")?;
        out.write(postbox_store_options {
            struct_size: size_of::<postbox_store_options>() as u32,
            ..Default::default()
        });
        Ok(POSTBOX_OK)
    })
}

fn path_of(path: *const c_char) -> Result<std::path::PathBuf, Failure> {
    if path.is_null() {
        return Err(Failure::null("path"));
    }
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: non-NULL, and the header requires a NUL-terminated string valid during the
        // call. Unix paths are bytes, so any bytes are accepted.
        let bytes = unsafe { std::ffi::CStr::from_ptr(path) }.to_bytes();
        if bytes.is_empty() {
            return Err(Failure::invalid("path must not be empty"));
        }
        Ok(std::ffi::OsStr::from_bytes(bytes).into())
    }
    // Windows names are UTF-16: a C caller passes UTF-8, as to SQLite.
    #[cfg(not(unix))]
    {
        let s = arg_str(path, "path")?;
        if s.is_empty() {
            return Err(Failure::invalid("path must not be empty"));
        }
        Ok(s.into())
    }
}

/// Opens the store at `path`, creating the file if it does not exist. An existing store keeps
/// all its messages.
///
/// - `path`: NUL-terminated file name: any bytes on Unix; UTF-8 on Windows (as SQLite's
///   `sqlite3_open`), where a name that is not valid UTF-8 is `POSTBOX_INVALID_ARGUMENT`. The
///   directory must exist.
/// - `options`: NULL for the defaults, or a struct prepared with `postbox_store_options_init`.
///   It is read during the call only.
/// - `store_out`: receives the new handle on success. The caller owns it and must release it
///   with `postbox_store_close`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `path`/`store_out`, empty path, bad
/// `struct_size` or durability value); `POSTBOX_CONFIG` (multi-process with
/// `POSTBOX_DURABILITY_NONE`, poll floor above ceiling); `POSTBOX_NOT_A_STORE` (the file is
/// something else); `POSTBOX_CORRUPTED`; `POSTBOX_INCOMPATIBLE_VERSION`; `POSTBOX_ALREADY_OPEN`
/// (the store is open in single-process mode elsewhere: in another process, or through another
/// handle of this process; the detailed message says which); `POSTBOX_IO` (missing directory,
/// permissions); `POSTBOX_STORAGE_FULL`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_store_open(
    path: *const c_char,
    options: *const postbox_store_options,
    store_out: *mut *mut postbox_store,
) -> c_int {
    guard(|| {
        let path = path_of(path)?;
        let out = Out::required(store_out, "store_out")?;
        let o = read_versioned(options, STORE_OPTIONS_V1, "options")?.unwrap_or_default();
        let durability = match o.durability {
            POSTBOX_DURABILITY_IMMEDIATE => Durability::Immediate,
            POSTBOX_DURABILITY_NONE => Durability::None,
            other => {
                return Err(Failure::invalid(format!(
                    "options.durability must be POSTBOX_DURABILITY_IMMEDIATE or POSTBOX_DURABILITY_NONE, got {other}"
                )));
            }
        };
        let mut builder = Store::builder()
            .durability(durability)
            .multi_process(o.multi_process != 0)
            .verify_on_open(o.skip_verify_on_open == 0)
            .write_ahead_log(o.skip_write_ahead_log == 0)
            .accept_log_loss(o.accept_log_loss != 0);
        if o.cache_size != 0 {
            let bytes = usize::try_from(o.cache_size)
                .map_err(|_| Failure::invalid("options.cache_size does not fit in size_t"))?;
            builder = builder.cache_size(bytes);
        }
        if o.poll_floor_ms != 0 || o.poll_ceiling_ms != 0 {
            let floor = if o.poll_floor_ms == 0 {
                1
            } else {
                o.poll_floor_ms
            };
            let ceiling = if o.poll_ceiling_ms == 0 {
                1000.max(floor)
            } else {
                o.poll_ceiling_ms
            };
            builder = builder.poll_interval(
                Duration::from_millis(floor.into()),
                Duration::from_millis(ceiling.into()),
            );
        }
        let store = builder.open(&path)?;
        // The text comes from paths and the store's own words; a NUL in a path is cut there.
        let log_loss = store
            .log_loss()
            .map(|t| CString::new(t.replace('\0', "")).unwrap_or_default());
        out.write(Box::into_raw(Box::new(postbox_store {
            store,
            tag: StoreTag::next(),
            log_loss,
        })));
        Ok(POSTBOX_OK)
    })
}

/// Closes the store and frees the handle: waits for pending commits, releases the locks this
/// process holds, syncs the file. Always consumes `store`, even when it returns an error.
///
/// Queue, message, transaction and processor handles of this store stay valid to *free*, but
/// their other calls fail with `POSTBOX_CLOSED` afterwards; free them as usual. Shut processors
/// down before closing their store. Do not call this while another thread is still using
/// `store`. `store` may be NULL (no-op, `POSTBOX_OK`).
///
/// In a forked child (a handle inherited across `fork()`) it only frees the handle and returns
/// `POSTBOX_OK`: the file, its locks and its pending commits belong to the parent.
///
/// # Returns
/// `POSTBOX_OK`; the final commit's `POSTBOX_IO`, `POSTBOX_STORAGE_FULL` or
/// `POSTBOX_OUTCOME_UNKNOWN`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_store_close(store: *mut postbox_store) -> c_int {
    guard(|| {
        if let Some(handle) = take_box(store) {
            handle.store.close()?;
        }
        Ok(POSTBOX_OK)
    })
}

/// Lists the names of the store's queues (dead-letter queues are not listed; reach them with
/// `postbox_queue_dead_letters`). Topic subscriptions are queues and are listed under their
/// full names (`<topic>/$subscriptions/<name>`); topics (`postbox_store_topics`) and
/// collators are not.
///
/// `names_out` receives a list the caller owns and frees with `postbox_strings_free`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument); `POSTBOX_CLOSED`;
/// `POSTBOX_FORKED`; storage errors (`POSTBOX_IO`, `POSTBOX_CORRUPTED`).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_store_queues(
    store: *const postbox_store,
    names_out: *mut *mut postbox_strings,
) -> c_int {
    guard(|| {
        let store = arg_ref(store, "store")?;
        let out = Out::required(names_out, "names_out")?;
        store.live()?;
        out.write(postbox_strings::boxed(store.store.queues()?)?);
        Ok(POSTBOX_OK)
    })
}

/// The number of strings in `list` (0 for NULL).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_strings_count(list: *const postbox_strings) -> usize {
    guard(|| Ok(arg_ref(list, "list")?.items.len()))
}

/// The string at `index` (NUL-terminated UTF-8), or NULL when `list` is NULL or `index` is out
/// of range. Valid until `list` is freed.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_strings_get(list: *const postbox_strings, index: usize) -> *const c_char {
    guard(|| {
        let list = arg_ref(list, "list")?;
        let item = list
            .items
            .get(index)
            .ok_or_else(|| Failure::invalid(format!("index {index} is out of range")))?;
        Ok(item.as_ptr())
    })
}

/// Frees a list from `postbox_store_queues`, `postbox_store_topics` or
/// `postbox_topic_subscriptions`. NULL is a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_strings_free(list: *mut postbox_strings) {
    guard(|| {
        drop(take_box(list));
        Ok(())
    })
}

/// Deletes queue `name`, its dead-letter queue and all their messages. Handles to it fail with
/// `POSTBOX_QUEUE_NOT_FOUND` afterwards (free them as usual); a queue opened again under the
/// same name is a new, empty queue with default options. The name of a topic deletes the topic
/// with every subscription (their queues and messages); the name of a collator deletes the
/// collator and the messages it holds (its destination queue stays).
///
/// A queue that something names is in use and is not deleted: another queue's `forward_to`,
/// `forward_dead_letters_to` or `receipts_to`, a collator releasing into it, or a job that is not
/// done and sends its continuation there. Each promises to deliver into the queue, so the
/// deletion is refused (`POSTBOX_IN_USE`; `postbox_last_error_message()` names the user) rather
/// than losing what they deliver later; clear the option, free and delete the collator, or
/// delete (or finish) the job first. `auto_delete_on_idle_ms` skips a queue in use too.
///
/// `existed_out` may be NULL; on success it receives whether the queue existed (deleting a
/// missing queue is not an error).
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_IN_USE` (something names the queue, or for a topic one of its
/// subscriptions; nothing deleted); `POSTBOX_INVALID_ARGUMENT` (NULL `store`/`name`, a bad name,
/// or the name of a dead-letter queue); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_queue_delete(
    store: *mut postbox_store,
    name: *const c_char,
    existed_out: *mut bool,
) -> c_int {
    guard(|| {
        let store = arg_ref(store, "store")?;
        let name = arg_str(name, "name")?;
        let out = Out::optional(existed_out);
        store.live()?;
        let existed = store.store.delete_queue(name)?;
        out.write(existed);
        Ok(POSTBOX_OK)
    })
}

/// Reads the commit-pipeline counters of this store handle into `stats_out`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument); `POSTBOX_FORKED`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_store_stats(
    store: *const postbox_store,
    stats_out: *mut postbox_commit_stats,
) -> c_int {
    guard(|| {
        let store = arg_ref(store, "store")?;
        let out = Out::required(stats_out, "stats_out")?;
        store.live()?;
        let s = store.store.stats();
        out.write(postbox_commit_stats {
            commits: s.commits,
            operations: s.operations,
        });
        Ok(POSTBOX_OK)
    })
}

/// What the open of `store` could not recover: set when it was opened with
/// `accept_log_loss` and the write-ahead log it needed was missing or damaged (which log, what
/// was wrong with it, which records were replayed). `*text_out` is NULL when nothing was lost
/// (always, without that option: such an open fails instead). The text is owned by the store
/// and valid until `postbox_store_close`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument); `POSTBOX_FORKED`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_store_log_loss(
    store: *const postbox_store,
    text_out: *mut *const c_char,
) -> c_int {
    guard(|| {
        let store = arg_ref(store, "store")?;
        let out = Out::required(text_out, "text_out")?;
        store.live()?;
        out.write(
            store
                .log_loss
                .as_ref()
                .map_or(std::ptr::null(), |t| t.as_ptr()),
        );
        Ok(POSTBOX_OK)
    })
}

/// Sets `stats->struct_size` to `sizeof(postbox_log_stats)` and every counter to 0.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `stats` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_log_stats_init(stats: *mut postbox_log_stats) -> c_int {
    guard(|| {
        Out::required(stats, "stats")?.write(postbox_log_stats {
            struct_size: LOG_STATS_V1 as u32,
            ..Default::default()
        });
        Ok(POSTBOX_OK)
    })
}

/// Reads the write-ahead log's counters of this handle into `stats_out`, whose `struct_size`
/// the caller sets first (`sizeof(postbox_log_stats)`, or `postbox_log_stats_init`).
/// `replayed_records` says how much a crash had left to recover when this handle opened the
/// store; every open replays what a crash left, so it can be non-zero in any mode. A store
/// without the log (multi-process, `POSTBOX_DURABILITY_NONE`, `skip_write_ahead_log`) reports
/// zero for every other counter.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, bad `struct_size`); `POSTBOX_FORKED`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_store_log_stats(
    store: *const postbox_store,
    stats_out: *mut postbox_log_stats,
) -> c_int {
    guard(|| {
        let store = arg_ref(store, "store")?;
        let out = VersionedOut::required(stats_out, LOG_STATS_V1, "stats_out")?;
        store.live()?;
        let s = store.store.stats();
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        out.write(postbox_log_stats {
            struct_size: LOG_STATS_V1 as u32,
            reserved: 0,
            replayed_records: s.replayed_records,
            log_records: s.log_records,
            log_bytes: s.log_bytes,
            checkpoints: s.checkpoints,
            run_ns: ns(s.log_timing.run),
            apply_ns: ns(s.log_timing.apply),
            write_ns: ns(s.log_timing.write),
            sync_ns: ns(s.log_timing.sync),
        });
        Ok(POSTBOX_OK)
    })
}
