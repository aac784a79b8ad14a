//! The draw: inverse CDF over the survivors in their documented order, one uniform.

/// Index of the first weight whose running sum exceeds `u * total`, with `u` in `[0, 1)`
/// and `total` the sum of `weights` in order. A zero weight is never chosen: if rounding
/// leaves the target unreached, the last positive weight is taken.
pub(crate) fn inverse_cdf(weights: &[f64], total: f64, u: f64) -> usize {
    let target = u * total;
    let mut cum = 0.0;
    let mut last = 0;
    for (i, &w) in weights.iter().enumerate() {
        if w > 0.0 {
            last = i;
        }
        cum += w;
        if cum > target {
            return i;
        }
    }
    last
}
