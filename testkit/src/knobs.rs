//! Size knobs: CI runs the short version of a suite, a developer sets a variable for the long.

use std::time::{SystemTime, UNIX_EPOCH};

/// A `u64` from the environment variable `name` (`_` separators allowed: `1_000_000`), or
/// `default` when unset or unparsable.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().replace('_', "").parse().ok())
        .unwrap_or(default)
}

/// A count from the environment variable `name`, or `default`.
pub fn knob(name: &str, default: usize) -> usize {
    usize::try_from(env_u64(name, default as u64)).unwrap_or(usize::MAX)
}

/// The multiplier of the stress runs: `POSTBOX_STRESS` (default 1, at least 1).
pub fn stress() -> u64 {
    env_u64("POSTBOX_STRESS", 1).max(1)
}

/// A seed from the variable `name` if set, otherwise from the clock (the caller prints it).
pub fn seed_from_env(name: &str) -> u64 {
    let from_clock = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    env_u64(name, from_clock)
}
