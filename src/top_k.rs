//! Top-k: exactly the `k` largest logits, ties at the k-th value broken by lower id.

use crate::TokenId;

/// Below this `k`, selection keeps a sorted buffer with a running threshold; above it,
/// it uses `select_nth_unstable` on all candidates.
const SMALL_K: usize = 256;

/// Orders candidates: logit descending, then id ascending.
#[inline]
pub(crate) fn order(a: &(f32, TokenId), b: &(f32, TokenId)) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
}

/// Writes the `k` best finite entries of `logits` into `out`, sorted by [`order`].
///
/// One pass over the row: an entry is inserted only if it beats the current k-th best
/// (strictly, since later ids lose ties), so the common case is one comparison per entry.
pub(crate) fn select(logits: &[f32], k: usize, out: &mut Vec<(f32, TokenId)>) {
    out.clear();
    if k == 0 {
        return;
    }
    if k > SMALL_K {
        out.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, &l)| l > f32::NEG_INFINITY)
                .map(|(i, &l)| (l, i as TokenId)),
        );
        if out.len() > k {
            out.select_nth_unstable_by(k - 1, order);
            out.truncate(k);
        }
        out.sort_unstable_by(order);
        return;
    }
    let mut threshold = f32::NEG_INFINITY;
    for (i, &l) in logits.iter().enumerate() {
        if l > threshold {
            // Insert after every entry >= l (earlier ids win ties).
            let pos = out.partition_point(|&(x, _)| x >= l);
            if out.len() == k {
                out.pop();
            }
            out.insert(pos, (l, i as TokenId));
            if out.len() == k {
                threshold = out[k - 1].0;
            }
        }
    }
}
