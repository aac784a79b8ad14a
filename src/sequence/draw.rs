//! The draw: inverse CDF over the survivors in their documented order, one uniform.
//!
//! The decision is exact: the token is the first whose exact running sum of the `f64`
//! weights exceeds `u` times their exact total, whatever order any sum is taken in. The
//! `f64` running sum decides when a rigorous bound on its rounding error shows that exact
//! arithmetic decides the same; otherwise (rarely: the target within about `n * 2^-52`
//! of the total from a boundary) the [`exact_sum`](crate::kernels::exact_sum) accumulator
//! decides.

use crate::kernels::exact_sum;
use crate::TokenId;

/// Sets this small are sorted and walked rather than partitioned further.
const WALK_LEN: usize = 32;

/// Partition rounds before the rest is sorted outright, which bounds the work on rows
/// built to defeat the pivots: `2 log2(n)` rounds of a fair pivot would end any
/// vocabulary [`MAX_VOCAB_SIZE`](crate::MAX_VOCAB_SIZE) allows.
const ROUNDS: usize = 64;

/// Bound on the rounding of `n`-term `f64` sums of non-negative weights, in any order,
/// and of the product `u * total`, relative to `total` (itself any such sum): a decision
/// of the `f64` walk that keeps this far from both neighbouring running sums is the
/// exact one. (A recursive sum of `n` non-negative terms is within
/// `gamma_(n-1) = (n-1) u / (1 - (n-1) u)` of its exact value, `u = 2^-53`; two such sums
/// and one product stay below `(2n + 1) u`, which this bound doubles.)
#[inline]
pub(crate) fn margin(n: usize, total: f64) -> f64 {
    (n as f64 + 2.0) * 2.0 * f64::EPSILON * total
}

/// Index of the first weight whose exact running sum exceeds `u` times the exact sum of
/// `weights`, with `u` in `[0, 1)` and `total` an `f64` sum of `weights` (in any order).
/// A zero weight is never chosen.
pub(crate) fn inverse_cdf(weights: &[f64], total: f64, u: f64) -> usize {
    let m = margin(weights.len(), total);
    let entries = weights.iter().copied().enumerate();
    walk(entries, 0.0, u * total, m).unwrap_or_else(|| exact(weights, u))
}

/// [`inverse_cdf`] over candidates that are not in draw order, without sorting them: the
/// index `i` (into `ids`, `logits` and `weights`, which run in parallel) of the token
/// that `inverse_cdf` picks once they are sorted by logit descending, ties to the lower
/// id. `weights` are the candidates' weights, non-increasing in the logit (equal for
/// equal logits), and `total` an `f64` sum of them in any order. `idx` is scratch.
///
/// A selection: each round splits the set at a pivot logit into the tokens above it,
/// those at it and those below, and sums the weights above; the target lies in one
/// part. Every sum compared is an `f64` sum of the tokens ranked before some point, in
/// some order, so [`margin`] bounds its error as it bounds the walk's. `None` when a
/// comparison falls within the margin (rarely: as often as the walk's own fallback):
/// the caller then sorts the candidates and takes [`inverse_cdf`]'s decision.
pub(crate) fn inverse_cdf_unsorted(
    ids: &[TokenId],
    logits: &[f32],
    weights: &[f64],
    total: f64,
    u: f64,
    idx: &mut Vec<u32>,
) -> Option<usize> {
    let target = u * total;
    let m = margin(weights.len(), total);
    let rank = |&a: &u32, &b: &u32| {
        let (a, b) = (a as usize, b as usize);
        crate::kernels::order::order(&(logits[a], ids[a]), &(logits[b], ids[b]))
    };
    idx.clear();
    idx.extend((0..weights.len() as u32).filter(|&i| weights[i as usize] > 0.0));
    let mut set = &mut idx[..];
    // The sum of the weights ranked before `set`, and the rounds so far.
    let mut before = 0.0;
    let mut rounds = 0;
    loop {
        if set.len() <= WALK_LEN || rounds == ROUNDS {
            set.sort_unstable_by(rank);
            return walk(weighed(set, weights), before, target, m);
        }
        rounds += 1;
        let pivot = median3(set, logits);
        let (above, at) = partition3(set, logits, pivot);
        let (high, rest) = set.split_at_mut(above);
        let (tied, low) = rest.split_at_mut(at);
        // (`tied` holds the pivot's own entry, so it is never empty.)
        let through = before + high.iter().map(|&i| weights[i as usize]).sum::<f64>();
        if !high.is_empty() {
            if through > target + m {
                set = high;
                continue;
            }
            if through >= target - m {
                return None;
            }
        }
        before = through;
        let through = before + tied.iter().map(|&i| weights[i as usize]).sum::<f64>();
        if through > target + m {
            // Tied tokens are drawn in id order.
            tied.sort_unstable_by_key(|&i| ids[i as usize]);
            return walk(weighed(tied, weights), before, target, m);
        }
        if through >= target - m || low.is_empty() {
            return None;
        }
        before = through;
        set = low;
    }
}

