//! A small deterministic generator: no dependency, and a printed seed replays a failing run.

use crate::knobs::seed_from_env;

/// xorshift64*: deterministic and seedable.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is taken as 1).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// A generator seeded from `POSTBOX_SEED`, or from the clock; the seed is printed with the
    /// test's name so that a failure can be replayed.
    pub fn from_env(test: &str) -> Rng {
        let seed = seed_from_env("POSTBOX_SEED");
        eprintln!("{test}: POSTBOX_SEED={seed}");
        Rng::new(seed)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.next_u64() as u8;
        }
    }
}
