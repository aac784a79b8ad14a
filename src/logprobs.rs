//! Logprobs under the model's raw distribution, and the top alternatives.

use crate::element::Logit;
use crate::TokenId;

/// `logsumexp` of the raw row in `f64`, given its maximum.
pub(crate) fn log_sum_exp<T: Logit>(row: &[T], max: f32) -> f64 {
    if max == f32::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    let m = f64::from(max);
    let z: f64 = row
        .iter()
        .map(|&x| (f64::from(x.to_f32()) - m).exp())
        .sum();
    m + z.ln()
}

/// The `n` largest finite entries of `row` (ties to the lower id), largest first, written
/// into `out[..]`; returns how many were written.
pub(crate) fn top_n<T: Logit>(row: &[T], out: &mut [(f32, TokenId)]) -> usize {
    let n = out.len();
    let mut len = 0;
    for (i, &x) in row.iter().enumerate() {
        let l = x.to_f32();
        if l == f32::NEG_INFINITY || (len == n && l <= out[n - 1].0) {
            continue;
        }
        let pos = out[..len].partition_point(|&(y, _)| y >= l);
        if len < n {
            len += 1;
        }
        out.copy_within(pos..len - 1, pos + 1);
        out[pos] = (l, i as TokenId);
    }
    len
}
