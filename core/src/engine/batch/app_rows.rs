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

impl<'t> Batch<'t> {
    /// Applies writes to application tables: `(table, key) → put or delete`.
    pub fn write_rows(&mut self, writes: &[(String, Vec<u8>, RowWrite)]) -> Result<()> {
        if writes.is_empty() {
            return Ok(());
        }
        self.mutations += 1;
        let mut t = self.txn.open(APP_ROWS)?;
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
