//! Application tables: small key-value rows kept in the store and written alone or with a
//! transaction's receives and sends, in one commit (the outbox and inbox patterns).

use std::ffi::{c_char, c_int, c_void};

use crate::guard::{Failure, Out, Outcome, arg_slice, arg_str, guard};
use crate::handle::live;
use crate::postbox_bytes;
use crate::session::buffer_of;
use crate::status::{POSTBOX_NOT_FOUND, POSTBOX_OK};
use crate::store::postbox_store;
use crate::tx::{postbox_tx, with_tx};

// The engine keeps its two limits private; the C suite checks both bounds against these.

/// The longest application table name and key, in bytes (a longer one is refused with
/// `POSTBOX_INVALID_ARGUMENT`). Names are 1 to this many bytes; keys 0 to this many.
pub const POSTBOX_MAX_TABLE_KEY_LEN: usize = 1024;
/// The largest application table value, in bytes (a larger one is refused with
/// `POSTBOX_INVALID_ARGUMENT`).
pub const POSTBOX_MAX_TABLE_VALUE_LEN: usize = 1 << 20;

/// A row callback of `postbox_table_range`, called on the calling thread once per row in key
/// order, after the rows were read (so it may call postbox, with the same transaction too).
/// `key` and `value` are borrowed for the call only: copy them to keep them. Return 0 to go on,
/// any other value to stop (`postbox_table_range` then returns `POSTBOX_OK`).
pub type postbox_row_fn = Option<
    unsafe extern "C" fn(user_data: *mut c_void, key: postbox_bytes, value: postbox_bytes) -> c_int,
>;

/// Runs `alone` on the store's table, or `in_tx` on the transaction's view of it.
fn on_table<T>(
    s: &postbox_store,
    tx: *mut postbox_tx,
    table: &str,
    alone: impl FnOnce(&postbox::Table) -> postbox::Result<T>,
    in_tx: impl FnOnce(&mut postbox::TxTable<'_>) -> postbox::Result<T>,
) -> Outcome<T> {
    if tx.is_null() {
        Ok(alone(&s.store.table(table)?)?)
    } else {
        with_tx(tx, s.tag, |t| Ok(in_tx(&mut t.table(table)?)?))
    }
}

/// Reads the value of `key[0..key_len]` in application table `table` (NUL-terminated UTF-8).
///
/// With `tx` NULL: the committed value. With a transaction: the value as `tx` sees it, its own
/// uncommitted writes included. Reads take no locks.
///
/// On success `value_out` receives a copy the caller frees with `postbox_buffer_free` (not
/// `free()`; never NULL, also for an empty value) and `value_len_out` its length.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (no such row, or no such table: a table exists once a row
/// is written to it); `POSTBOX_INVALID_ARGUMENT` (NULL `store`, `table`, `value_out` or
/// `value_len_out`, NULL `key` with a length, a name empty or over
/// `POSTBOX_MAX_TABLE_KEY_LEN` bytes, a key over it, a transaction of another store or already
/// finished); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_table_get(
    store: *const postbox_store,
    tx: *mut postbox_tx,
    table: *const c_char,
    key: *const u8,
    key_len: usize,
    value_out: *mut *mut u8,
    value_len_out: *mut usize,
) -> c_int {
    guard(|| {
        let s = live(store)?;
        let table = arg_str(table, "table")?;
        let key = arg_slice(key, key_len, "key")?;
        let data = Out::required(value_out, "value_out")?;
        let len = Out::required(value_len_out, "value_len_out")?;
        let value = on_table(s, tx, table, |t| t.get(key), |t| t.get(key))?;
        let value = value.ok_or_else(|| {
            Failure::new(
                POSTBOX_NOT_FOUND,
                format!("table {table:?} has no row with this key"),
            )
        })?;
        len.write(value.len());
        data.write(buffer_of(&value));
        Ok(POSTBOX_OK)
    })
}

