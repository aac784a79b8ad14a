//! Repetition (Hugging Face), frequency and presence (OpenAI) penalties.

use crate::params::SamplingParams;
use crate::TokenId;

/// Penalises every token that occurs in `window`.
///
/// For a token seen `c > 0` times: the repetition penalty `r` divides a positive logit
/// and multiplies a non-positive one (HF semantics, applied once per distinct token),
/// then `c * frequency + presence` is subtracted (OpenAI semantics). `counts` must be
/// all zero on entry and is all zero on return; it costs `O(window)`, not `O(vocab)`.
pub(crate) fn apply(
    logits: &mut [f32],
    window: &[TokenId],
    params: &SamplingParams,
    counts: &mut [u32],
) {
    for &id in window {
        counts[id as usize] += 1;
    }
    let r = params.repetition_penalty();
    let (freq, presence) = (params.frequency_penalty(), params.presence_penalty());
    for &id in window {
        let c = std::mem::take(&mut counts[id as usize]);
        if c == 0 {
            continue;
        }
        let x = &mut logits[id as usize];
        if r != 1.0 {
            *x = if *x > 0.0 { *x / r } else { *x * r };
        }
        *x -= c as f32 * freq + presence;
    }
}
