//! Application tables: small key-value tables kept in the store, written in the same commit as
//! a transaction's sends and settles (the outbox / inbox pattern).

use super::*;

/// The longest application table name and key, in bytes.
pub const MAX_APP_KEY_LEN: usize = 1024;
/// The largest application value, in bytes.
pub const MAX_APP_VALUE_LEN: usize = 1 << 20;

/// One change to an application table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowWrite {
    Put(Vec<u8>),
    Delete,
}

/// Checks an application table name and key.
pub fn validate_app_key(table: &str, key: &[u8]) -> Result<()> {
    if table.is_empty() || table.len() > MAX_APP_KEY_LEN {
        return Err(Error::invalid(format!(
            "table names are 1 to {MAX_APP_KEY_LEN} bytes long, got {} bytes",
            table.len()
        )));
    }
    if key.len() > MAX_APP_KEY_LEN {
        return Err(Error::invalid(format!(
            "table keys are at most {MAX_APP_KEY_LEN} bytes long, got {} bytes",
            key.len()
        )));
    }
    Ok(())
}

/// Checks an application value.
pub fn validate_app_value(value: &[u8]) -> Result<()> {
    if value.len() > MAX_APP_VALUE_LEN {
        return Err(Error::invalid(format!(
            "table values are at most {MAX_APP_VALUE_LEN} bytes long, got {} bytes",
            value.len()
        )));
    }
    Ok(())
}

/// The values that a transaction's conditional writes (`increment`, `put_if`) read from the
/// store, by (table, key); `None` for a missing row. Its commit applies only if every row still
/// holds what was read (optimistic concurrency: docs/design.md § Application tables).
pub type RowReads = std::collections::BTreeMap<(String, Vec<u8>), Option<Vec<u8>>>;

/// A counter's value as a row holds it: the integer in decimal ASCII (an optional `-`, then
/// digits), what every language writes with its own formatting (`str(n)`, `%lld`).
pub fn encode_counter(n: i64) -> Vec<u8> {
    n.to_string().into_bytes()
}

/// The counter in row `key` of `table` (`None`: no row, which counts as 0).
pub fn decode_counter(table: &str, key: &[u8], value: Option<&[u8]>) -> Result<i64> {
    let Some(v) = value else {
        return Ok(0);
    };
    let digits = v.strip_prefix(b"-").unwrap_or(v);
    let parsed = if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) {
        std::str::from_utf8(v)
            .ok()
            .and_then(|t| t.parse::<i64>().ok())
    } else {
        None
    };
    parsed.ok_or_else(|| {
        Error::invalid(format!(
            "row {} of table {table:?} holds {:?}, not a counter (a decimal integer from \
             {} to {}): increment needs one, or no row",
            key.escape_ascii(),
            v.get(..64).unwrap_or(v).escape_ascii().to_string(),
            i64::MIN,
            i64::MAX
        ))
    })
}

/// The counter in `value` plus `delta`: the new value and its encoding.
pub fn add_to_counter(
    table: &str,
    key: &[u8],
    value: Option<&[u8]>,
    delta: i64,
) -> Result<(i64, Vec<u8>)> {
    let old = decode_counter(table, key, value)?;
    let new = old.checked_add(delta).ok_or_else(|| {
        Error::invalid(format!(
            "row {} of table {table:?}: {old} + {delta} is outside the range of a counter",
            key.escape_ascii()
        ))
    })?;
    Ok((new, encode_counter(new)))
}

impl<'t> Batch<'t> {
    /// The value of row `key` of application table `table`.
    fn app_row(&mut self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let t = self.tables.app_rows()?;
        Ok(t.get((table, key))?.map(|g| g.value().to_vec()))
    }

    /// Adds `delta` to the counter in row `key` of `table` (a missing row counts as 0); returns
    /// the new value. Refused, writing nothing, when the row holds something else or the sum
    /// overflows.
    pub fn increment_row(&mut self, table: &str, key: &[u8], delta: i64) -> Result<i64> {
        let old = self.app_row(table, key)?;
        let (new, bytes) = add_to_counter(table, key, old.as_deref(), delta)?;
        let w = [(table.to_owned(), key.to_vec(), RowWrite::Put(bytes))];
        self.write_rows(&w)?;
        Ok(new)
    }

    /// Sets row `key` of `table` to `value` if it holds `expected` now (`None`: if it is
    /// missing); returns whether it did.
    pub fn put_row_if(
        &mut self,
        table: &str,
        key: &[u8],
        expected: Option<&[u8]>,
        value: &[u8],
    ) -> Result<bool> {
        if self.app_row(table, key)?.as_deref() != expected {
            return Ok(false);
        }
        let w = [(
            table.to_owned(),
            key.to_vec(),
            RowWrite::Put(value.to_vec()),
        )];
        self.write_rows(&w)?;
        Ok(true)
    }

    /// Checks that every row in `reads` still holds what the transaction read; the first that
    /// does not is a [`Error::Conflict`]. Reads only.
    pub fn check_rows(&mut self, reads: &RowReads) -> Result<()> {
        if reads.is_empty() {
            return Ok(());
        }
        let t = self.tables.app_rows()?;
        for ((table, key), read) in reads {
            let now = t.get((table.as_str(), key.as_slice()))?;
            if now.as_ref().map(|g| g.value()) != read.as_deref() {
                return Err(Error::Conflict {
                    table: table.clone(),
                    key: key.clone(),
                });
            }
        }
        Ok(())
    }

    /// Applies writes to application tables: `(table, key) → put or delete`.
    pub fn write_rows(&mut self, writes: &[(String, Vec<u8>, RowWrite)]) -> Result<()> {
        if writes.is_empty() {
            return Ok(());
        }
        let t = self.tables.app_rows()?;
        for (table, key, w) in writes {
            match w {
                RowWrite::Put(v) => {
                    t.insert((table.as_str(), key.as_slice()), v.as_slice())?;
                }
                RowWrite::Delete => {
                    t.remove((table.as_str(), key.as_slice()))?;
                }
            }
        }
        Ok(())
    }
}
