//! Top-p (nucleus): the smallest prefix of the sorted candidates whose probability
//! reaches `p`; the token that crosses `p` is kept.

/// Length of the top-p prefix of `weights` (sorted, descending), measured against
/// `total` (the weight of the whole distribution the candidates are a prefix of).
///
/// The cumulative weight is summed in `f64` in candidate order and compared with
/// `p * total`; the first index where it is `>=` ends the prefix. Returns `None` when the
/// candidates given do not reach `p * total` (they are a prefix too short to decide).
pub(crate) fn prefix_len(weights: &[f64], p: f32, total: f64) -> Option<usize> {
    let target = f64::from(p) * total;
    let mut cum = 0.0;
    for (i, &w) in weights.iter().enumerate() {
        cum += w;
        if cum >= target {
            return Some(i + 1);
        }
    }
    None
}
