//! The arithmetic of the logit bias and the penalties (repetition as Hugging Face,
//! frequency and presence as OpenAI): one definition shared by the dense path, the
//! overlay's patches ([`Overlay::build`](crate::adjust::Overlay::build)) and the
//! `Penalties` stage, so that every path gives the same logits bit for bit.

use crate::params::SamplingParams;
use crate::TokenId;

/// Adds each bias to its token's logit. Ids were checked against the vocabulary when the
/// sampler was built. Returns true when some token's logit went down (the maximum may
/// have to be recomputed).
pub(crate) fn apply_bias(logits: &mut [f32], bias: &[(TokenId, f32)]) -> bool {
    let mut lowered = false;
    for &(id, b) in bias {
        logits[id as usize] += b;
        lowered |= b < 0.0;
    }
    lowered
}

/// Calls `f(id, c)` once for every distinct token of `window`, with `c` its count there.
/// `counts` must be all zero on entry and is all zero on return; it costs `O(window)`,
/// not `O(vocab)`.
pub(crate) fn for_each_count(
    window: &[TokenId],
    counts: &mut [u32],
    mut f: impl FnMut(TokenId, u32),
) {
    for &id in window {
        counts[id as usize] += 1;
    }
    for &id in window {
        let c = std::mem::take(&mut counts[id as usize]);
        if c > 0 {
            f(id, c);
        }
    }
}

/// The penalised logit of a token seen `c > 0` times: the repetition penalty `r` divides
/// a positive logit and multiplies a non-positive one (HF semantics, once per distinct
/// token), then `c * frequency + presence` is subtracted (OpenAI semantics).
///
/// `-inf` is absorbing: a token already at `-inf` (in the row, banned by a bias, or
/// masked) stays there, even when `c * frequency` overflows to `-inf`. So penalties give
/// the same result before and after a mask or a ban.
#[inline]
pub(crate) fn penalize(x: f32, c: u32, params: &SamplingParams) -> f32 {
    if x == f32::NEG_INFINITY {
        return x;
    }
    let r = params.repetition_penalty();
    let x = if r == 1.0 {
        x
    } else if x > 0.0 {
        x / r
    } else {
        x * r
    };
    x - (c as f32 * params.frequency_penalty() + params.presence_penalty())
}

/// Penalises, in a dense row, every token that occurs in `window` (see [`penalize`]).
pub(crate) fn apply_penalties(
    logits: &mut [f32],
    window: &[TokenId],
    params: &SamplingParams,
    counts: &mut [u32],
) {
    for_each_count(window, counts, |id, c| {
        let x = &mut logits[id as usize];
        *x = penalize(*x, c, params);
    });
}
