//! The test profile must not fail on proptest's own float ranges.
//!
//! proptest 1.12 samples `lo..hi` by splitting the range into ulp-sized intervals counted
//! from the end of larger magnitude; for `|lo| < |hi|` the last interval reaches below
//! `lo`. A value drawn there is clamped to `lo`, after a debug assertion that fails for
//! such ranges. The workspace's `Cargo.toml` turns proptest's debug assertions off, and
//! this test draws, from a fixed seed, a sequence that reaches that interval: with the
//! assertion on, it panics at about the 19,500th draw.

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

#[test]
fn float_range_below_low_end_is_clamped_not_a_panic() {
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&518u64.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let (lo, hi) = (0.2f32, 2.0f32);
    let mut at_lo = 0;
    for _ in 0..40_000 {
        let v = (lo..hi).new_tree(&mut runner).unwrap().current();
        assert!((lo..hi).contains(&v), "{v} outside {lo}..{hi}");
        at_lo += usize::from(v == lo);
    }
    // The clamped draw: `lo` itself, which lies between two of the points proptest
    // draws from (multiples of `2^-22` counted down from 2), so only the clamp returns it.
    assert!(
        at_lo >= 1,
        "the seed no longer reaches the interval below {lo}"
    );
}
