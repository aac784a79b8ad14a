//! Greedy decoding (temperature 0): the argmax, ties to the lowest token id.

use crate::error::Error;
use crate::TokenId;

/// Greedy over a whole row of any element type, checking it on the way: the first
/// maximal finite entry.
///
/// Two reads: the maximum with the lane-sum check of
/// [`max_checked`](crate::adjust::max_checked), then a search for the first block whose
/// lane maxima reach it (on average half the row, stopping there).
///
/// # Errors
/// [`Error::NanLogit`] / [`Error::InfiniteLogit`] for the first NaN or `+inf`;
/// [`Error::NoCandidates`] when every entry is `-inf`.
pub(crate) fn argmax_row<T: crate::element::Logit>(row: &[T]) -> Result<TokenId, Error> {
    use crate::adjust::{load, BLOCK, LANES};
    let max = crate::adjust::max_checked(row)?;
    if max == f32::NEG_INFINITY {
        return Err(Error::NoCandidates);
    }
    let blocks = row.chunks_exact(BLOCK);
    let rem_start = row.len() - blocks.remainder().len();
    for (b, block) in blocks.enumerate() {
        let mut m = [f32::NEG_INFINITY; LANES];
        for c in block.chunks_exact(LANES) {
            let v = load(c);
            for j in 0..LANES {
                m[j] = if v[j] > m[j] { v[j] } else { m[j] };
            }
        }
        if m.iter().any(|&x| x >= max) {
            if let Some(j) = block.iter().position(|x| x.to_f32() == max) {
                return Ok((b * BLOCK + j) as TokenId);
            }
        }
    }
    row[rem_start..]
        .iter()
        .position(|x| x.to_f32() == max)
        .map(|j| (rem_start + j) as TokenId)
        .ok_or(Error::NoCandidates)
}
