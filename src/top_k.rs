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

/// The top-k stage of a [`Chain`](crate::Chain): keeps the `max(k, min_keep)` most likely
/// candidates, ties at the boundary to the lower id.
///
/// # Example
/// ```
/// use logits::TopK;
/// assert_eq!(TopK::new(20)?.k(), 20);
/// assert!(TopK::new(0).is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopK {
    k: usize,
    min_keep: usize,
}

impl TopK {
    /// # Errors
    /// [`Error::InvalidParameter`] when `k == 0`.
    pub fn new(k: usize) -> Result<Self, crate::Error> {
        if k == 0 {
            return Err(crate::Error::InvalidParameter {
                name: "top_k",
                value: 0.0,
                expected: "an integer >= 1",
            });
        }
        Ok(TopK { k, min_keep: 1 })
    }

    /// Keep at least `n` candidates.
    pub fn min_keep(self, n: usize) -> Self {
        TopK {
            min_keep: n.max(1),
            ..self
        }
    }

    /// `k`.
    pub fn k(&self) -> usize {
        self.k
    }
}

impl crate::chain::Stage for TopK {
    fn name(&self) -> &'static str {
        "top_k"
    }

    fn apply(
        &mut self,
        c: &mut crate::Candidates,
        _: &crate::StageContext<'_>,
    ) -> Result<(), crate::Error> {
        c.sort();
        c.truncate(self.k.max(self.min_keep));
        Ok(())
    }
}