/// The fast walk of [`inverse_cdf`] over `entries` (index, weight) in draw order, from
/// the running sum `before`: the first whose running sum passes `target`, when it has
/// a weight and both neighbouring sums lie more than `m` from the target; `None` when
/// they do not, or when no running sum passes it.
fn walk(
    entries: impl Iterator<Item = (usize, f64)>,
    before: f64,
    target: f64,
    m: f64,
) -> Option<usize> {
    let mut cum = before;
    for (i, w) in entries {
        let prev = cum;
        cum += w;
        if cum > target {
            return (w > 0.0 && target - prev > m && cum - target > m).then_some(i);
        }
    }
    None
}

/// The entries of `set` with their weights, for [`walk`].
fn weighed<'a>(set: &'a [u32], weights: &'a [f64]) -> impl Iterator<Item = (usize, f64)> + 'a {
    set.iter().map(|&i| (i as usize, weights[i as usize]))
}

/// The median of the logits at the first, middle and last entries of `set`.
fn median3(set: &[u32], logits: &[f32]) -> f32 {
    let at = |k: usize| logits[set[k] as usize];
    let (a, b, c) = (at(0), at(set.len() / 2), at(set.len() - 1));
    a.max(b).min(a.min(b).max(c))
}

/// Reorders `set` into the entries whose logit is above `pivot`, then those equal to it,
/// then those below, and returns the first two parts' lengths. (No logit is NaN.)
fn partition3(set: &mut [u32], logits: &[f32], pivot: f32) -> (usize, usize) {
    let (mut lo, mut mid, mut hi) = (0, 0, set.len());
    while mid < hi {
        let l = logits[set[mid] as usize];
        if l > pivot {
            set.swap(lo, mid);
            lo += 1;
            mid += 1;
        } else if l < pivot {
            hi -= 1;
            set.swap(mid, hi);
        } else {
            mid += 1;
        }
    }
    (lo, mid - lo)
}

