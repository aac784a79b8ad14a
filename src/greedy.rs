//! Greedy decoding (temperature 0): the argmax, ties to the lowest token id.

use crate::error::Error;
use crate::TokenId;

/// Greedy over a whole row of any element type in one pass, checking it on the way: the
/// first maximal finite entry.
///
/// Each lane keeps its maximum and the first block where it reached it; at the end the
/// first maximal entry is searched in the earliest such block only. The check is the
/// lane-sum test of [`max_checked`](crate::adjust::max_checked).
///
/// # Errors
/// [`Error::NanLogit`] / [`Error::InfiniteLogit`] for the first NaN or `+inf`;
/// [`Error::NoCandidates`] when every entry is `-inf`.
pub(crate) fn argmax_row<T: crate::element::Logit>(row: &[T]) -> Result<TokenId, Error> {
    use crate::adjust::{load, BLOCK, LANES};
    let mut best = [f32::NEG_INFINITY; LANES];
    let mut at = [u32::MAX; LANES];
    let mut sum = [0.0f32; LANES];
    let blocks = row.chunks_exact(BLOCK);
    let rem_start = row.len() - blocks.remainder().len();
    for (b, block) in blocks.enumerate() {
        let mut m = [f32::NEG_INFINITY; LANES];
        for c in block.chunks_exact(LANES) {
            let v = load(c);
            for j in 0..LANES {
                sum[j] += v[j];
                m[j] = if v[j] > m[j] { v[j] } else { m[j] };
            }
        }
        for j in 0..LANES {
            let gt = m[j] > best[j];
            best[j] = if gt { m[j] } else { best[j] };
            at[j] = if gt { b as u32 } else { at[j] };
        }
    }
    if sum.iter().any(|s| !(*s < f32::INFINITY)) {
        crate::adjust::first_non_finite_of(row)?;
    }
    let max = best.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut id = None;
    if max > f32::NEG_INFINITY {
        let b = (0..LANES)
            .filter(|&j| best[j] == max)
            .map(|j| at[j] as usize)
            .min()
            .unwrap_or(0);
        let base = b * BLOCK;
        id = row[base..base + BLOCK]
            .iter()
            .position(|x| x.to_f32() == max)
            .map(|j| base + j);
    }
    let mut top = max;
    for (j, x) in row[rem_start..].iter().enumerate() {
        let v = x.to_f32();
        if !(v < f32::INFINITY) {
            crate::adjust::first_non_finite_of(row)?;
        }
        if v > top {
            top = v;
            id = Some(rem_start + j);
        }
    }
    id.map(|i| i as TokenId).ok_or(Error::NoCandidates)
}
