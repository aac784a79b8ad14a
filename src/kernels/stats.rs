//! Whole-row statistics in one vectorised pass each, with bounds on their errors: the
//! mass and the entropy sum (epsilon and eta cutoff), and the moments of the logits
//! (top-n-sigma).
//!
//! The stages that decide from such a statistic (a probability threshold, an entropy, a
//! standard deviation) turn it into a logit floor with an uncertainty band. A token
//! outside the band is decided by the fast statistic exactly as exact arithmetic would
//! decide it; when a token lies inside, the engine runs the stage's plain `f64` code
//! instead (see [`engine`](crate::engine)).
//!
//! Both passes skip the marked tokens of an [`Overlay`](crate::adjust::Overlay); the
//! caller adds the patches' contributions.

use crate::adjust::{is_marked, lane_marks_if, load, BLOCK, LANES};
use crate::element::Logit;
use crate::exp::{
    exp_neg, exp_neg_f32_lean, mul_add, F32_ABS_ERROR, LEAN_ARG_ERROR, LEAN_REL_ERROR, MIN_ARG,
};
use crate::mask::BITS;

/// `2^-24`, the unit roundoff of `f32`.
const U32: f64 = 5.960_464_477_539_063e-8;
/// `2^-53`, the unit roundoff of `f64`.
pub(crate) const U64: f64 = 1.110_223_024_625_156_5e-16;

/// The mass `z = sum exp(l - max)` and the entropy sum `s = sum exp(l - max) (max - l)`
/// of a row's unmarked entries, at temperature 1, each with a bound on its error. The
/// entropy of the distribution is `ln z + s / z` nats.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Entropy {
    pub(crate) z: f64,
    pub(crate) z_err: f64,
    pub(crate) s: f64,
    pub(crate) s_err: f64,
}

impl Entropy {
    /// Takes the sums from a maximum `old` to a larger `new` (both finite; a row of `n`
    /// entries): `z' = r z` and `s' = r (s + d z)` with `d = new - old` and
    /// `r = e^-d` ([`rescale`](crate::mass::rescale), within its stated relative error
    /// `e`). Their bounds follow: `r z_err` and `r (s_err + d z_err)`, plus `e` of the
    /// new sums, `3 * 2^-53` of `s'` for `d`'s rounding, the product `d z` and the sum,
    /// and `n * 1e-320` for a factor that underflows.
    pub(crate) fn rebase(&mut self, old: f32, new: f32, n: usize) {
        let (r, e) = crate::mass::rescale(old, new, 1.0);
        let d = f64::from(new) - f64::from(old);
        let tiny = n as f64 * 1e-320;
        self.s = r * (self.s + d * self.z);
        self.s_err = r * (self.s_err + d * self.z_err) + (e + 3.0 * U64) * self.s + tiny;
        self.z *= r;
        self.z_err = r * self.z_err + e * self.z + tiny;
    }

    /// Adds the sums of another part of the row, relative to the same maximum, with
    /// the rounding of the two additions.
    pub(crate) fn join(&mut self, o: &Entropy) {
        self.z += o.z;
        self.s += o.s;
        self.z_err += o.z_err + U64 * self.z;
        self.s_err += o.s_err + U64 * self.s;
    }

    /// Adds an entry computed exactly (in `f64`): a patch.
    pub(crate) fn add_exact(&mut self, l: f32, max: f32) {
        if l > f32::NEG_INFINITY {
            let x = f64::from(l) - f64::from(max);
            let w = x.exp();
            self.z += w;
            self.s -= w * x;
            // (`exp` within an ulp, the product and the sums within a few more.)
            self.z_err += 4.0 * U64 * w;
            self.s_err += 8.0 * U64 * w * (1.0 - x);
        }
    }
}

