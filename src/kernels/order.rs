//! The candidates' order, which is the draw order: logit descending, ties to the lower
//! id. Selection, the histogram's buckets and the candidate set all sort by it.

use crate::TokenId;

/// Orders candidates: logit descending, then id ascending. `-0.0` and `0.0` are the same
/// logit (adding `0.0` turns `-0.0` into `0.0`), so they tie and the lower id comes first.
#[inline]
pub(crate) fn order(a: &(f32, TokenId), b: &(f32, TokenId)) -> std::cmp::Ordering {
    (b.0 + 0.0).total_cmp(&(a.0 + 0.0)).then(a.1.cmp(&b.1))
}
