//! Greedy decoding (temperature 0): the argmax, ties to the lowest token id.

use crate::error::Error;
use crate::TokenId;

/// Greedy over a whole row of any element type, checking it on the way: the first
/// maximal finite entry.
///
/// One read: the top-1 case of the running-threshold scan of
/// [`select_row`](crate::select::select_row), which only looks entry by entry at a block
/// holding a new maximum (about `ln n` times on a typical row).
///
/// # Errors
/// [`Error::NanLogit`] / [`Error::InfiniteLogit`] for the first NaN or `+inf`;
/// [`Error::NoCandidates`] when every entry is `-inf`.
pub(crate) fn argmax_row<T: crate::element::Logit>(
    row: &[T],
    skip: &crate::adjust::Overlay,
    out: &mut Vec<(f32, TokenId)>,
) -> Result<TokenId, Error> {
    crate::select::select_row(row, 1, skip, out)?;
    out.first().map(|&(_, id)| id).ok_or(Error::NoCandidates)
}