/// [`Entropy`] of the entries of `row` that `marks` leaves unmarked, relative to `max`
/// (at least every such entry, finite), with `f32` weights.
///
/// # Error bound
/// Per entry, with `x = l - max <= 0` exactly and `x' = fl(l - max) = x (1 + d)`,
/// `|d| <= 2^-24`:
/// - the weight [`exp_neg_f32_lean`]`(x')` is within
///   `LEAN_REL_ERROR + (LEAN_ARG_ERROR + 2^-24) |x|` (relative) of `e^x`: the argument's
///   rounding moves `e^x` by `e^{x d}`;
/// - the entropy term `w' * -x'` adds the rounding of `x'` and of the product;
/// - each lane sums four weights and four terms in `f32` (at most `3 * 2^-24` of their
///   sums) before they join the `f64` lane sums (below `1e-11` of the totals);
/// - below `-87` the weight is `e^-87` (an absolute error of at most [`F32_ABS_ERROR`],
///   and `87` times that for its term), `-inf` entries included.
///
/// The parts proportional to `|x|` are bounded a posteriori by the sums of `w |x|` (that
/// is, `s`) and `w x^2`, the latter summed in `f32` with a margin of 2% for its own
/// rounding.
///
/// The row must hold no NaN or `+inf` (checked beforehand). Always inlined, so that
/// [`simd::row_entropy`](crate::simd::row_entropy) can compile it for wider vectors
/// (the engine runs it span by span, through [`online_entropy_blocks`]).
#[inline(always)]
pub(crate) fn entropy<T: Logit>(row: &[T], marks: Option<&[u32]>, max: f32) -> Entropy {
    entropy_in::<T, false>(row, marks, max)
}

/// [`Entropy`] of the entries of `row` that `marks` leaves unmarked, relative to `max`
/// (at least every such entry, finite), with the `f64` [`exp_neg`]: bounds a
/// billion times narrower than [`entropy`]'s, at the cost of `f64` arithmetic.
///
/// # Error bound
/// Per entry, with `x = l - max` and `x' = fl(l - max)` within `2^-53 |x|` of it:
/// - the weight `exp_neg(x')` is within `4e-15 + 1.01 * 2^-53 |x|` (relative) of
///   `e^x`, so the weights' errors sum to at most `4e-15 z + 1.01 * 2^-53 s`;
/// - the entropy term `w * -x'` adds the roundings of `x'` and of the product, and the
///   weight's `|x|` part gives `1.01 * 2^-53 q` with `q = sum w x^2`, which the pass
///   sums too;
/// - the `f64` lane sums are within `(n + 2) 2^-53` of their totals;
/// - below `MIN_ARG` (`-inf` entries included) the weight is `e^MIN_ARG` and the term
///   0: at most `e^MIN_ARG` and `709 e^MIN_ARG` from the exact ones per entry.
///
/// The row must hold no NaN or `+inf` (checked beforehand). Typical-p runs it only when
/// the fast statistics leave a decision open, so it has no wider copies.
pub(crate) fn entropy_precise<T: Logit>(row: &[T], marks: Option<&[u32]>, max: f32) -> Entropy {
    match marks {
        None => entropy_precise_with::<T, false>(row, &[], max),
        Some(marks) => entropy_precise_with::<T, true>(row, marks, max),
    }
}

