//! `postbox_store_compact`: giving the space of deleted queues and purged messages back to the
//! file system.

use std::ffi::c_int;

use crate::guard::{Out, arg_ref, guard};
use crate::handle::Handle;
use crate::status::POSTBOX_OK;
use crate::store::postbox_store;

/// Compacts the store file: its live data is moved to the front and the file is truncated, so
/// that the space of deleted queues and of purged, completed or expired messages goes back to
/// the file system (the file never shrinks on its own; freed space is only reused by later
/// writes). Nothing the store holds changes: messages, their locks (a message received before
/// can be completed after), counts, dead letters and options stay as they were, and every
/// handle stays valid.
///
/// While it runs, every other call on this store waits, from every thread; calls already in
/// progress finish first. With the write-ahead log, the log is checkpointed first. In a store
/// shared with other processes (`multi_process`), their calls on the file wait too; the
/// compaction tries again while another process is reading the file, and gives up after a few
/// seconds. It takes longer the more live data the store holds.
///
/// `bytes_before` and `bytes_after` may be NULL; on success they receive the size of the store
/// file just before and just after the compaction itself, in bytes (after the log's checkpoint
/// and after waiting for other processes' reads, so what others wrote meanwhile is in both):
/// `bytes_before - bytes_after` is what it freed.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `store`); `POSTBOX_CLOSED`; `POSTBOX_FORKED`;
/// `POSTBOX_ALREADY_OPEN` when the store could not be had alone within a few seconds (calls of
/// this process still running, or another process reading the file all along): nothing
/// changed, try again, or compact with every other process closed; storage errors
/// (`POSTBOX_IO`, `POSTBOX_STORAGE_FULL`, `POSTBOX_CORRUPTED`; after a failure the store opens
/// its file again on the next call).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_store_compact(
    store: *mut postbox_store,
    bytes_before: *mut u64,
    bytes_after: *mut u64,
) -> c_int {
    guard(|| {
        let store = arg_ref(store, "store")?;
        let before = Out::optional(bytes_before);
        let after = Out::optional(bytes_after);
        store.live()?;
        let stats = store.store.compact()?;
        before.write(stats.bytes_before);
        after.write(stats.bytes_after);
        Ok(POSTBOX_OK)
    })
}
