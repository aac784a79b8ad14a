//! The draw: inverse CDF over the survivors in their documented order, one uniform.
//!
//! The decision is exact: the token is the first whose exact running sum of the `f64`
//! weights exceeds `u` times their exact total, whatever order any sum is taken in. The
//! `f64` running sum decides when a rigorous bound on its rounding error shows that exact
//! arithmetic decides the same; otherwise (rarely: the target within about `n * 2^-52`
//! of the total from a boundary) the [`exact_sum`](crate::kernels::exact_sum) accumulator
//! decides.

use crate::kernels::exact_sum;

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
    let target = u * total;
    let m = margin(weights.len(), total);
    let mut cum = 0.0;
    for (i, &w) in weights.iter().enumerate() {
        let prev = cum;
        cum += w;
        if cum > target {
            if w > 0.0 && target - prev > m && cum - target > m {
                return i;
            }
            break;
        }
    }
    exact(weights, u)
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
