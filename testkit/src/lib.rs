//! What postbox's tests and benchmarks share, so that every suite seeds, sizes and times its
//! runs the same way: a seeded generator whose seed is printed for replay ([`Rng`]), size knobs
//! read from the environment ([`knob`], [`stress`]), deterministic clocks, and stores in fresh
//! temporary directories ([`TestStore`]), and private RabbitMQ nodes and clusters for the bridge's
//! tests ([`broker`], Unix only: RabbitMQ's own scripts and the process groups it needs).
//!
//! Not published; test code only, so it panics on setup failures instead of returning errors,
//! except in [`broker`], where a broker that cannot run is the caller's to report or skip on.

#[cfg(unix)]
pub mod broker;
mod clocks;
mod knobs;
mod rng;
mod stores;

pub use clocks::{FixedClock, SEC, ms};
pub use knobs::{env_u64, knob, seed_from_env, stress};
pub use rng::Rng;
pub use stores::{TestStore, counts, fast_tempdir, open_fast, open_with};
