//! Logprobs under the model's raw distribution, and the top alternatives.

use crate::element::Logit;
use crate::TokenId;

/// Which logprobs [`Sampler::logprobs_into`](crate::Sampler::logprobs_into) and
/// [`Chain::logprobs_into`](crate::Chain::logprobs_into) write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum LogprobKind {
    /// The log-softmax of the raw row over the vocabulary, before any adjustment, mask
    /// or cut: `l - max - ln(sum(exp(l - max)))`, the sum in `f64`.
    Raw,
    /// The natural logarithm of the final probability, the one the draw uses: `-inf` for
    /// every token the adjustments, the mask or the cuts removed (greedy: 0 at the
    /// argmax).
    Processed,
}

/// `ln(sum(exp(x - max)))` of the raw row in `f64`, given its maximum: the log-sum-exp
/// shifted by `max`, so that `x - lse = (x - max) - ln_z` stays exact for huge logits
/// (`max + ln_z` would round back to `max` near `f32::MAX`).
pub(crate) fn log_z<T: Logit>(row: &[T], max: f32) -> f64 {
    if max == f32::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    let m = f64::from(max);
    let z: f64 = row.iter().map(|&x| (f64::from(x.to_f32()) - m).exp()).sum();
    z.ln()
}

/// The `n` largest finite entries of `row` (ties to the lower id), largest first, written
/// into `out[..]`; returns how many were written.
pub(crate) fn top_n<T: Logit>(row: &[T], out: &mut [(f32, TokenId)]) -> usize {
    let n = out.len();
    let mut len = 0;
    if n == 0 {
        return 0;
    }
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

/// Fills `out.raw_logprob` and `n_alt` alternatives; `final_logprob` gives a token's
/// logprob in the final distribution.
pub(crate) fn fill<T: Logit>(
    row: &[T],
    raw_max: f32,
    n_alt: usize,
    out: &mut crate::Sample,
    final_logprob: impl Fn(TokenId) -> f32,
) {
    let (m, ln_z) = (f64::from(raw_max), log_z(row, raw_max));
    let raw = |l: f32| ((f64::from(l) - m) - ln_z) as f32;
    out.raw_logprob = Some(raw(row[out.token as usize].to_f32()));
    let mut top = [(0.0f32, 0 as TokenId); crate::MAX_LOGPROBS];
    let n_alt = n_alt.min(crate::MAX_LOGPROBS);
    let found = top_n(row, &mut top[..n_alt]);
    for &(l, id) in &top[..found] {
        out.push_alternative(crate::Alternative {
            token: id,
            raw_logprob: raw(l),
            logprob: final_logprob(id),
        });
    }
}