/// Sets `key[0..key_len]` to `value[0..value_len]` in application table `table`
/// (NUL-terminated UTF-8), creating the row (and the table) if needed. Everything is copied.
///
/// With `tx` NULL the write is one durable commit of its own. With a transaction it is applied
/// when `tx` commits, atomically with its receives and sends, and discarded if it aborts; a
/// later write of the same key in `tx` replaces it.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `store` or `table`, NULL `key` or `value`
/// with a length, a name empty or over `POSTBOX_MAX_TABLE_KEY_LEN` bytes, a key over it, a value
/// over `POSTBOX_MAX_TABLE_VALUE_LEN`, a transaction of another store or already finished);
/// `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_table_put(
    store: *mut postbox_store,
    tx: *mut postbox_tx,
    table: *const c_char,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> c_int {
    guard(|| {
        let s = live(store)?;
        let table = arg_str(table, "table")?;
        let key = arg_slice(key, key_len, "key")?;
        let value = arg_slice(value, value_len, "value")?;
        on_table(s, tx, table, |t| t.put(key, value), |t| t.put(key, value))?;
        Ok(POSTBOX_OK)
    })
}

/// Removes `key[0..key_len]` from application table `table` (NUL-terminated UTF-8); removing a
/// missing row is not an error. With `tx` NULL, one durable commit of its own; with a
/// transaction, applied when `tx` commits.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (as `postbox_table_put`); `POSTBOX_CLOSED`;
/// `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_table_delete(
    store: *mut postbox_store,
    tx: *mut postbox_tx,
    table: *const c_char,
    key: *const u8,
    key_len: usize,
) -> c_int {
    guard(|| {
        let s = live(store)?;
        let table = arg_str(table, "table")?;
        let key = arg_slice(key, key_len, "key")?;
        on_table(s, tx, table, |t| t.delete(key), |t| t.delete(key))?;
        Ok(POSTBOX_OK)
    })
}

/// Adds `delta` to the counter in row `key[0..key_len]` of application table `table`
/// (NUL-terminated UTF-8) and, if `value_out` is not NULL, writes the new value there. A counter
/// row holds its value as a decimal integer in ASCII: an optional `-`, then digits, in the range
/// of `int64_t` (what `snprintf(buf, n, "%" PRId64, v)` writes); a missing row counts as 0.
///
/// With `tx` NULL the row is read and written in one durable commit of its own: concurrent
/// increments from any threads and processes all count. With a transaction, the row as `tx`
/// sees it is incremented and the commit writes the new value; the first time `tx` reads the
/// row from the store, the value read becomes a condition of its commit, which fails with
/// `POSTBOX_CONFLICT` (applying nothing) if another commit changed the row in between — so a
/// value handed out is never handed out twice. Increments of one row in one transaction add up.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `store` or `table`, NULL `key` with a length,
/// a name or key out of bounds, a row that holds something else than such an integer, a sum
/// outside the range of `int64_t`: nothing written; a transaction of another store or already
/// finished); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_table_increment(
    store: *mut postbox_store,
    tx: *mut postbox_tx,
    table: *const c_char,
    key: *const u8,
    key_len: usize,
    delta: i64,
    value_out: *mut i64,
) -> c_int {
    guard(|| {
        let s = live(store)?;
        let table = arg_str(table, "table")?;
        let key = arg_slice(key, key_len, "key")?;
        let out = Out::optional(value_out);
        let value = on_table(
            s,
            tx,
            table,
            |t| t.increment(key, delta),
            |t| t.increment(key, delta),
        )?;
        out.write(value);
        Ok(POSTBOX_OK)
    })
}

/// Sets row `key[0..key_len]` of application table `table` (NUL-terminated UTF-8) to
/// `value[0..value_len]` if it holds `expected[0..expected_len]` now — with `expected` NULL (and
/// `expected_len` 0), if there is no such row; a non-NULL `expected` of length 0 is the empty
/// value — and writes whether it did to `*set_out`: a compare-and-set. Everything is copied.
///
/// With `tx` NULL the comparison and the write are one durable commit of their own. With a
/// transaction, the row as `tx` sees it is compared, and on a match the write is applied when
/// `tx` commits; the value `tx` read from the store (if it read one) becomes a condition of
/// its commit, which fails with `POSTBOX_CONFLICT` (applying nothing) if another commit changed
/// the row in between. On no match nothing is recorded.
///
/// # Returns
/// `POSTBOX_OK` (also when the row did not match: `*set_out` is then false);
/// `POSTBOX_INVALID_ARGUMENT` (NULL `store`, `table` or `set_out`, NULL `key`, `value` or
/// `expected` with a length, a name or key out of bounds, a value over
/// `POSTBOX_MAX_TABLE_VALUE_LEN`, a transaction of another store or already finished);
/// `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_table_put_if(
    store: *mut postbox_store,
    tx: *mut postbox_tx,
    table: *const c_char,
    key: *const u8,
    key_len: usize,
    expected: *const u8,
    expected_len: usize,
    value: *const u8,
    value_len: usize,
    set_out: *mut bool,
) -> c_int {
    guard(|| {
        let s = live(store)?;
        let table = arg_str(table, "table")?;
        let key = arg_slice(key, key_len, "key")?;
        let expected = if expected.is_null() {
            if expected_len != 0 {
                return Err(Failure::invalid(format!(
                    "expected is NULL but its length is {expected_len}"
                )));
            }
            None
        } else {
            Some(arg_slice(expected, expected_len, "expected")?)
        };
        let value = arg_slice(value, value_len, "value")?;
        let out = Out::required(set_out, "set_out")?;
        let set = on_table(
            s,
            tx,
            table,
            |t| t.put_if(key, expected, value),
            |t| t.put_if(key, expected, value),
        )?;
        out.write(set);
        Ok(POSTBOX_OK)
    })
}

