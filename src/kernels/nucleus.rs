//! The top-p (nucleus) prefix: where the cumulative weight of candidates in draw order
//! first reaches a target, exactly or with an error margin. The `TopP` stage and the
//! engine's first cut group both cut there.

/// Length of the top-p prefix of `weights` (sorted, descending), measured against
/// `total` (the weight of the whole distribution the candidates are a prefix of).
///
/// The cumulative weight is summed in `f64` in candidate order and compared with
/// `p * total`, `p` being the decimal the `f32` was written as
/// ([`as_decimal`](crate::as_decimal)); the first index where it is `>=` ends the prefix.
/// Returns `None` when the candidates given do not reach `p * total` (they are a prefix
/// too short to decide).
pub(crate) fn prefix_len(weights: &[f64], p: f64, total: f64) -> Option<usize> {
    let target = p * total;
    let mut cum = 0.0;
    for (i, &w) in weights.iter().enumerate() {
        cum += w;
        if cum >= target {
            return Some(i + 1);
        }
    }
    None
}

/// Where a cumulative weight crosses a top-p target (see [`crossing`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Crossing {
    /// The prefix of this length is the first to reach the target.
    At(usize),
    /// The weights given do not reach the target.
    Short,
    /// A cumulative sum next to the crossing lies within the error margin of the target:
    /// the decision needs more precise weights.
    Undecided,
}

/// The first prefix of `weights` (sorted, descending) at which the cumulative weight,
/// starting from `start` (the weight of the candidates before them), reaches `target`.
/// With a `margin` (the error bound of fast weights), a crossing where the target lies
/// within `margin` of either neighbouring cumulative sum is [`Crossing::Undecided`].
pub(crate) fn crossing(weights: &[f64], start: f64, target: f64, margin: Option<f64>) -> Crossing {
    let mut c = start;
    for (i, &w) in weights.iter().enumerate() {
        let prev = c;
        c += w;
        if c >= target {
            return match margin {
                Some(m) if target - prev <= m || c - target <= m => Crossing::Undecided,
                _ => Crossing::At(i + 1),
            };
        }
    }
    Crossing::Short
}
