//! Logit bias: `l += bias` per listed token; `-inf` bans.

use crate::TokenId;

/// Adds each bias to its token's logit. Ids were checked against the vocabulary when the
/// sampler was built. Returns true when some token's logit went down (the maximum may
/// have to be recomputed).
pub(crate) fn apply(logits: &mut [f32], bias: &[(TokenId, f32)]) -> bool {
    let mut lowered = false;
    for &(id, b) in bias {
        logits[id as usize] += b;
        lowered |= b < 0.0;
    }
    lowered
}
