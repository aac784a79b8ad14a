//! The top-p (nucleus) prefix: where the cumulative weight of candidates in draw order
//! first reaches a target. The decision is exact: the fast `f64` sums stand when a
//! rigorous bound on their rounding proves it, and exact sums
//! ([`exact_sum`](super::exact_sum)) decide otherwise. The `TopP` stage and the engine's
//! first cut group both cut there.

use super::exact_sum;

/// A rigorous bound on the rounding of `f64` running sums of `n` non-negative terms
/// summing to at most `sum`, taken twice (a running sum and a total), and of `p` times
/// that total: `(4n + 8) * 2^-53 * sum` covers `2 * gamma_(n-1) * sum + 2^-53 * sum` for
/// any `n` below `2^40`, with an absolute term for an underflowing product.
#[inline]
fn rounding_bound(n: usize, sum: f64) -> f64 {
    (n as f64 + 2.0) * f64::EPSILON * sum + f64::MIN_POSITIVE
}

/// Length of the top-p prefix of `weights` (sorted, descending; finite, non-negative),
/// `total` being their `f64` sum (in any order).
///
/// The prefix is the shortest whose exact running sum `C` has `C >= p * T` exactly, `T`
/// being the exact total of `weights` and `p` the decimal the `f32` was written as
/// ([`as_decimal`](crate::as_decimal)). The `f64` running sum decides when the target
/// lies further than the rounding bound from both neighbouring sums; otherwise exact sums
/// do. `None` only when `weights` is empty.
pub(crate) fn prefix_len(weights: &[f64], p: f64, total: f64) -> Option<usize> {
    let target = p * total;
    let m = rounding_bound(weights.len(), total);
    let mut cum = 0.0;
    for (i, &w) in weights.iter().enumerate() {
        let prev = cum;
        cum += w;
        if cum >= target {
            if target - prev > m && cum - target > m {
                return Some(i + 1);
            }
            break;
        }
    }
    exact_sum::exact_prefix(weights.iter().copied(), p)
}

/// Where a cumulative weight crosses a top-p target (see [`crossing`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Crossing {
    /// The prefix of this length is the first to reach the target.
    At(usize),
    /// The weights given do not reach the target.
    Short,
    /// A cumulative sum next to the crossing lies within the error margin of the target:
    /// the decision needs exact sums.
    Undecided,
}

/// The first prefix of `weights` (sorted, descending) at which the cumulative weight,
/// starting from `start` (the weight of the candidates before them), reaches `target`,
/// computed in `f64`.
///
/// `margin` bounds the error of `start` and `target` (from fast weights and totals); the
/// rounding of the running sum here is added to it. A crossing where the target lies
/// within that of either neighbouring cumulative sum is [`Crossing::Undecided`]: the
/// caller decides it exactly. (A [`Short`](Crossing::Short) that exact sums would not
/// give leaves the next weight's crossing undecided.)
pub(crate) fn crossing(weights: &[f64], start: f64, target: f64, margin: f64) -> Crossing {
    let mut c = start;
    for (i, &w) in weights.iter().enumerate() {
        let prev = c;
        c += w;
        if c >= target {
            let m = margin + rounding_bound(i + 1, c);
            return if target - prev <= m || c - target <= m {
                Crossing::Undecided
            } else {
                Crossing::At(i + 1)
            };
        }
    }
    Crossing::Short
}