/// The exact decision of [`inverse_cdf`], without the fast walk.
pub(crate) fn exact(weights: &[f64], u: f64) -> usize {
    exact_sum::exact_index(weights.iter().copied(), u)
        .unwrap_or_else(|| weights.iter().rposition(|&w| w > 0.0).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The fast walk never decides against the exact sums, for weights of any
        /// magnitude (zeros, subnormals, ties) and uniforms next to each boundary, with
        /// the total summed in order or in reverse.
        #[test]
        fn fast_walk_is_exact(
            exps in prop::collection::vec(prop_oneof![
                (-60i32..1).prop_map(|e| f64::from(e).exp()),
                Just(0.0),
                Just(f64::from_bits(3)),
                (0.0f64..1.0),
            ], 1..80),
            k in -3i64..=3,
            pick in any::<prop::sample::Index>(),
            reverse in any::<bool>(),
        ) {
            let ws = exps;
            let total: f64 = if reverse { ws.iter().rev().sum() } else { ws.iter().sum() };
            prop_assume!(total > 0.0);
            let b = pick.index(ws.len());
            let cum: f64 = ws[..=b].iter().sum();
            let u0 = (cum / total).min(1.0 - f64::EPSILON / 2.0);
            let u = f64::from_bits((u0.to_bits() as i64 + k).max(0) as u64)
                .min(1.0 - f64::EPSILON / 2.0);
            let i = inverse_cdf(&ws, total, u);
            prop_assert_eq!(i, exact(&ws, u));
            prop_assert!(ws[i] > 0.0);
        }
    }

    /// The sorted walk's pick, as an index into the unsorted candidates.
    fn sorted_pick(ids: &[TokenId], logits: &[f32], t: f64, u: f64) -> usize {
        let mut by_rank: Vec<usize> = (0..ids.len()).collect();
        by_rank.sort_by(|&a, &b| {
            crate::kernels::order::order(&(logits[a], ids[a]), &(logits[b], ids[b]))
        });
        let max = f64::from(logits[by_rank[0]]);
        let ws: Vec<f64> = (by_rank.iter())
            .map(|&i| ((f64::from(logits[i]) - max) / t).exp())
            .collect();
        by_rank[inverse_cdf(&ws, ws.iter().sum(), u)]
    }

    /// The candidates' weights in their own order, and their total.
    fn weights_of(logits: &[f32], t: f64) -> (Vec<f64>, f64) {
        let max = f64::from(logits.iter().copied().fold(f32::NEG_INFINITY, f32::max));
        let ws: Vec<f64> = (logits.iter())
            .map(|&l| ((f64::from(l) - max) / t).exp())
            .collect();
        let total = ws.iter().sum();
        (ws, total)
    }

    proptest! {
        /// Without sorting, the selection picks the sorted walk's token, for sets in any
        /// order with ties (`-0.0` and `0.0` among them), `-inf` and weights that
        /// underflow, and uniforms spread over the range and next to each boundary.
        #[test]
        fn the_selection_picks_the_sorted_walks_token(
            logits in prop::collection::vec(prop_oneof![
                4 => -30.0f32..30.0,
                2 => (-4i32..4).prop_map(|k| k as f32 * 0.5),
                1 => Just(-0.0f32),
                1 => Just(f32::NEG_INFINITY),
                1 => Just(-1e30f32),
            ], 1..400),
            t in prop_oneof![Just(1.0f64), 0.05f64..4.0],
            u in 0.0f64..1.0,
            at_boundary in any::<Option<(prop::sample::Index, i64)>>(),
            id_shuffle in any::<u64>(),
        ) {
            prop_assume!(logits.iter().any(|&l| l > f32::NEG_INFINITY));
            // Ids in an order of their own, so that ties are not in index order.
            let n = logits.len() as u64;
            let ids: Vec<TokenId> = (0..n)
                .map(|i| ((i * (2 * (id_shuffle % n) + 1)) % (2 * n + 1)) as TokenId)
                .collect();
            let mut seen = ids.clone();
            seen.sort_unstable();
            seen.dedup();
            prop_assume!(seen.len() == ids.len());
            let (ws, total) = weights_of(&logits, t);
            let u = match at_boundary {
                None => u,
                Some((pick, k)) => {
                    // A uniform a few ulps from where the running sum passes a token.
                    let mut sorted: Vec<f64> = ws.clone();
                    sorted.sort_by(|a, b| b.total_cmp(a));
                    let b = pick.index(sorted.len());
                    let cum: f64 = sorted[..=b].iter().sum();
                    let u0 = (cum / total).min(1.0 - f64::EPSILON / 2.0);
                    f64::from_bits((u0.to_bits() as i64 + k % 4).max(0) as u64)
                        .min(1.0 - f64::EPSILON / 2.0)
                }
            };
            let mut idx = Vec::new();
            let want = sorted_pick(&ids, &logits, t, u);
            if let Some(i) = inverse_cdf_unsorted(&ids, &logits, &ws, total, u, &mut idx) {
                prop_assert_eq!(i, want);
            } else {
                // Only within the margin of a boundary.
                prop_assert!(at_boundary.is_some() || u * total < margin(ws.len(), total));
            }
        }
    }

    /// A row of a vocabulary's size, uniform weights and one long run of ties: the
    /// selection decides every draw, as the sorted walk does.
    #[test]
    fn the_selection_decides_large_and_tied_sets() {
        let n = 151_936usize;
        let rows: [Vec<f32>; 3] = [
            (0..n).map(|i| ((i * 7919) % 1000) as f32 * 0.01).collect(),
            vec![0.5; n],
            (0..n)
                .map(|i| {
                    if i % 3 == 0 {
                        1.0
                    } else {
                        (i % 97) as f32 * -0.1
                    }
                })
                .collect(),
        ];
        let ids: Vec<TokenId> = (0..n as TokenId).rev().collect();
        let mut idx = Vec::new();
        for logits in &rows {
            let (ws, total) = weights_of(logits, 0.8);
            for k in 1..40 {
                let u = f64::from(k) / 40.0 - 1e-3;
                let i = inverse_cdf_unsorted(&ids, logits, &ws, total, u, &mut idx);
                assert_eq!(i, Some(sorted_pick(&ids, logits, 0.8, u)), "u {u}");
            }
        }
    }

    #[test]
    fn fast_and_exact_agree_next_to_every_boundary() {
        let ws = [
            1.0,
            (-20f64).exp(),
            (-20f64).exp(),
            (-40f64).exp(),
            0.0,
            0.25,
        ];
        let total: f64 = ws.iter().sum();
        let mut exact_total = exact_sum::ExactSum::new();
        ws.iter().for_each(|&w| exact_total.add(w));
        let mut c = 0.0;
        for &w in &ws {
            c += w;
            let b = c / total;
            let mut u = b;
            for _ in 0..3 {
                u = u.next_down();
            }
            for _ in 0..7 {
                if (0.0..1.0).contains(&u) {
                    assert_eq!(inverse_cdf(&ws, total, u), exact(&ws, u), "u {u}");
                }
                u = u.next_up();
            }
        }
        let top = 1.0 - f64::EPSILON / 2.0;
        assert_eq!(inverse_cdf(&ws, total, top), 5);
        assert_eq!(inverse_cdf(&ws[..4], ws[..4].iter().sum(), top), 2);
        assert_eq!(inverse_cdf(&ws, total, 0.0), 0);
    }
}
