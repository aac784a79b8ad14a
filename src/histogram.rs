//! The probability histogram that lets top-p, min-p and the plain draw avoid sorting the
//! vocabulary.
//!
//! Every finite token falls in a bucket by its distance below the maximum in scaled
//! units, `d = (max - l) / T`: bucket `b` holds `d` in `[b / 16, (b + 1) / 16)` nats, and
//! the last bucket everything from 64 nats down (weights below `e^-64`). One pass
//! accumulates each bucket's count and weight `sum exp(-d)` (in `f64`, with the
//! vectorised [`exp_neg`](crate::exp::exp_neg), relative error below `4e-15`).
//!
//! The bucket index is a monotone (non-increasing) function of the logit, computed by the
//! same [`key`] everywhere, so bucket order is the candidates' order: every token of
//! bucket `b` ranks before every token of bucket `b + 1`. Walking the buckets from the
//! top finds which buckets a prefix of the sorted candidates covers, and only the tokens
//! of the boundary buckets are ever sorted.
//!
//! Nothing here materialises the row: the passes read the caller's `f32`/`f16`/`bf16`
//! row directly and take the sparse adjustments (bias, penalties) from an
//! [`Overlay`].

use crate::adjust::{load, Overlay, LANES};
use crate::element::Logit;
use crate::exp::exp_neg;
use crate::top_k::order;
use crate::TokenId;

/// Number of buckets.
pub(crate) const BUCKETS: usize = 1024;
/// The last bucket, which also holds every token more than 64 nats below the maximum.
pub(crate) const LAST: usize = BUCKETS - 1;
/// Buckets per nat.
const PER_NAT: f64 = 16.0;
/// The key of a `-inf` token: in no bucket.
const NONE: u32 = BUCKETS as u32;

/// The reference point of the buckets: the adjusted row's maximum and `1 / T`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Frame {
    /// Maximum of the adjusted row (finite).
    pub(crate) max: f32,
    /// `1 / T` in `f64`.
    pub(crate) inv_t: f64,
}

impl Frame {
    pub(crate) fn new(max: f32, t: f32) -> Self {
        Frame {
            max,
            inv_t: 1.0 / f64::from(t),
        }
    }

    /// `(l - max) / T` as the pass computes it (a multiplication by `1 / T`: monotone in
    /// `l`, within an ulp of the exact quotient).
    #[inline(always)]
    fn s(&self, l: f32) -> f64 {
        (f64::from(l) - f64::from(self.max)) * self.inv_t
    }
}

/// The bucket of a finite logit `l <= max`.
#[inline(always)]
fn bucket_of_s(s: f64) -> u32 {
    let d = -s * PER_NAT;
    (if d < LAST as f64 { d } else { LAST as f64 }) as i32 as u32
}

/// The bucket of `l`, or [`NONE`] for `-inf`.
#[inline(always)]
pub(crate) fn key(l: f32, f: Frame) -> u32 {
    if l > f32::NEG_INFINITY {
        bucket_of_s(f.s(l))
    } else {
        NONE
    }
}

/// The bucket holding scaled logit `s <= 0`.
pub(crate) fn bucket_of(s: f64) -> usize {
    bucket_of_s(s) as usize
}

/// Fills `count` and `mass` with the tokens of bucket `<= limit` of the adjusted row
/// (`row` under `overlay`, whose maximum is `f.max`). Chunks whose largest entry is
/// beyond `limit` are skipped without computing any `exp`.
pub(crate) fn build<T: Logit>(
    row: &[T],
    overlay: &Overlay,
    f: Frame,
    limit: usize,
    count: &mut [u32],
    mass: &mut [f64],
) {
    count.iter_mut().for_each(|c| *c = 0);
    mass.iter_mut().for_each(|m| *m = 0.0);
    let lim = limit as u32;
    let chunks = row.chunks_exact(LANES);
    let rem = chunks.remainder();
    let rem_start = row.len() - rem.len();
    for c in chunks {
        let v = load(c);
        if limit < LAST {
            let top = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            // (An entry above the maximum is a patched token's raw value: no skip.)
            if top <= f.max && key(top, f) > lim {
                continue;
            }
        }
        let mut w = [0.0f64; LANES];
        let mut k = [0u32; LANES];
        for j in 0..LANES {
            let s = f.s(v[j]);
            w[j] = exp_neg(s);
            k[j] = if v[j] > f32::NEG_INFINITY {
                bucket_of_s(s)
            } else {
                NONE
            };
        }
        for j in 0..LANES {
            if k[j] <= lim {
                count[k[j] as usize] += 1;
                mass[k[j] as usize] += w[j];
            }
        }
    }
    for x in &row[rem_start..] {
        let l = x.to_f32();
        let k = key(l, f);
        if k <= lim {
            count[k as usize] += 1;
            mass[k as usize] += exp_neg(f.s(l));
        }
    }
    // The patched tokens were counted with their raw values: move them.
    for &(id, l) in &overlay.patch {
        let raw = row[id as usize].to_f32();
        let k = key(raw, f);
        if k <= lim {
            let k = k as usize;
            count[k] -= 1;
            mass[k] = if count[k] == 0 {
                0.0
            } else {
                (mass[k] - exp_neg(f.s(raw))).max(0.0)
            };
        }
        let k = key(l, f);
        if k <= lim {
            count[k as usize] += 1;
            mass[k as usize] += exp_neg(f.s(l));
        }
    }
}

/// Writes the tokens of buckets `lo..=hi` of the adjusted row into `out`, sorted by
/// [`order`]. Chunks whose largest entry is beyond `hi` are skipped after one
/// comparison per entry.
pub(crate) fn collect<T: Logit>(
    row: &[T],
    overlay: &Overlay,
    f: Frame,
    lo: usize,
    hi: usize,
    out: &mut Vec<(f32, TokenId)>,
) {
    out.clear();
    let (lo, hi) = (lo as u32, hi as u32);
    let chunks = row.chunks_exact(LANES);
    let rem_start = row.len() - chunks.remainder().len();
    for (c, chunk) in chunks.enumerate() {
        let v = load(chunk);
        let top = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if top <= f.max && key(top, f) > hi {
            continue;
        }
        for (j, &l) in v.iter().enumerate() {
            let k = key(l, f);
            if (lo..=hi).contains(&k) {
                out.push((l, (c * LANES + j) as TokenId));
            }
        }
    }
    for (j, x) in row[rem_start..].iter().enumerate() {
        let l = x.to_f32();
        if (lo..=hi).contains(&key(l, f)) {
            out.push((l, (rem_start + j) as TokenId));
        }
    }
    if !overlay.patch.is_empty() {
        out.retain(|&(_, id)| !overlay.is_patched(id));
        for &(id, l) in &overlay.patch {
            if (lo..=hi).contains(&key(l, f)) {
                out.push((l, id));
            }
        }
    }
    out.sort_unstable_by(order);
}

/// The first bucket at which the running mass reaches `target`, walking from the top
/// (`None` if it never does).
pub(crate) fn mass_bucket(mass: &[f64], target: f64) -> Option<usize> {
    let mut cum = 0.0;
    for (b, &m) in mass.iter().enumerate() {
        cum += m;
        if cum >= target {
            return Some(b);
        }
    }
    None
}

/// The first bucket at which the running count reaches `n` (`None` if it never does).
pub(crate) fn count_bucket(count: &[u32], n: usize) -> Option<usize> {
    let mut total = 0usize;
    for (b, &c) in count.iter().enumerate() {
        total += c as usize;
        if total >= n {
            return Some(b);
        }
    }
    None
}
