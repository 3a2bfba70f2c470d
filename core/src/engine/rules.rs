//! The one place that decides whether a message is spent: used by the write path (a message
//! returning to its queue), by peek and browse (which must show what a receive would take),
//! so the rule cannot drift between them.

use super::tables::State;
use crate::message::{REASON_MAX_DELIVERIES, REASON_TTL_EXPIRED};

/// Why a message may not be delivered again: it goes to the dead-letter queue instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spent {
    /// Delivered `max_deliveries` times without being completed.
    MaxDeliveries(u32),
    /// Its time to live ran out.
    Expired,
}

impl Spent {
    /// The dead-letter reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Spent::MaxDeliveries(_) => REASON_MAX_DELIVERIES,
            Spent::Expired => REASON_TTL_EXPIRED,
        }
    }

    /// The dead-letter description.
    pub fn description(&self) -> String {
        match self {
            Spent::MaxDeliveries(n) => format!("delivered {n} times without being completed"),
            Spent::Expired => "time to live expired".into(),
        }
    }
}

/// Whether message state `st` may go back to its queue at `now`, given the queue's current
/// `max_deliveries`.
pub fn spent(st: &State, max_deliveries: u32, now: u64) -> Option<Spent> {
    if st.delivery_count >= max_deliveries {
        Some(Spent::MaxDeliveries(st.delivery_count))
    } else if expired(st, now) {
        Some(Spent::Expired)
    } else {
        None
    }
}

/// Whether the message's time to live has run out at `now`.
pub fn expired(st: &State, now: u64) -> bool {
    st.expires_at != 0 && st.expires_at <= now
}
