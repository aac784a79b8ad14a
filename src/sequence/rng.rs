//! The draw's random numbers: one uniform in `[0, 1)` per (seed, step), from ChaCha.

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// Domain separation for the key, so that `logits` draws never coincide with another use
/// of ChaCha20 keyed by the same `u64`.
const DOMAIN: &[u8; 24] = b"logits/draw/v1\0\0\0\0\0\0\0\0\0\0";

/// Counter-based source of the draws' uniforms.
///
/// The uniform of draw `step` under `seed` is computed from the ChaCha20 block stream
/// keyed by `seed.to_le_bytes() ++ "logits/draw/v1" (zero padded to 24 bytes)`, stream 0,
/// at word position `16 * step` (the first two words of block `step`, little-endian, as
/// one `u64`). It depends on nothing else: not on earlier draws, on other sequences in a
/// batch, on threads or on the platform. ChaCha20 is a fixed algorithm, and the
/// `u64 -> [0, 1)` conversion below is this crate's own, so no dependency release can
/// change a sampled token.
#[derive(Clone, Debug)]
pub struct DrawRng {
    rng: ChaCha20Rng,
}

impl DrawRng {
    /// The draw source for `seed`.
    pub fn new(seed: u64) -> Self {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        key[8..].copy_from_slice(DOMAIN);
        DrawRng {
            rng: ChaCha20Rng::from_seed(key),
        }
    }

    /// The seed of fork `i` of a sequence seeded with `seed`, as
    /// [`Sampler::fork`](crate::Sampler::fork) and [`Chain::fork`](crate::Chain::fork)
    /// derive it: `seed` itself for `i == 0`, so that sample 0 of `n` draws what the
    /// un-forked sequence draws whatever `n`; for `i > 0` the SplitMix64 finaliser of
    /// `seed + i * 0x9E37_79B9_7F4A_7C15` (wrapping):
    ///
    /// ```text
    /// z = seed + i * 0x9E3779B97F4A7C15
    /// z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
    /// z = (z ^ (z >> 27)) * 0x94D049BB133111EB
    /// z ^ (z >> 31)
    /// ```
    ///
    /// A fixed function of this crate (no dependency's RNG), so forks reproduce across
    /// releases and platforms. The finaliser is a bijection of `u64`, so the forks
    /// `1..` of one seed never share a seed with each other.
    ///
    /// # Example
    /// ```
    /// use logits::DrawRng;
    ///
    /// assert_eq!(DrawRng::fork_seed(42, 0), 42);
    /// assert_ne!(DrawRng::fork_seed(42, 1), DrawRng::fork_seed(42, 2));
    /// ```
    pub fn fork_seed(seed: u64, i: u64) -> u64 {
        if i == 0 {
            return seed;
        }
        let mut z = seed.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The source for `seed` on ChaCha stream `stream` (the draw itself uses stream 0).
    pub fn with_stream(seed: u64, stream: u64) -> Self {
        let mut r = Self::new(seed);
        r.rng.set_stream(stream);
        r
    }

    /// The raw 64-bit word of draw `step`.
    pub fn word(&mut self, step: u64) -> u64 {
        self.rng.set_word_pos(u128::from(step) * 16);
        self.rng.next_u64()
    }

    /// The uniform of draw `step`, in `[0, 1)`.
    pub fn uniform(&mut self, step: u64) -> f64 {
        u64_to_unit(self.word(step))
    }

    /// Positions the source at draw `step`, for [`next_uniform`](Self::next_uniform).
    pub(crate) fn seek(&mut self, step: u64) {
        self.rng.set_word_pos(u128::from(step) * 16);
    }

    /// The uniform of the draw the source is positioned at, and moves to the next: after
    /// `seek(s)`, call `j` returns `uniform(s + j)`. ChaCha computes four blocks at a
    /// time; [`uniform`](Self::uniform) computes them for each draw, while consecutive
    /// calls here read the blocks of one computation (the rest of a block is skipped).
    pub(crate) fn next_uniform(&mut self) -> f64 {
        let w = self.rng.next_u64();
        for _ in 0..7 {
            self.rng.next_u64();
        }
        u64_to_unit(w)
    }
}

/// `u64 -> [0, 1)`: the top 53 bits, scaled by `2^-53`. Every result is a multiple of
/// `2^-53`; `0` is possible, `1` is not.
#[inline]
pub fn u64_to_unit(x: u64) -> f64 {
    (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_conversion_bounds() {
        assert_eq!(u64_to_unit(0), 0.0);
        assert!(u64_to_unit(u64::MAX) < 1.0);
        assert_eq!(u64_to_unit(1 << 63), 0.5);
    }

    #[test]
    fn fork_seed_is_splitmix64() {
        // SplitMix64's first output for state 0 (its published test value).
        assert_eq!(DrawRng::fork_seed(0, 1), 0xE220_A839_7B1D_CDAF);
        assert_eq!(DrawRng::fork_seed(7, 0), 7);
    }

    #[test]
    fn draws_are_counter_based() {
        let mut a = DrawRng::new(7);
        let forward: Vec<u64> = (0..10).map(|s| a.word(s)).collect();
        let mut b = DrawRng::new(7);
        let backward: Vec<u64> = (0..10).rev().map(|s| b.word(s)).collect();
        let mut backward = backward;
        backward.reverse();
        assert_eq!(forward, backward);
        let mut c = DrawRng::new(8);
        assert_ne!(forward[0], c.word(0));
        assert_ne!(forward[0], forward[1]);
    }
}
