//! The tables a batch has opened: one slot per table of `tables::table_list`, generated from
//! that list so that a new table needs no field, no constructor line and no accessor here.
//!
//! Tables are opened on first use: opening one costs a lookup and a type check in redb, and
//! most operations touch only a few of them. A table stays open for the rest of the batch
//! (redb refuses to open one twice in a transaction), so the batch opens every table here.

use crate::engine::logged::{Logged, LoggedTxn};
// The definitions and types the list names, whatever they are.
use crate::engine::tables::*;
use crate::error::{Error, Result};

macro_rules! slots {
    ($($(#[$doc:meta])* $id:literal $def:ident $slot:ident = $name:literal: $k:ty => $v:ty;)*) => {
        /// The batch's transaction and every table it has opened in it.
        pub struct Slots<'t> {
            txn: LoggedTxn<'t>,
            $($slot: Option<Logged<'t, $k, $v>>,)*
        }

        impl<'t> Slots<'t> {
            /// No table open yet.
            pub fn new(txn: LoggedTxn<'t>) -> Slots<'t> {
                Slots {
                    txn,
                    $($slot: None,)*
                }
            }
        }

        // Not every table is opened by a batch (`META` is written when a store is opened or
        // upgraded), so some accessors go unused.
        #[allow(dead_code)]
        impl<'t> Slots<'t> {
            $(
                $(#[$doc])*
                pub fn $slot(&mut self) -> Result<&mut Logged<'t, $k, $v>> {
                    lazy(self.txn, &mut self.$slot, $def)
                }
            )*
        }
    };
}

table_list!(slots);

impl Slots<'_> {
    /// Rows put or removed in the batch's transaction so far.
    pub fn writes(&self) -> u64 {
        self.txn.changes.writes()
    }
}

fn lazy<'a, 't, K: redb::Key + 'static, V: redb::Value + 'static>(
    txn: LoggedTxn<'t>,
    slot: &'a mut Option<Logged<'t, K, V>>,
    def: redb::TableDefinition<K, V>,
) -> Result<&'a mut Logged<'t, K, V>> {
    if slot.is_none() {
        *slot = Some(txn.open(def)?);
    }
    slot.as_mut()
        .ok_or_else(|| Error::corrupted("table could not be opened"))
}
