//! Helpers of the cache's integration tests (each test binary declares
//! `mod common;` and uses what it needs).

#![allow(dead_code)]

pub mod format;

/// xorshift64*: deterministic random numbers for the tests' choice of
/// blocks and operations (the sequence `bench oltp`'s generator draws from
/// the same seed).
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        ((x.wrapping_mul(0x2545_F491_4F6C_DD1D) as u128 * n as u128) >> 64) as u64
    }
}