/// [`entropy_precise`], with the test of the marks compiled in or out. Every lane
/// computes its terms and drops them when they are left out, so that the loop compiles
/// to SIMD.
#[inline(always)]
fn entropy_precise_with<T: Logit, const MARKS: bool>(
    row: &[T],
    marks: &[u32],
    max: f32,
) -> Entropy {
    let max = f64::from(max);
    let (mut z, mut s, mut q) = ([0.0f64; LANES], [0.0f64; LANES], [0.0f64; LANES]);
    let terms = |v: f32, skip: bool| {
        let x = (f64::from(v) - max).min(0.0);
        let w = exp_neg(x);
        let keep = !(MARKS && skip);
        let live = keep && x >= MIN_ARG;
        (
            if keep { w } else { 0.0 },
            if live { -(w * x) } else { 0.0 },
            if live { w * x * x } else { 0.0 },
        )
    };
    let chunks = row.chunks_exact(LANES);
    let base = row.len() - chunks.remainder().len();
    for (c, chunk) in chunks.enumerate() {
        let v = load(chunk);
        let m = lane_marks_if::<MARKS>(marks, c * LANES);
        for j in 0..LANES {
            let (a, b, d) = terms(v[j], m & BITS[j] != 0);
            z[j] += a;
            s[j] += b;
            q[j] += d;
        }
    }
    for (j, x) in row[base..].iter().enumerate() {
        let (a, b, d) = terms(x.to_f32(), MARKS && is_marked(marks, base + j));
        z[j] += a;
        s[j] += b;
        q[j] += d;
    }
    let (z, s, q): (f64, f64, f64) = (z.iter().sum(), s.iter().sum(), q.iter().sum());
    let n = row.len() as f64;
    let tiny = n * 710.0 * MIN_ARG.exp();
    let sums = (n + 2.0) * U64;
    Entropy {
        z,
        z_err: z * (4e-15 + sums) + 1.01 * U64 * s + tiny,
        s,
        s_err: s * (4e-15 + 3.03 * U64 + sums) + 1.01 * U64 * q * 1.01 + tiny,
    }
}

/// [`entropy`], and with `FUSED` its multiply-adds fused (for code compiled with the
/// `fma` target feature); within the same bound.
#[inline(always)]
pub(crate) fn entropy_in<T: Logit, const FUSED: bool>(
    row: &[T],
    marks: Option<&[u32]>,
    max: f32,
) -> Entropy {
    match marks {
        None => entropy_with::<T, false, FUSED>(row, &[], max),
        Some(marks) => entropy_with::<T, true, FUSED>(row, marks, max),
    }
}

/// [`online_entropy_blocks`] without the blocks' maxima (the tests compare the two).
#[cfg(test)]
pub(crate) fn online_entropy<T: Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    max_of: impl Fn(&[T], Option<&[u32]>, &mut [f32; LANES]) -> f32,
    sums: impl Fn(&[T], Option<&[u32]>, f32) -> Entropy,
) -> OnlineEntropy {
    online_entropy_blocks(row, marks, max_of, sums, None)
}

/// A span kernel of [`online_entropy_blocks`]:
/// [`span_max_blocks_of`](crate::mass::span_max_blocks_of)'s arguments (`span`, its
/// marks, the check sums, the maxima of its blocks) and result.
pub(crate) type SpanMaxBlocks<T> = fn(&[T], Option<&[u32]>, &mut [f32; LANES], &mut [f32]) -> f32;

/// [`entropy`] without the maximum known beforehand: one pass over the row in spans
/// ([`span_len`](crate::mass::span_len)), each span's maximum read first (`max_of`, as
/// [`span_max_of`](crate::mass::span_max_of)), its sums computed against the running
/// maximum (`sums`, as [`entropy`]) and the sums so far taken to a new maximum by
/// [`Entropy::rebase`] when it rises. The loop is scalar; the engine passes the
/// dispatched kernels.
///
/// With `blocks`, each span's maximum is read with `blocks.0` instead (as
/// [`span_max_blocks_of`](crate::mass::span_max_blocks_of)), which also writes the
/// largest entry of each whole block of the row into `blocks.1` (at least
/// `row.len() / BLOCK` entries): the same maximum, sums and check.
pub(crate) fn online_entropy_blocks<T: Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    max_of: impl Fn(&[T], Option<&[u32]>, &mut [f32; LANES]) -> f32,
    sums: impl Fn(&[T], Option<&[u32]>, f32) -> Entropy,
    mut blocks: Option<(SpanMaxBlocks<T>, &mut [f32])>,
) -> OnlineEntropy {
    let len = crate::mass::span_len(row.len());
    let mut check = [0.0f32; LANES];
    let mut max = f32::NEG_INFINITY;
    let mut e = Entropy {
        z: 0.0,
        z_err: 0.0,
        s: 0.0,
        s_err: 0.0,
    };
    for (i, span) in row.chunks(len).enumerate() {
        let mk = crate::mass::span_marks(marks, i * len);
        let top = match &mut blocks {
            Some((k, maxima)) => k(span, mk, &mut check, &mut maxima[i * len / BLOCK..]),
            None => max_of(span, mk, &mut check),
        };
        if top > max {
            if max > f32::NEG_INFINITY {
                e.rebase(max, top, row.len());
            }
            max = top;
        }
        if max > f32::NEG_INFINITY {
            e.join(&sums(span, mk, max));
        }
    }
    OnlineEntropy {
        max,
        e,
        bad: check.iter().any(|&c| crate::adjust::not_finite_above(c)),
        above_neg_inf: check.iter().all(|&c| c > f32::NEG_INFINITY),
    }
}

