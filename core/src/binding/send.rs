//! Flat send options, as a C struct or Python keywords give them: exclusive pairs and ranges
//! are checked here, once, before the builder sees them.

use std::time::{Duration, SystemTime};

use crate::message::Message;

/// The scheduling fields of a send given flat (each optional), to be validated together.
#[derive(Debug, Default, Clone, Copy)]
pub struct FlatSend {
    /// Priority as the caller gave it (any integer; 0 to 7 is valid).
    pub priority: Option<i128>,
    /// Receivable after this long.
    pub delay: Option<Duration>,
    /// Receivable from this instant (exclusive with `delay`).
    pub visible_at: Option<SystemTime>,
    /// Expires after this long.
    pub ttl: Option<Duration>,
    /// Expires at this instant (exclusive with `ttl`).
    pub expires_at: Option<SystemTime>,
}

/// Why flat send options were refused. Bindings name the fields in their own spelling
/// (`options.delay_ms` in C, `delay` in Python).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlatSendError {
    /// A priority outside 0 to 7.
    Priority(i128),
    /// Both `delay` and `visible_at` were given.
    DelayAndVisibleAt,
    /// Both `ttl` and `expires_at` were given.
    TtlAndExpiresAt,
}

impl FlatSend {
    /// Applies the fields to `m`.
    ///
    /// # Errors
    ///
    /// [`FlatSendError`] for a priority out of range or an exclusive pair given together;
    /// `m` is consumed either way.
    pub fn apply(self, mut m: Message) -> Result<Message, FlatSendError> {
        if let Some(p) = self.priority {
            let p = u8::try_from(p)
                .ok()
                .filter(|p| *p <= crate::message::MAX_PRIORITY)
                .ok_or(FlatSendError::Priority(p))?;
            m = m.priority(p);
        }
        m = match (self.delay, self.visible_at) {
            (Some(_), Some(_)) => return Err(FlatSendError::DelayAndVisibleAt),
            (Some(d), None) => m.delay(d),
            (None, Some(at)) => m.visible_at(at),
            (None, None) => m,
        };
        m = match (self.ttl, self.expires_at) {
            (Some(_), Some(_)) => return Err(FlatSendError::TtlAndExpiresAt),
            (Some(t), None) => m.ttl(t),
            (None, Some(at)) => m.expires_at(at),
            (None, None) => m,
        };
        Ok(m)
    }
}
