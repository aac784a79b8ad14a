//! Typical-p's sums are order-free: the total, the entropy and the running weight are
//! summed exactly, so the same candidates in another order keep the same tokens, and the
//! stage equals `logits::reference` bit for bit (the same kept set, even when distances
//! are one ulp apart).

use logits::reference::{self, Step};
use logits::{Candidates, Chain, History, Stage, StageContext, TokenId, TokenMask, TypicalP};
use proptest::prelude::*;

/// The stage alone on `row` (restricted to `allowed`), with the candidates in row order
/// or in draw order; the kept ids, ascending.
fn kept(row: &[f32], allowed: &[TokenId], stage: &TypicalP, sorted: bool) -> Vec<TokenId> {
    let mut c = Candidates::new();
    c.reset_from(row.iter().copied());
    c.retain(|id, l| allowed.contains(&id) && l > f32::NEG_INFINITY);
    if sorted {
        c.sort();
    }
    let ctx = StageContext {
        history: History::new(&[], 0),
        seed: 0,
        step: 0,
    };
    stage.clone().apply(&mut c, &ctx).unwrap();
    let mut ids = c.ids().to_vec();
    ids.sort_unstable();
    ids
}

/// The reference's kept ids, ascending.
fn reference_kept(row: &[f32], allowed: &[TokenId], p: f32, min_keep: usize) -> Vec<TokenId> {
    let mut mask = TokenMask::new_empty(row.len());
    for &id in allowed {
        mask.allow(id).unwrap();
    }
    let steps = [Step::Typical { p, min_keep }];
    let history = History::new(&[], 0);
    let dist = reference::chain_survivors(row, row.len(), &history, Some(&mask), &steps);
    let mut ids: Vec<TokenId> = dist.unwrap().iter().map(|x| x.0).collect();
    ids.sort_unstable();
    ids
}

/// The fuzz finding `typical-near-tied-distances` (fuzz/seeds/chain/): logits `0`,
/// `-4.2e-29` and `3.9e-16` scale to weights one `f64` ulp apart, so their distances
/// tied under one summation order of the total and the entropy and not under another;
/// the stage (row order) and the reference (draw order) kept different tokens.
#[test]
fn near_tied_distances_keep_the_same_tokens_in_any_order() {
    let row = [
        0.0f32,
        3.5,
        -5.25,
        -4.2071997e-29,
        -1e38,
        2.805021e-12,
        4.0,
        0.0,
        7.25,
        -1e38,
        3.9220643e-16,
        -1e38,
    ];
    // The seed's mask: words [3661] over 12 tokens.
    let allowed: Vec<TokenId> = (0..12).filter(|i| 3661u32 >> i & 1 == 1).collect();
    let (p, min_keep) = (0.868_635_06f32, 3);
    let stage = TypicalP::new(p).unwrap().min_keep(min_keep);
    let in_row_order = kept(&row, &allowed, &stage, false);
    let in_draw_order = kept(&row, &allowed, &stage, true);
    let want = reference_kept(&row, &allowed, p, min_keep);
    assert_eq!(in_row_order, in_draw_order);
    assert_eq!(in_row_order, want);

    // Through a chain, in draw order with the reference's probabilities.
    let mut mask = TokenMask::new_empty(12);
    for &id in &allowed {
        mask.allow(id).unwrap();
    }
    let mut chain = Chain::builder(12).stage(stage).draw().build().unwrap();
    let mut got = Vec::new();
    chain.distribution(&row, Some(&mask), &mut got).unwrap();
    let steps = [Step::Typical { p, min_keep }];
    let history = History::new(&[], 0);
    let want = reference::chain_survivors(&row, 12, &history, Some(&mask), &steps).unwrap();
    let ids = |d: &[(TokenId, f64)]| d.iter().map(|x| x.0).collect::<Vec<_>>();
    assert_eq!(ids(&got), ids(&want));
    for (g, w) in got.iter().zip(&want) {
        assert!((g.1 - w.1).abs() <= 1e-12 * w.1, "{got:?} / {want:?}");
    }
}

/// Logits from a small set of near-equal values (tiny offsets of a few levels), so that
/// weights and distances land within ulps of each other; up to 1,000 entries, so that
/// one distance bucket can hold more than the 64 keys sorted directly.
fn near_tied_row() -> impl Strategy<Value = Vec<f32>> {
    let level = prop_oneof![Just(0.0f32), Just(-1.0), Just(-2.5), Just(3.0)];
    let offset = prop_oneof![
        Just(0.0f32),
        (-1e-6f32..1e-6),
        (-1e-15f32..1e-15),
        (-1e-28f32..1e-28),
    ];
    prop::collection::vec((level, offset).prop_map(|(l, o)| l + o), 2..1000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The same candidates in row order and in draw order keep the same tokens, and
    /// those of the reference.
    #[test]
    fn kept_sets_do_not_depend_on_order(
        row in near_tied_row(),
        p in 0.05f32..1.0,
        min_keep in 1usize..4,
        drop in prop::collection::vec(any::<bool>(), 1000),
    ) {
        let allowed: Vec<TokenId> = (0..row.len() as TokenId)
            .filter(|&i| i == 0 || !drop[i as usize])
            .collect();
        let stage = TypicalP::new(p).unwrap().min_keep(min_keep);
        let a = kept(&row, &allowed, &stage, false);
        let b = kept(&row, &allowed, &stage, true);
        prop_assert_eq!(&a, &b);
        prop_assert_eq!(a, reference_kept(&row, &allowed, p, min_keep));
    }
}