/// What [`online_entropy_blocks`] found.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OnlineEntropy {
    /// The maximum of the unmarked entries (`-inf` if none).
    pub(crate) max: f32,
    /// The sums relative to it.
    pub(crate) e: Entropy,
    /// Whether the row may hold a NaN or a `+inf` (as [`Online`](crate::mass::Online)).
    pub(crate) bad: bool,
    /// True when no entry, marked or not, is `-inf`. Every entry is added to the lane
    /// sums of the check, and a `-inf` turns its lane's sum to `-inf`, or to NaN with a
    /// `+inf`; a lane whose finite sum overflows to `-inf` makes it false as well.
    pub(crate) above_neg_inf: bool,
}

#[inline(always)]
fn entropy_with<T: Logit, const MARKS: bool, const FUSED: bool>(
    row: &[T],
    marks: &[u32],
    max: f32,
) -> Entropy {
    let mut z = [0.0f64; LANES];
    let mut s = [0.0f64; LANES];
    let mut x2 = [0.0f32; LANES];
    let term = |v: f32, skip: bool, z: &mut f32, s: &mut f32, x2: &mut f32| {
        let x = v - max;
        // (A marked entry may lie above `max`: its weight is computed at 0, then dropped.)
        let x = if MARKS && x > 0.0 { 0.0 } else { x };
        let x = if x > -87.0 { x } else { -87.0 };
        let w = exp_neg_f32_lean::<FUSED>(x);
        let w = if MARKS && skip { 0.0 } else { w };
        *z += w;
        // (`x <= 0`: the lanes sum `w x`, the negated terms, and the sums are negated
        // once; `(w x) x` is `(w (-x)) (-x)` exactly.)
        let wx = w * x;
        *s += wx;
        *x2 = mul_add::<FUSED>(wx, x, *x2);
    };
    let blocks = row.chunks_exact(BLOCK);
    let rem = blocks.remainder();
    for (b, block) in blocks.enumerate() {
        let mut zb = [0.0f32; LANES];
        let mut sb = [0.0f32; LANES];
        for (c, chunk) in block.chunks_exact(LANES).enumerate() {
            let v = load(chunk);
            let m = lane_marks_if::<MARKS>(marks, b * BLOCK + c * LANES);
            for j in 0..LANES {
                term(v[j], m & BITS[j] != 0, &mut zb[j], &mut sb[j], &mut x2[j]);
            }
        }
        for j in 0..LANES {
            z[j] += f64::from(zb[j]);
            s[j] -= f64::from(sb[j]);
        }
    }
    let base = row.len() - rem.len();
    for (j, c) in rem.iter().enumerate() {
        let (mut zj, mut sj) = (0.0, 0.0);
        let skip = MARKS && is_marked(marks, base + j);
        term(c.to_f32(), skip, &mut zj, &mut sj, &mut x2[j % LANES]);
        z[j % LANES] += f64::from(zj);
        s[j % LANES] -= f64::from(sj);
    }
    let z: f64 = z.iter().sum();
    let s: f64 = s.iter().sum();
    let x2: f64 = x2.iter().map(|&d| f64::from(d)).sum();
    let n = row.len() as f64;
    // Per unit of `w |x|`: the argument's rounding and the `exp`'s own part.
    let arg = 1.02 * (U32 + LEAN_ARG_ERROR);
    Entropy {
        z,
        z_err: z * (LEAN_REL_ERROR + 3.01 * U32 + 1e-11) + arg * s + n * F32_ABS_ERROR,
        s,
        s_err: s * (LEAN_REL_ERROR + 5.01 * U32 + 1e-11) + arg * x2 + n * 88.0 * F32_ABS_ERROR,
    }
}

