//! `TokenMask::apply` (word fast paths) agrees with a bit-by-bit reference on any mask,
//! including lengths that are not a multiple of 32.

use logits::TokenMask;
use proptest::prelude::*;

fn reference(mask: &TokenMask, logits: &mut [f32]) {
    for (i, l) in logits.iter_mut().enumerate() {
        if !mask.is_allowed(i as u32) {
            *l = f32::NEG_INFINITY;
        }
    }
}

proptest! {
    #[test]
    fn apply_matches_reference(
        len in 1usize..700,
        // Word patterns biased towards the fast paths: all zeros, all ones, dense, sparse.
        pattern in prop::collection::vec(
            prop_oneof![Just(0u32), Just(u32::MAX), any::<u32>(), any::<u32>().prop_map(|w| w | 0xFFFF_FF0F)],
            22,
        ),
    ) {
        let mut mask = TokenMask::new_empty(len);
        for (w, p) in mask.words_mut().iter_mut().zip(&pattern) {
            *w = *p;
        }
        mask.clear_tail();
        let base: Vec<f32> = (0..len).map(|i| i as f32 * 0.5 - 3.0).collect();
        let mut fast = base.clone();
        let mut slow = base;
        mask.apply(&mut fast).unwrap();
        reference(&mask, &mut slow);
        prop_assert_eq!(
            fast.iter().map(|f| f.to_bits()).collect::<Vec<_>>(),
            slow.iter().map(|f| f.to_bits()).collect::<Vec<_>>()
        );
    }
}

#[test]
fn apply_rejects_wrong_length() {
    let mask = TokenMask::new_full(40);
    assert!(mask.apply(&mut [0.0; 39]).is_err());
}
