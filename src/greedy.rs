//! Greedy decoding (temperature 0): the argmax, ties to the lowest token id.

use crate::error::Error;
use crate::TokenId;

/// Greedy over a whole row of any element type in one pass, checking it on the way: the
/// first maximal finite entry.
///
/// Each chunk is reduced to its maximum with per-lane operations; only a chunk whose
/// maximum beats the best so far is remembered, and the first maximal entry is found
/// inside that one chunk at the end.
///
/// # Errors
/// [`Error::NanLogit`] / [`Error::InfiniteLogit`] for the first NaN or `+inf`;
/// [`Error::NoCandidates`] when every entry is `-inf`.
pub(crate) fn argmax_row<T: crate::element::Logit>(row: &[T]) -> Result<TokenId, Error> {
    use crate::adjust::{load, LANES};
    let mut best = f32::NEG_INFINITY;
    let mut best_chunk = usize::MAX;
    let mut bad = [false; LANES];
    let chunks = row.chunks_exact(LANES);
    let rem_start = row.len() - chunks.remainder().len();
    for (c, chunk) in chunks.enumerate() {
        let v = load(chunk);
        let mut m = [f32::NEG_INFINITY; LANES / 2];
        for j in 0..LANES / 2 {
            bad[j] |= !(v[j] < f32::INFINITY);
            bad[j + LANES / 2] |= !(v[j + LANES / 2] < f32::INFINITY);
            m[j] = if v[j] > v[j + LANES / 2] {
                v[j]
            } else {
                v[j + LANES / 2]
            };
        }
        let cm = m.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if cm > best {
            best = cm;
            best_chunk = c;
        }
    }
    if bad.iter().any(|&b| b) {
        crate::adjust::first_non_finite_of(row)?;
    }
    let mut id = if best_chunk == usize::MAX {
        None
    } else {
        let base = best_chunk * LANES;
        row[base..base + LANES]
            .iter()
            .position(|x| x.to_f32() == best)
            .map(|j| base + j)
    };
    for (j, x) in row[rem_start..].iter().enumerate() {
        let v = x.to_f32();
        if !(v < f32::INFINITY) {
            crate::adjust::first_non_finite_of(row)?;
        }
        if v > best {
            best = v;
            id = Some(rem_start + j);
        }
    }
    id.map(|i| i as TokenId).ok_or(Error::NoCandidates)
}