/// The moments of a row's finite unmarked entries about a reference point `r` (their
/// maximum): their count, `sum (l - r)`, `sum (l - r)^2` and the smallest `l - r`, in
/// `f64` lane sums.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Moments {
    pub(crate) count: usize,
    pub(crate) sum: f64,
    pub(crate) sum_sq: f64,
    pub(crate) lowest: f64,
}

impl Moments {
    /// Adds one entry (a patch): finite ones only.
    pub(crate) fn add(&mut self, l: f32, r: f32) {
        if l > f32::NEG_INFINITY {
            let d = f64::from(l) - f64::from(r);
            self.count += 1;
            self.sum += d;
            self.sum_sq += d * d;
            self.lowest = self.lowest.min(d);
        }
    }

    /// Bounds on the error of [`sum`](Self::sum) and [`sum_sq`](Self::sum_sq): each
    /// difference `l - r` within one rounding, each square within one more, and each
    /// of the `n` terms of a lane sum moving it by at most `2^-53` of the sum of
    /// magnitudes (every `l - r` has the same sign, so that sum is `|sum|`).
    pub(crate) fn errors(&self, n: usize) -> (f64, f64) {
        let k = (n as f64 + 3.0) * U64;
        (k * self.sum.abs(), (k + 2.0 * U64) * self.sum_sq)
    }
}

/// [`Moments`] of the unmarked finite entries of `row` about `r`. The row must hold no
/// NaN (checked beforehand); every unmarked entry is at most `r`. Always inlined, so
/// that [`simd::row_moments`](crate::simd::row_moments) can compile it for wider vectors.
#[inline(always)]
pub(crate) fn moments<T: Logit>(row: &[T], marks: Option<&[u32]>, r: f32) -> Moments {
    match marks {
        None => moments_with::<T, false>(row, &[], r),
        Some(marks) => moments_with::<T, true>(row, marks, r),
    }
}