/// Calls `callback(user_data, key, value)` for the rows of application table `table`
/// (NUL-terminated UTF-8) with `start <= key < end` in key order (bytewise), at most `limit`
/// of them (`SIZE_MAX` for all), until the callback returns non-zero. `start` may be NULL with
/// `start_len` 0 (from the first row); `end` NULL (with `end_len` 0) reads to the end of the
/// table, while a non-NULL `end` of length 0 selects nothing.
///
/// With `tx` NULL the committed rows are read, from one snapshot; with a transaction, the rows
/// as `tx` sees them, its own uncommitted writes included. The rows are read before the first
/// callback, so the callback may call postbox (also with `tx`). `count_out` may be NULL; on
/// success it receives the number of callbacks made.
///
/// # Returns
/// `POSTBOX_OK` (also when the callback stopped early); `POSTBOX_INVALID_ARGUMENT` (NULL `store`,
/// `table` or `callback`, NULL `start` or `end` with a length, a name or `start` out of bounds, a
/// transaction of another store or already finished); `POSTBOX_CLOSED`; `POSTBOX_FORKED`;
/// storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_table_range(
    store: *const postbox_store,
    tx: *mut postbox_tx,
    table: *const c_char,
    start: *const u8,
    start_len: usize,
    end: *const u8,
    end_len: usize,
    limit: usize,
    callback: postbox_row_fn,
    user_data: *mut c_void,
    count_out: *mut usize,
) -> c_int {
    guard(|| {
        let s = live(store)?;
        let table = arg_str(table, "table")?;
        let start = arg_slice(start, start_len, "start")?;
        let end = if end.is_null() {
            if end_len != 0 {
                return Err(Failure::invalid(format!(
                    "end is NULL but its length is {end_len}"
                )));
            }
            None
        } else {
            Some(arg_slice(end, end_len, "end")?)
        };
        let callback = callback.ok_or_else(|| Failure::null("callback"))?;
        let count = Out::optional(count_out);
        let rows = on_table(
            s,
            tx,
            table,
            |t| t.range(start, end, limit),
            |t| t.range(start, end, limit),
        )?;
        let mut called = 0usize;
        for (k, v) in &rows {
            called += 1;
            if call_row(callback, user_data, k, v) != 0 {
                break;
            }
        }
        count.write(called);
        Ok(POSTBOX_OK)
    })
}

/// One call of a `postbox_table_range` callback.
fn call_row(
    callback: unsafe extern "C" fn(*mut c_void, postbox_bytes, postbox_bytes) -> c_int,
    user_data: *mut c_void,
    key: &[u8],
    value: &[u8],
) -> c_int {
    // SAFETY: the header requires `callback` to be a valid function of this type; it gets the
    // caller's own `user_data` back, untouched, and views that stay valid during the call.
    unsafe { callback(user_data, postbox_bytes::of(key), postbox_bytes::of(value)) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn table_limits_match_the_engine() {
        assert_eq!(super::POSTBOX_MAX_TABLE_KEY_LEN, postbox::MAX_TABLE_KEY_LEN);
        assert_eq!(
            super::POSTBOX_MAX_TABLE_VALUE_LEN,
            postbox::MAX_TABLE_VALUE_LEN
        );
    }
}
