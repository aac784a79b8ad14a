//! Greedy decoding (temperature 0): the argmax, ties to the lowest token id.

use crate::error::Error;
use crate::TokenId;

/// The index of the largest entry; among equal maxima the lowest index. `max` is the
/// row's maximum, already known from the first pass.
///
/// # Errors
/// [`Error::NoCandidates`] when every entry is `-inf`.
pub(crate) fn argmax(logits: &[f32], max: f32) -> Result<TokenId, Error> {
    if max == f32::NEG_INFINITY {
        return Err(Error::NoCandidates);
    }
    // The first entry equal to the maximum: a plain search the compiler turns into a
    // fast scan.
    logits
        .iter()
        .position(|&l| l == max)
        .map(|i| i as TokenId)
        .ok_or(Error::NoCandidates)
}