#[inline(always)]
fn moments_with<T: Logit, const MARKS: bool>(row: &[T], marks: &[u32], r: f32) -> Moments {
    let r64 = f64::from(r);
    let mut count = [0u32; LANES];
    let mut sum = [0.0f64; LANES];
    let mut sum_sq = [0.0f64; LANES];
    let mut lowest = [0.0f64; LANES];
    let add = |v: f32, skip: bool, c: &mut u32, s: &mut f64, q: &mut f64, lo: &mut f64| {
        let take = v > f32::NEG_INFINITY && !(MARKS && skip);
        let d = if take { f64::from(v) - r64 } else { 0.0 };
        *c += u32::from(take);
        *s += d;
        *q += d * d;
        *lo = if d < *lo { d } else { *lo };
    };
    let chunks = row.chunks_exact(LANES);
    let base = row.len() - chunks.remainder().len();
    for (c, chunk) in chunks.enumerate() {
        let v = load(chunk);
        let m = lane_marks_if::<MARKS>(marks, c * LANES);
        for j in 0..LANES {
            add(
                v[j],
                m & BITS[j] != 0,
                &mut count[j],
                &mut sum[j],
                &mut sum_sq[j],
                &mut lowest[j],
            );
        }
    }
    for (j, x) in row[base..].iter().enumerate() {
        let skip = MARKS && is_marked(marks, base + j);
        add(
            x.to_f32(),
            skip,
            &mut count[j],
            &mut sum[j],
            &mut sum_sq[j],
            &mut lowest[j],
        );
    }
    Moments {
        count: count.iter().map(|&c| c as usize).sum(),
        sum: sum.iter().sum(),
        sum_sq: sum_sq.iter().sum(),
        lowest: lowest.iter().copied().fold(0.0, f64::min),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mass and the entropy sum of the unmarked finite entries of `row` relative to
    /// `max`: each term in `f64` (within two ulps of its exact value), summed exactly.
    fn exact_entropy(row: &[f32], marks: Option<&[u32]>, max: f32) -> (f64, f64) {
        use crate::kernels::exact_sum::ExactSum;
        let (mut z, mut s) = (ExactSum::new(), ExactSum::new());
        for (i, &l) in row.iter().enumerate() {
            if !marks.is_some_and(|m| is_marked(m, i)) && l > f32::NEG_INFINITY {
                let x = f64::from(l) - f64::from(max);
                z.add(x.exp());
                s.add(-(x.exp() * x));
            }
        }
        (z.to_f64(), s.to_f64())
    }

    /// How close [`assert_bounds`] requires the sums and their bounds to be.
    struct Tight {
        /// The reference's own error, relative to each exact sum.
        reference: f64,
        /// The largest bound on `z`, relative to `z`.
        z: f64,
        /// The largest bound on `s`, relative to `s + z`.
        s: f64,
        /// The bounds' allowance per entry for weights that underflow.
        tiny: f64,
    }

    /// The sums `e` of a row of `n` entries hold the exact `(z, s)` within their bounds
    /// (and the reference's own error), and the bounds are as tight as `tight` says.
    fn assert_bounds(e: &Entropy, (z, s): (f64, f64), n: usize, tight: Tight) {
        let r = tight.reference;
        assert!(
            (e.z - z).abs() <= e.z_err + r * z,
            "n {n}: z {} vs {z}",
            e.z
        );
        assert!(
            (e.s - s).abs() <= e.s_err + r * s,
            "n {n}: s {} vs {s}",
            e.s
        );
        let tiny = n as f64 * tight.tiny;
        assert!(e.z_err <= tight.z * z + tiny, "z bound {} loose", e.z_err);
        let s_max = tight.s * (s + z) + tiny;
        assert!(e.s_err <= s_max, "s bound {} loose", e.s_err);
    }

    /// The fast sums: bounds within `1e-5` of the mass, `1e-4` of the sums.
    fn assert_fast_bounds(e: &Entropy, exact: (f64, f64), n: usize) {
        let tight = Tight {
            reference: 0.0,
            z: 1e-5,
            s: 1e-4,
            tiny: 1e-30,
        };
        assert_bounds(e, exact, n, tight);
    }

    /// Calls `check(row, marks, max)` on noisy rows with an outlier and a `-inf`, each
    /// without marks and with a third of its entries marked (`max` the largest unmarked
    /// entry).
    fn entropy_cases(mut check: impl FnMut(&[f32], Option<&[u32]>, f32)) {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for (n, scale) in [
            (151_936usize, 2.0f32),
            (151_936, 0.05),
            (4_099, 30.0),
            (17, 3.0),
            (1_000, 1e3),
        ] {
            let mut row = crate::test_rows::uniform_row(&mut x, n, scale, 101, 7);
            row[n / 3] = 8.0 * scale;
            row[n / 5] = f32::NEG_INFINITY;
            let marks: Vec<u32> = (0..n.div_ceil(32))
                .map(|w| if w % 2 == 1 { 0x8421_0f0f } else { 0 })
                .collect();
            for marks in [None, Some(&marks[..])] {
                let max = (0..n)
                    .filter(|&i| !marks.is_some_and(|m| is_marked(m, i)))
                    .map(|i| row[i])
                    .fold(f32::NEG_INFINITY, f32::max);
                check(&row, marks, max);
            }
        }
    }

    #[test]
    fn the_fast_entropy_sums_are_within_their_bounds_and_the_bounds_are_tight() {
        entropy_cases(|row, marks, max| {
            let n = row.len();
            let (z, s) = exact_entropy(row, marks, max);
            for e in [
                entropy(row, marks, max),
                entropy_in::<f32, true>(row, marks, max),
            ] {
                assert_fast_bounds(&e, (z, s), n);
            }
        });
    }

    /// The precise sums within bounds a billion times narrower than the fast ones'.
    #[test]
    fn the_precise_entropy_sums_are_within_their_bounds() {
        entropy_cases(|row, marks, max| {
            let n = row.len();
            let (z, s) = exact_entropy(row, marks, max);
            let e = entropy_precise(row, marks, max);
            let tight = Tight {
                // (Each reference term within two ulps of its exact value.)
                reference: 4.0 * U64,
                z: 1e-10,
                s: 1e-9,
                tiny: 1e-300,
            };
            assert_bounds(&e, (z, s), n, tight);
        });
    }

    /// Rows for the one-pass statistics: noisy, rising in every span (the most
    /// rebases), a maximum in the last span only, and extreme values.
    fn online_rows(x: &mut u64) -> Vec<Vec<f32>> {
        let mut rows = vec![
            crate::test_rows::uniform_row(x, 151_936, 2.0, 101, 7),
            crate::test_rows::uniform_row(x, 4_099, 30.0, 13, 2),
            crate::test_rows::uniform_row(x, 17, 3.0, 5, 1),
            crate::test_rows::uniform_row(x, 300_007, 0.5, 1_000, 3),
            crate::test_rows::uniform_row(x, 3_000, 1e-40, 50, 1),
        ];
        for step in [1e-3f32, 0.05, 0.7] {
            rows.push((0..151_936).map(|i| -80.0 + step * i as f32).collect());
        }
        let mut late = vec![f32::NEG_INFINITY; 20_000];
        late[19_000..]
            .iter_mut()
            .enumerate()
            .for_each(|(i, l)| *l = i as f32 * 1e-2);
        rows.push(late);
        rows.push(vec![f32::NEG_INFINITY; 3_000]);
        rows
    }

    fn check_online_stats<T: Logit>(row: &[T], marks: Option<&[u32]>) {
        let v: Vec<f32> = row.iter().map(|x| x.to_f32()).collect();
        let n = v.len();
        let max = (0..n)
            .filter(|&i| !marks.is_some_and(|m| is_marked(m, i)))
            .map(|i| v[i])
            .fold(f32::NEG_INFINITY, f32::max);
        let portable =
            |r: &[T], m: Option<&[u32]>, c: &mut [f32; LANES]| crate::mass::span_max_of(r, m, c);
        for OnlineEntropy {
            max: m,
            e,
            bad,
            above_neg_inf,
            ..
        } in [
            online_entropy(row, marks, portable, entropy::<T>),
            online_entropy(row, marks, portable, entropy_in::<T, true>),
        ] {
            // (A row of finite entries whose lane sums overflow to `-inf` would make it
            // false; the rows here are far from that.)
            assert_eq!(above_neg_inf, v.iter().all(|&l| l > f32::NEG_INFINITY));
            assert!(!bad || v.iter().any(|l| l.abs() > 1e30));
            assert_eq!(m.to_bits(), max.to_bits());
            if max == f32::NEG_INFINITY {
                assert_eq!((e.z, e.s), (0.0, 0.0));
                continue;
            }
            assert_fast_bounds(&e, exact_entropy(&v, marks, max), n);
        }
        check_block_maxima(row, marks, &v);
    }

    /// The entropy pass that records its blocks' maxima, on the portable code and on
    /// the widest the CPU has: the same maximum, sums and check as the plain pass (bit
    /// for bit on the portable code), and each whole block's largest entry, marked or
    /// not, NaN left out (`v` is `row` in `f32`).
    fn check_block_maxima<T: Logit>(row: &[T], marks: Option<&[u32]>, v: &[f32]) {
        let portable =
            |r: &[T], m: Option<&[u32]>, c: &mut [f32; LANES]| crate::mass::span_max_of(r, m, c);
        let plain = online_entropy(row, marks, portable, entropy::<T>);
        // (Compared as values: a block's `0.0` and `-0.0` may come out either way.)
        let want: Vec<f32> = v
            .chunks_exact(BLOCK)
            .map(|b| {
                let m = b.iter().copied().filter(|l| !l.is_nan());
                m.fold(f32::NEG_INFINITY, f32::max)
            })
            .collect();
        let blocks = v.len() / BLOCK;
        let mut maxima = vec![f32::NAN; blocks];
        let k: SpanMaxBlocks<T> = crate::mass::span_max_blocks_of::<T>;
        let on = online_entropy_blocks(row, marks, portable, entropy::<T>, Some((k, &mut maxima)));
        let bits = |e: &OnlineEntropy| {
            (
                e.max.to_bits(),
                e.e.z.to_bits(),
                e.e.s.to_bits(),
                e.bad,
                e.above_neg_inf,
            )
        };
        assert_eq!(bits(&on), bits(&plain));
        assert_eq!(maxima, want);
        let mut wide = vec![f32::NAN; blocks];
        let w = crate::simd::online_entropy_blocks(row, marks, &mut wide);
        let wide_plain = crate::simd::online_entropy(row, marks);
        assert_eq!(bits(&w), bits(&wide_plain));
        assert_eq!(wide, want);
    }

    #[test]
    fn the_one_pass_statistics_are_within_their_bounds() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for row in online_rows(&mut x) {
            let n = row.len();
            let marks: Vec<u32> = (0..n.div_ceil(32))
                .map(|w| if w % 2 == 1 { 0x8421_0f0f } else { 0 })
                .collect();
            for marks in [None, Some(&marks[..])] {
                check_online_stats(&row, marks);
                let c = |l: f32| if l.is_finite() { l.clamp(-6e4, 6e4) } else { l };
                let h: Vec<half::f16> = row.iter().map(|&l| half::f16::from_f32(c(l))).collect();
                check_online_stats(&h, marks);
                let b: Vec<half::bf16> = row.iter().map(|&l| half::bf16::from_f32(l)).collect();
                check_online_stats(&b, marks);
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        #[test]
        fn one_pass_statistics_match_plain_f64_sums(
            parts in proptest::collection::vec((0u8..5, -60.0f32..60.0, 1usize..3_000), 1..6),
            seed in proptest::prelude::any::<u64>(),
            masked in proptest::prelude::any::<bool>(),
        ) {
            let mut row = Vec::new();
            let mut x = seed | 1;
            for (kind, base, len) in parts {
                for i in 0..len {
                    let f = i as f32 / len as f32;
                    row.push(match kind {
                        0 => base,
                        1 => base + 40.0 * f,
                        2 => base - 40.0 * f,
                        3 => crate::test_rows::uniform_row(&mut x, 1, 20.0, 7, 9)[0] + base,
                        _ => f32::NEG_INFINITY,
                    });
                }
            }
            let marks: Vec<u32> = (0..row.len().div_ceil(32))
                .map(|w| (seed.rotate_left(w as u32) as u32) & 0x5555_5555)
                .collect();
            let marks = masked.then_some(&marks[..]);
            check_online_stats(&row, marks);
            let b: Vec<half::bf16> = row.iter().map(|&l| half::bf16::from_f32(l)).collect();
            check_online_stats(&b, marks);
        }
    }

    #[test]
    fn moments_match_a_plain_sum() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for (n, scale) in [(151_936usize, 2.0f32), (33, 40.0), (5, 1e-3)] {
            let mut row = crate::test_rows::uniform_row(&mut x, n, scale, 97, 5);
            row[n / 2] = f32::NEG_INFINITY;
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let m = moments(&row, None, max);
            let finite: Vec<f64> = row
                .iter()
                .filter(|l| l.is_finite())
                .map(|&l| f64::from(l) - f64::from(max))
                .collect();
            let (e1, e2) = m.errors(n);
            assert_eq!(m.count, finite.len());
            assert!((m.sum - finite.iter().sum::<f64>()).abs() <= e1);
            assert!((m.sum_sq - finite.iter().map(|d| d * d).sum::<f64>()).abs() <= e2);
            assert_eq!(m.lowest, finite.iter().copied().fold(0.0, f64::min));
        }
    }
}
