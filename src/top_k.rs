//! Top-k: exactly the `k` largest logits, ties at the k-th value broken by lower id.

use crate::TokenId;

/// Below this `k`, selection keeps a sorted buffer with a running threshold; above it,
/// it uses `select_nth_unstable` on all candidates.
pub(crate) const SMALL_K: usize = 256;

/// Orders candidates: logit descending, then id ascending. `-0.0` and `0.0` are the same
/// logit (adding `0.0` turns `-0.0` into `0.0`), so they tie and the lower id comes first.
#[inline]
pub(crate) fn order(a: &(f32, TokenId), b: &(f32, TokenId)) -> std::cmp::Ordering {
    (b.0 + 0.0).total_cmp(&(a.0 + 0.0)).then(a.1.cmp(&b.1))
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

/// Writes the `k` best finite entries of a row of any element type into `out`, sorted by
/// [`order`], checking the row on the way; `k <= SMALL_K` is expected (larger `k` works,
/// more slowly).
///
/// One pass with a running threshold: each block's lane maxima are compared with the
/// current k-th best, and only a block holding an entry above it is looked at entry by
/// entry (on a typical row, a few dozen times in all). The row is checked with the
/// lane-sum test of [`max_checked`](crate::adjust::max_checked).
///
/// # Errors
/// [`Error::NanLogit`](crate::Error::NanLogit) /
/// [`Error::InfiniteLogit`](crate::Error::InfiniteLogit) for the first NaN or `+inf`.
pub(crate) fn select_row<T: crate::element::Logit>(
    row: &[T],
    k: usize,
    out: &mut Vec<(f32, TokenId)>,
) -> Result<(), crate::Error> {
    use crate::adjust::{load, BLOCK, LANES};
    out.clear();
    let mut threshold = f32::NEG_INFINITY;
    let mut sum = [0.0f32; LANES];
    let insert = |out: &mut Vec<(f32, TokenId)>, threshold: &mut f32, l: f32, id: usize| {
        if l > *threshold {
            let pos = out.partition_point(|&(x, _)| x >= l);
            if out.len() == k {
                out.pop();
            }
            out.insert(pos, (l, id as TokenId));
            if out.len() == k {
                *threshold = out[k - 1].0;
            }
        }
    };
    if k == 0 {
        return crate::adjust::max_checked(row).map(|_| ());
    }
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
        if m.iter().any(|&x| x > threshold) {
            for (j, x) in block.iter().enumerate() {
                insert(out, &mut threshold, x.to_f32(), b * BLOCK + j);
            }
        }
    }
    for (j, x) in row[rem_start..].iter().enumerate() {
        let l = x.to_f32();
        sum[0] += l;
        insert(out, &mut threshold, l, rem_start + j);
    }
    if sum.iter().any(|s| !(*s < f32::INFINITY)) {
        crate::adjust::first_non_finite_of(row)?;
    }
    Ok(())
}

/// [`select_row`] under sparse patches: the `k` best of the adjusted row. The `k + m`
/// best of the raw row (`m` patches) contain the `k` best unpatched tokens, so those
/// with a patch are replaced by their patched values and the result is cut to `k`.
///
/// # Errors
/// As [`select_row`], then the patches' own NaN/`+inf`.
pub(crate) fn select_patched<T: crate::element::Logit>(
    row: &[T],
    k: usize,
    overlay: &crate::adjust::Overlay,
    out: &mut Vec<(f32, TokenId)>,
) -> Result<(), crate::Error> {
    select_row(row, k + overlay.patch.len(), out)?;
    overlay.check()?;
    if overlay.patch.is_empty() {
        return Ok(());
    }
    out.retain(|&(_, id)| !overlay.is_patched(id));
    out.extend(
        overlay
            .patch
            .iter()
            .filter(|(_, l)| *l > f32::NEG_INFINITY)
            .map(|&(id, l)| (l, id)),
    );
    out.sort_unstable_by(order);
    out.truncate(k);
    Ok(())
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
