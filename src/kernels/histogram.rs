//! The probability histogram that lets top-p, min-p and the plain draw avoid sorting the
//! vocabulary.
//!
//! Every finite token falls in a bucket by its distance below the maximum in scaled
//! units, `d = (max - l) / T`: bucket `b` holds `d` within `1 / 128` nat of `b / 64`
//! nats, and the last bucket everything from about 64 nats down (weights below
//! `e^-64`). One pass accumulates each bucket's count and weight `sum exp(-d)` in `f64`, with the
//! vectorised `f32` [`exp_neg_f32_lean`] and a bound on each
//! bucket's error ([`error_bound`]), or, when a decision falls within that bound, with
//! the `f64` [`exp_neg`] (relative error below `4e-15`).
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

use crate::adjust::{is_marked, lane_marks_if, load, Overlay, BLOCK, LANES};
use crate::element::Logit;
use crate::exp::{exp_neg, exp_neg_f32, exp_neg_f32_lean, mul_add, F32_ABS_ERROR};
use crate::exp::{LEAN_ARG_ERROR, LEAN_REL_ERROR};
use crate::mask::BITS;
use crate::TokenId;

/// Number of buckets.
pub(crate) const BUCKETS: usize = 4096;
/// Length of the count and mass arrays: the buckets and one spare slot per vector lane
/// that the fill pass uses as a sink (always zero afterwards).
pub(crate) const SLOTS: usize = BUCKETS + LANES;
/// The last bucket, which also holds every token more than 64 nats below the maximum.
pub(crate) const LAST: usize = BUCKETS - 1;
/// Buckets per nat.
const PER_NAT: f32 = 64.0;
/// The key of a `-inf` token: in no bucket.
const NONE: u32 = BUCKETS as u32;

/// The reference point of the buckets: the adjusted row's maximum and `1 / T`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Frame {
    /// Maximum of the adjusted row (finite).
    pub(crate) max: f32,
    /// `1 / T` in `f32`, for the bucket keys and the fast weights.
    inv_t32: f32,
    /// `1 / T` in `f64`, for the precise weights.
    inv_t: f64,
    /// Roundings in the fast weights' argument once the subtraction's error is added
    /// back: the product unless `1 / T` is 1, and `1 / T` itself unless it is exact in
    /// `f32`.
    steps: f64,
}

impl Frame {
    pub(crate) fn new(max: f32, t: f32) -> Self {
        Frame {
            max,
            // A subnormal T makes `1 / T` overflow `f32`, and `0 * inf` is NaN for the
            // maximum itself; `f32::MAX` keeps `s32` exact there (0) and sends every
            // smaller logit to the last bucket, where its true weight belongs.
            inv_t32: (1.0 / t).min(f32::MAX),
            inv_t: 1.0 / f64::from(t),
            // (Where the fast weights do not hold, a bound this large sends every
            // decision to the precise weights.)
            steps: if !f32_weights_hold(t) {
                1e30
            } else if t == 1.0 {
                0.0
            } else if f64::from(1.0 / t) == 1.0 / f64::from(t) {
                1.01
            } else {
                2.01
            },
        }
    }

    /// Roundings in the fast weights' argument, in units of `2^-24 |s|` (1e30 where the
    /// fast weights do not hold, so that every bound built on it sends the decision to
    /// the precise weights).
    pub(crate) fn steps(&self) -> f64 {
        self.steps
    }

    /// `(l - max) / T` in `f32` arithmetic (a multiplication by `1 / T`): monotone
    /// non-decreasing in `l`, within `2.5e-7 |s|` of the exact value.
    #[inline(always)]
    pub(crate) fn s32(&self, l: f32) -> f32 {
        (l - self.max) * self.inv_t32
    }

    /// Bounds `[a, b]` on the logits whose key lies in `lo..=hi`: a superset, wider by a
    /// 64th of a bucket on each side, rounded outwards to `f32`. (Bucket `k` holds the
    /// keys' `d` within half a bucket of `k`; the key's two `f32` roundings move `d` by
    /// at most `2^-23 d`, below 5e-4 of a bucket for every bucket.) Two comparisons then
    /// rule out most entries of a row before any key is computed.
    pub(crate) fn interval(&self, lo: usize, hi: usize) -> (f32, f32) {
        const HALF: f64 = 0.5 + 1.0 / 64.0;
        let per = f64::from(PER_NAT) * f64::from(self.inv_t32);
        let max = f64::from(self.max);
        let a = if hi >= LAST {
            f64::NEG_INFINITY
        } else {
            max - (hi as f64 + HALF) / per
        };
        let b = if lo == 0 {
            f64::INFINITY
        } else {
            max - (lo as f64 - HALF) / per
        };
        ((a as f32).next_down(), (b as f32).next_up())
    }

    /// `(l - max) / T` in `f64`, within two ulps of the exact quotient.
    #[inline(always)]
    fn s64(&self, l: f32) -> f64 {
        (f64::from(l) - f64::from(self.max)) * self.inv_t
    }
}

/// Whether `f32` arithmetic can compute the fast weights at temperature `t`: `1 / T`
/// must be finite (not for a subnormal `T`), and `T` below `1e30`, so that a difference
/// `l - max` that overflows `f32` (only possible beyond `1.7e38`) belongs to a weight
/// below `e^-87`, where the fast weights clamp anyway. Otherwise the sampler sorts every
/// finite token instead of building the histogram.
pub(crate) fn f32_weights_hold(t: f32) -> bool {
    (1.0 / t).is_finite() && t < 1e30
}

/// `1.5 * 2^23`: adding it rounds a small `f32` to an integer held in the low bits.
const ROUND_F32: f32 = 12_582_912.0;

/// The bucket of a scaled logit computed by [`Frame::s32`]: `d = -16 s` rounded to the
/// nearest integer (through the exponent trick, which vectorises, unlike a saturating
/// cast), capped at [`LAST`]. A monotone function of `s`, so bucket order is logit order.
/// An entry above the maximum (a marked token's raw value) gets bucket 0 or a key
/// beyond every bucket.
#[inline(always)]
fn bucket_of_s32(s: f32) -> u32 {
    let d = -s * PER_NAT;
    let d = if d < LAST as f32 { d } else { LAST as f32 };
    (d + ROUND_F32).to_bits().wrapping_sub(ROUND_F32.to_bits())
}

/// The bucket of `l`, or [`NONE`] for `-inf`. The one key function every pass uses.
#[inline(always)]
pub(crate) fn key(l: f32, f: Frame) -> u32 {
    let k = bucket_of_s32(f.s32(l));
    if l > f32::NEG_INFINITY {
        k
    } else {
        NONE
    }
}

/// The bucket of scaled logit `s <= 0`.
pub(crate) fn bucket_of(s: f64) -> usize {
    bucket_of_s32(s as f32) as usize
}

/// Bound on the error of `mass[b]` as filled by a fast (`f32`) [`build`] at frame `f`.
///
/// Per weight `w (1 + e / T)` with `w = exp_neg_f32_lean(fl(d * fl(1 / T)))`, `d = fl(l -
/// max)` and `e = l - max - d` exactly: the argument is within `steps * 2^-24 * |x|` of
/// the exact `x = (l - max) / T` (`steps` roundings: none when `T = 1`, at most two), and
/// `|x|` is below `(b + 1) / 64` nats in bucket `b`, so the weight is within that relative
/// amount of `e^x`; [`exp_neg_f32_lean`] adds [`LEAN_REL_ERROR`]` + `[`LEAN_ARG_ERROR`]`
/// |x|`; the first-order correction, its rounding and the `f64` sums below `1e-12`
/// (`|e / T| <= 2^-24 |x|`, `|x| <= 87`). The last bucket's weights are below `e^-63`
/// each (and `e^-87` for those clamped there). (The same bound holds, with room, for
/// [`fast_weight`]'s Cephes weights.)
#[inline]
pub(crate) fn error_bound(b: usize, count: u32, mass: f64, f: Frame) -> f64 {
    error_bound_at(b, count, mass, f, 1.0)
}

/// The sum of [`error_bound`] over the buckets `range` of a fast [`build`]'s `count` and
/// `mass`.
pub(crate) fn error_bound_sum(
    range: std::ops::Range<usize>,
    count: &[u32],
    mass: &[f64],
    f: Frame,
) -> f64 {
    bound_sum(range, count, mass, |b, c, m| error_bound(b, c, m, f))
}

/// The sum of `bound(b, count[b], mass[b])` over the non-empty buckets `b` of `range`:
/// for [`error_bound`] and [`second_error_bound`], which give an empty bucket 0 (but
/// for the last bucket in [`second_error_bound`], which is outside every range that
/// bound is summed over).
pub(crate) fn bound_sum(
    range: std::ops::Range<usize>,
    count: &[u32],
    mass: &[f64],
    bound: impl Fn(usize, u32, f64) -> f64,
) -> f64 {
    range
        .filter(|&b| count[b] > 0)
        .map(|b| bound(b, count[b], mass[b]))
        .sum()
}

/// [`error_bound`] for the second masses of a [`build`] whose buckets are those of a
/// frame at temperature `t_key`, weighed in frame `g` at temperature `t_g`, with
/// `scale = t_key / t_g` (rounded up; 1 when the frames are the same): a token of
/// bucket `b` lies within `(b + 1) / 64` nats of the maximum in the key's frame, so
/// within `scale (b + 1) / 64` in `g`'s, and the bound follows as above. (The half
/// bucket of slack in `b + 1` is far above the keys' `f32` roundings.) In the last
/// bucket a weight in `g` is only bounded when `scale >= 1`; otherwise the bound is
/// infinite, and every decision that needs it is taken with the precise weights.
#[inline]
pub(crate) fn error_bound_at(b: usize, count: u32, mass: f64, g: Frame, scale: f64) -> f64 {
    if b == LAST {
        if scale >= 1.0 {
            f64::from(count) * 5e-28
        } else {
            f64::INFINITY
        }
    } else {
        // (`|x|` at most.)
        let x = scale * (b as f64 + 1.0) / f64::from(PER_NAT);
        let exp = LEAN_REL_ERROR + LEAN_ARG_ERROR * x;
        let arg = g.steps * 5.97e-8 * x;
        mass * (exp + arg + 6e-8 * 6e-8 * 87.0 * 87.0 + LEAN_REL_ERROR * 6e-8 + 1e-12)
            + f64::from(count) * F32_ABS_ERROR
    }
}

/// Fills `count` and `mass` with the tokens of bucket `<= limit` of the adjusted row
/// (`row` under `overlay`, whose maximum is `f.max`). Blocks whose largest entry is
/// beyond `limit` are skipped without computing any `exp`.
///
/// `precise` selects the weights: the `f64` [`exp_neg`] (relative error `4e-15`), or the
/// `f32` [`exp_neg_f32_lean`] ([`lean_weight`]) with the per-bucket error of
/// [`error_bound`], its multiply-adds fused when `FUSED` (code compiled with the `fma`
/// target feature, or where [`PORTABLE_FUSED`](crate::exp::PORTABLE_FUSED) holds; the
/// bound is the same either way).
///
/// Always inlined, so that [`simd::build`](crate::simd::build) can compile it for wider
/// vectors.
///
/// With `second = Some((g, mass2))`, the same pass also fills `mass2[..SLOTS]` with each
/// bucket's weight in frame `g` (the same maximum, another temperature; `mass2` has
/// `2 * SLOTS` entries, the rest scratch): the buckets stay those of `f`, so a chain
/// whose draw runs at another temperature than its cut finds the draw's masses without
/// a second pass. [`second_error_bound`] bounds their error, for every bucket but the
/// last.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn build<T: Logit, const FUSED: bool>(
    row: &[T],
    overlay: &Overlay,
    f: Frame,
    limit: usize,
    precise: bool,
    count: &mut [u32],
    mass: &mut [f64],
    second: Option<(Frame, &mut [f64])>,
) {
    let hist = (count, mass);
    if precise {
        build_by(row, overlay, f, limit, hist, second, precise_weight, false);
    } else {
        build_by(
            row,
            overlay,
            f,
            limit,
            hist,
            second,
            lean_weight::<FUSED>,
            true,
        );
    }
}

/// [`build`] with the weight function `weight`, with or without the second masses: in
/// a fast build (`fast`) by [`Polynomial`] where it holds, otherwise with `weight` in
/// the second frame ([`second_error_bound`] bounds either).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn build_by<T: Logit, X: Weight, W: Fn(Frame, f32) -> X + Copy>(
    row: &[T],
    overlay: &Overlay,
    f: Frame,
    limit: usize,
    hist: (&mut [u32], &mut [f64]),
    second: Option<(Frame, &mut [f64])>,
    weight: W,
    fast: bool,
) {
    match second {
        None => build_with(row, overlay, f, limit, hist, &mut [], weight, NoSecond),
        Some((g, m2)) => match Polynomial::new(f, g) {
            Some(poly) if fast => build_with(row, overlay, f, limit, hist, m2, weight, poly),
            _ => build_with(
                row,
                overlay,
                f,
                limit,
                hist,
                m2,
                weight,
                Weighed { g, weight },
            ),
        },
    }
}

/// A token's weight as a pass computes it: `f32` in a fast build, `f64` in a precise one.
/// The pass keeps a vector's weights in their own type (so that a fast build's exps run
/// on full `f32` vectors) and widens each to `f64` as it adds it to its bucket.
trait Weight: Copy + Default {
    /// The weight in `f64` (exact: every `f32` is an `f64`).
    fn to_f64(self) -> f64;
}

impl Weight for f32 {
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

impl Weight for f64 {
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
}

/// How a [`build`] weighs each token for the second masses.
trait Second: Copy {
    /// Whether there are second masses at all.
    const ON: bool;
    /// The type of a second weight.
    type W: Weight;
    /// What token `l` of bucket `k` (in the key frame `f`) adds to its bucket's second
    /// sum.
    fn weight(&self, f: Frame, l: f32, k: u32) -> Self::W;
    /// Turns the buckets' sums into their masses, in `mass2[..BUCKETS]`.
    fn finish(&self, _mass2: &mut [f64]) {}
}

/// No second masses.
#[derive(Clone, Copy)]
struct NoSecond;

impl Second for NoSecond {
    const ON: bool = false;
    type W = f32;
    #[inline(always)]
    fn weight(&self, _: Frame, _: f32, _: u32) -> f32 {
        0.0
    }
}

/// The weight function of the build in the second frame `g`.
#[derive(Clone, Copy)]
struct Weighed<W> {
    g: Frame,
    weight: W,
}

impl<X: Weight, W: Fn(Frame, f32) -> X + Copy> Second for Weighed<W> {
    const ON: bool = true;
    type W = X;
    #[inline(always)]
    fn weight(&self, _: Frame, l: f32, _: u32) -> X {
        (self.weight)(self.g, l)
    }
}

/// The largest ratio `t_key / t_second` for which [`Polynomial`] weighs the second
/// masses: `|r δ| <= 1/32` there, where the polynomial's truncation is below `2e-12`.
const POLYNOMIAL_MAX_RATIO: f64 = 4.0;

/// Bound on the relative error of [`Polynomial::weight`]'s polynomial for `|y| <= 1/32`
/// in `f32` (the truncation, below `2e-12`, and the roundings of Horner's steps, which
/// the last `+ 1` dominates: about `2^-24 (1 + 4/32)`; the test below samples it).
const POLYNOMIAL_REL_ERROR: f64 = 1.2e-7;

/// The fast second weights through the buckets of the key frame `f`: a token of bucket
/// `k < LAST` has scaled logit `s = -k / 64 + δ` with `|δ| <= 1/128` (the key rounds
/// `-64 s` to the nearest integer; `s + k / 64` is exact by Sterbenz's lemma), so its
/// weight at the second temperature is `e^(-r k / 64) e^(r δ)` with `r = t_key / t_second`.
/// The pass sums `e^(r δ)`, a degree-5 polynomial in `r δ`, and [`finish`](Second::finish)
/// multiplies each bucket's sum by `e^(-r k / 64)`: a few multiply-adds per token where
/// an exp would take a range reduction and a longer polynomial. The last bucket's sum
/// means nothing (its `δ` is unbounded) and is set to 0; [`second_error_bound`] is
/// infinite there.
#[derive(Clone, Copy)]
struct Polynomial {
    /// `r` in `f32`.
    r32: f32,
    /// `e^(-r / 64)`, the factor from one bucket to the next.
    step: f64,
}

impl Polynomial {
    /// The polynomial weights from key frame `f` to second frame `g`, if they hold: a
    /// ratio of temperatures at most [`POLYNOMIAL_MAX_RATIO`], and fast weights that hold
    /// in `f`.
    fn new(f: Frame, g: Frame) -> Option<Polynomial> {
        let r = ratio(f, g);
        Polynomial::holds(f, g).then(|| Polynomial {
            r32: r as f32,
            step: exp_neg(-r / f64::from(PER_NAT)),
        })
    }

    /// Whether [`new`](Polynomial::new) gives the polynomial weights (no exp computed).
    fn holds(f: Frame, g: Frame) -> bool {
        ratio(f, g) <= POLYNOMIAL_MAX_RATIO && f.steps < 1e30
    }
}

impl Second for Polynomial {
    const ON: bool = true;
    type W = f32;
    #[inline(always)]
    fn weight(&self, f: Frame, l: f32, k: u32) -> f32 {
        let delta = f.s32(l) + k as f32 * (1.0 / PER_NAT);
        exp_small(delta * self.r32)
    }

    fn finish(&self, mass2: &mut [f64]) {
        let mut factor = 1.0;
        for m in &mut mass2[..LAST] {
            *m *= factor;
            factor *= self.step;
        }
        mass2[LAST] = 0.0;
    }
}

/// `e^y` for `|y| <= 1/32`: the degree-5 Taylor polynomial by Horner's rule in `f32`,
/// within [`POLYNOMIAL_REL_ERROR`].
#[inline(always)]
fn exp_small(y: f32) -> f32 {
    let mut p = 1.0 / 120.0f32;
    p = p * y + 1.0 / 24.0;
    p = p * y + 1.0 / 6.0;
    p = p * y + 0.5;
    p = p * y + 1.0;
    p * y + 1.0
}

/// `t_f / t_g` in `f64`.
fn ratio(f: Frame, g: Frame) -> f64 {
    g.inv_t / f.inv_t
}

/// Bound on the error of `mass2[b]` as a fast [`build`] with key frame `f` and second
/// frame `g` fills it: [`error_bound_at`] where the second weights are computed in `g`,
/// and for [`Polynomial`]'s the polynomial's error plus that of the exponent: `s` is
/// within `(steps + 1) 2^-24 |s|` of `(l - max) / t_f` (the roundings of the key's
/// argument and that of `l - max`, which these weights do not add back), `|s| <= (b + 1)
/// / 64`, scaled by `r`; `r` in `f32`, the factors' `b` products and the `f64` sums add
/// less than `1e-9 r + 4.3e-15 (b + 1) + 1.2e-16 count`. Infinite in the last bucket.
#[inline]
pub(crate) fn second_error_bound(b: usize, count: u32, mass: f64, f: Frame, g: Frame) -> f64 {
    // (Rounded up, so that the bounds scale at least as the true ratio.)
    let scale = ratio(f, g) * (1.0 + 1e-12);
    if !Polynomial::holds(f, g) {
        return error_bound_at(b, count, mass, g, scale);
    }
    if b >= LAST {
        return f64::INFINITY;
    }
    let arg = (f.steps + 1.01) * 5.97e-8 * scale * (b as f64 + 1.0) / f64::from(PER_NAT);
    let rest = 1e-9 * scale + 4.3e-15 * (b as f64 + 1.0) + 1.2e-16 * f64::from(count);
    mass * (POLYNOMIAL_REL_ERROR + arg + rest)
}

/// The precise weight of `l` in frame `f`: the `f64` [`exp_neg`] of the `f64` scaled
/// logit.
#[inline(always)]
fn precise_weight(f: Frame, l: f32) -> f64 {
    exp_neg(f.s64(l))
}

/// The weight of logit `l` in frame `f` that a fast [`build`] sums: [`fast_weight`]'s
/// steps with [`exp_neg_f32_lean`] (multiply-adds fused when `FUSED`), whose error
/// [`error_bound`] bounds. The masses are only weighed against that bound, so they need
/// no more accuracy than it states; a pass over a whole flat row spent more time in
/// Cephes' polynomial than in the buckets' updates.
#[inline(always)]
fn lean_weight<const FUSED: bool>(f: Frame, l: f32) -> f32 {
    let d = l - f.max;
    let back = d - l;
    let e = (l - (d - back)) + (-f.max - back);
    let s = d * f.inv_t32;
    // (Clamped to `[-87, 0]`, where the lean exp's bound holds; a marked token's raw
    // value above the maximum gets weight 1, in its lane's spare slot.)
    let x = if s < 0.0 { s } else { 0.0 };
    let x = if x > -87.0 { x } else { -87.0 };
    let w = exp_neg_f32_lean::<FUSED>(x);
    // (Below -87 the weight is clamped, and so is its correction.)
    let c = if s > -87.0 { e * f.inv_t32 } else { 0.0 };
    mul_add::<FUSED>(w, c, w)
}

/// The fast weight of logit `l` in frame `f`, whose error [`error_bound`] bounds.
///
/// All in `f32`, so the loops run on full vectors. `l - max` is rounded to `d`, whose
/// exact error `e` (two-sum) goes back in to first order: e^((d + e) / T) =
/// e^(d / T) (1 + e / T). The scaling's own rounding is in `error_bound`. (A marked
/// token's raw value above the maximum gets weight 1, in its lane's spare slot.)
#[inline(always)]
pub(crate) fn fast_weight(f: Frame, l: f32) -> f32 {
    let d = l - f.max;
    let back = d - l;
    let e = (l - (d - back)) + (-f.max - back);
    let s = d * f.inv_t32;
    let w = exp_neg_f32(if s < 0.0 { s } else { 0.0 });
    // (Below -87 the weight is clamped, and so is its correction.)
    let c = if s > -87.0 { e * f.inv_t32 } else { 0.0 };
    w + w * c
}

/// [`build`] with the weight function `weight`, and with `S::ON` the second masses
/// `mass2` that `second` weighs (otherwise `mass2` is empty and untouched).
///
/// With `S::ON`, `mass2` has room for two masses per slot (`2 * SLOTS`): the pass adds
/// each token's two weights to one pair of adjacent entries, one 16-byte update instead
/// of two in separate arrays, and afterwards splits the pairs into `mass` and the first
/// [`SLOTS`] entries of `mass2`. Each bucket's sums are the same, in the same order, as
/// without the second masses.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn build_with<T: Logit, X: Weight, S: Second>(
    row: &[T],
    overlay: &Overlay,
    f: Frame,
    limit: usize,
    (count, mass): (&mut [u32], &mut [f64]),
    mass2: &mut [f64],
    weight: impl Fn(Frame, f32) -> X,
    second: S,
) {
    let count: &mut [u32; SLOTS] = count.try_into().expect("histogram size");
    let mass: &mut [f64; SLOTS] = mass.try_into().expect("histogram size");
    count.iter_mut().for_each(|c| *c = 0);
    mass.iter_mut().for_each(|m| *m = 0.0);
    let (pairs, _) = mass2.as_chunks_mut::<2>();
    let pairs: &mut [[f64; 2]] = if S::ON {
        let p: &mut [[f64; 2]; SLOTS] = pairs.try_into().expect("histogram size");
        p.fill([0.0; 2]);
        p
    } else {
        &mut []
    };
    let w = (&weight, &second);
    match overlay.marked() {
        None => scatter::<T, false, X, S>(row, &[], f, limit, count, mass, pairs, w),
        Some(marks) => scatter::<T, true, X, S>(row, marks, f, limit, count, mass, pairs, w),
    }
    if S::ON {
        // (Entry `b` of `mass2` is written after pair `b / 2 <= b` was read.)
        for b in 0..SLOTS {
            let [m, m2] = mass2[2 * b..2 * b + 2] else {
                unreachable!()
            };
            mass[b] = m;
            mass2[b] = m2;
        }
        mass2[BUCKETS..].fill(0.0);
    }
    count[BUCKETS..].fill(0);
    mass[BUCKETS..].fill(0.0);
    // The marked tokens were left out: the patched ones count with their values.
    let lim = limit as u32;
    for &(_, l) in &overlay.patch {
        let k = key(l, f);
        if k <= lim {
            count[k as usize] += 1;
            mass[k as usize] += weight(f, l).to_f64();
            if S::ON {
                mass2[k as usize] += second.weight(f, l, k).to_f64();
            }
        }
    }
    if S::ON {
        second.finish(mass2);
    }
}

/// The pass of [`build_with`]: every unmarked token of a bucket `<= limit` adds to its
/// bucket; the others go to their lane's spare slot past `BUCKETS`. With `S::ON`, the
/// weights go to `pairs` instead (of length [`SLOTS`]), with the second one beside each.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn scatter<T: Logit, const MARKS: bool, X: Weight, S: Second>(
    row: &[T],
    marks: &[u32],
    f: Frame,
    limit: usize,
    count: &mut [u32; SLOTS],
    mass: &mut [f64; SLOTS],
    pairs: &mut [[f64; 2]],
    (weight, second): (&impl Fn(Frame, f32) -> X, &S),
) {
    assert!(!S::ON || pairs.len() == SLOTS, "histogram size");
    let lim = limit as u32;
    let blocks = row.chunks_exact(BLOCK);
    let rem_start = row.len() - blocks.remainder().len();
    for (b, block) in blocks.enumerate() {
        if limit < LAST && block_beyond(block, f, lim) {
            continue;
        }
        for (ci, c) in block.chunks_exact(LANES).enumerate() {
            let v = load(c);
            let m = lane_marks_if::<MARKS>(marks, b * BLOCK + ci * LANES);
            // (The weights in their own type, widened to `f64` one by one below.)
            let mut w = [X::default(); LANES];
            let mut w2 = [S::W::default(); LANES];
            let mut k = [0u32; LANES];
            for j in 0..LANES {
                let kj = key(v[j], f);
                w[j] = weight(f, v[j]);
                if S::ON {
                    w2[j] = second.weight(f, v[j], kj);
                }
                // Tokens outside the histogram, and marked ones, go to their lane's
                // spare slot past the last bucket, so the scatter below needs no branch
                // (and, with the `min`, no bounds check). One slot per lane: when most
                // tokens are outside (a min-p cut, a dense mask), a single sink would
                // chain every update through one address.
                let out = kj > lim || (MARKS && m & BITS[j] != 0);
                k[j] = if out { (BUCKETS + j) as u32 } else { kj };
            }
            for j in 0..LANES {
                let b = (k[j] as usize).min(SLOTS - 1);
                count[b] += 1;
                if S::ON {
                    let p = &mut pairs[b];
                    p[0] += w[j].to_f64();
                    p[1] += w2[j].to_f64();
                } else {
                    mass[b] += w[j].to_f64();
                }
            }
        }
    }
    for (j, x) in row[rem_start..].iter().enumerate() {
        let l = x.to_f32();
        let k = key(l, f);
        if k <= lim && !(MARKS && is_marked(marks, rem_start + j)) {
            count[k as usize] += 1;
            if S::ON {
                let p = &mut pairs[k as usize];
                p[0] += weight(f, l).to_f64();
                p[1] += second.weight(f, l, k).to_f64();
            } else {
                mass[k as usize] += weight(f, l).to_f64();
            }
        }
    }
}

/// What [`fill`] writes for a token of a bucket below its `lo`.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Fill {
    /// The probability `w * inv_total`, with the `f64` weight [`exp_neg`] of the `f64`
    /// scaled logit (relative error below `4e-15` before the rounding to `f32`).
    Prob { inv_total: f64 },
    /// The probability `w * inv_total` in `f32`, with the weight of the fast [`build`]:
    /// [`exp_neg_f32`] of the `f32` scaled logit, the subtraction's rounding added back
    /// to first order (see [`error_bound`] for the bound).
    ProbFast { inv_total: f32 },
    /// The logprob `(l - max) / T - ln_total`, in `f64` (no `exp`).
    Log { ln_total: f64 },
}

/// Writes into `out[i]` the value `fill` gives token `i` of the adjusted row (`row`
/// under `overlay`, whose maximum is `f.max`) when its key in frame `f` is below `lo`,
/// and `none` for every other token (a key `>= lo`, `-inf`, or banned). One pass over
/// the row and the patches, nothing sorted: the tokens of the buckets `>= lo` that
/// survive are the caller's to write. `out.len()` is `row.len()`.
///
/// `frames` is `(f, g)`: the buckets are `f`'s, the values are weighed in `g` (the same
/// maximum; the draw's temperature where it differs from the cut's, else `g` is `f`).
///
/// Always inlined, so that [`simd::fill`](crate::simd::fill) can compile it for AVX2.
#[inline(always)]
pub(crate) fn fill<T: Logit>(
    row: &[T],
    overlay: &Overlay,
    frames: (Frame, Frame),
    lo: usize,
    fill: Fill,
    none: f32,
    out: &mut [f32],
) {
    match fill {
        Fill::Prob { inv_total } => fill_with(row, overlay, frames, lo, none, out, |f, l| {
            (exp_neg(f.s64(l).min(0.0)) * inv_total) as f32
        }),
        Fill::ProbFast { inv_total } => fill_with(row, overlay, frames, lo, none, out, |f, l| {
            fast_weight(f, l) * inv_total
        }),
        Fill::Log { ln_total } => fill_with(row, overlay, frames, lo, none, out, |f, l| {
            (f.s64(l) - ln_total) as f32
        }),
    }
}

#[inline(always)]
fn fill_with<T: Logit>(
    row: &[T],
    overlay: &Overlay,
    frames: (Frame, Frame),
    lo: usize,
    none: f32,
    out: &mut [f32],
    value: impl Fn(Frame, f32) -> f32,
) {
    debug_assert_eq!(row.len(), out.len());
    let (f, g) = frames;
    match overlay.marked() {
        None => fill_lanes::<T, false>(row, &[], frames, lo, none, out, &value),
        Some(marks) => fill_lanes::<T, true>(row, marks, frames, lo, none, out, &value),
    }
    // The marked tokens were written `none`: the patched ones take their values.
    for &(id, l) in &overlay.patch {
        out[id as usize] = if (key(l, f) as usize) < lo {
            value(g, l)
        } else {
            none
        };
    }
}

/// The pass of [`fill_with`]: every lane computes its value and keeps it or `none`, so
/// that the loop compiles to SIMD.
#[inline(always)]
fn fill_lanes<T: Logit, const MARKS: bool>(
    row: &[T],
    marks: &[u32],
    frames: (Frame, Frame),
    lo: usize,
    none: f32,
    out: &mut [f32],
    value: &impl Fn(Frame, f32) -> f32,
) {
    let (f, g) = frames;
    let lo = lo as u32;
    let chunks = row.chunks_exact(LANES);
    let rem_start = row.len() - chunks.remainder().len();
    let (body, tail) = out.split_at_mut(rem_start);
    for (ci, (c, o)) in chunks.zip(body.chunks_exact_mut(LANES)).enumerate() {
        let v = load(c);
        let m = lane_marks_if::<MARKS>(marks, ci * LANES);
        for j in 0..LANES {
            let x = value(g, v[j]);
            let keep = key(v[j], f) < lo && !(MARKS && m & BITS[j] != 0);
            o[j] = if keep { x } else { none };
        }
    }
    for (j, (x, o)) in row[rem_start..].iter().zip(tail).enumerate() {
        let l = x.to_f32();
        let keep = key(l, f) < lo && !(MARKS && is_marked(marks, rem_start + j));
        *o = if keep { value(g, l) } else { none };
    }
}

/// True when every entry of `block` lies in a bucket beyond `lim`, so a pass over buckets
/// up to `lim` can skip it after one comparison per entry. (An entry above the maximum
/// is a marked token's raw value: never skipped.)
#[inline(always)]
fn block_beyond<T: Logit>(block: &[T], f: Frame, lim: u32) -> bool {
    let mut m = [f32::NEG_INFINITY; LANES];
    for c in block.chunks_exact(LANES) {
        let v = load(c);
        for j in 0..LANES {
            m[j] = if v[j] > m[j] { v[j] } else { m[j] };
        }
    }
    let top = crate::adjust::lanes_max(&m);
    top <= f.max && key(top, f) > lim
}

/// Writes the tokens of buckets `lo..=hi` of the adjusted row into `out`, sorted by
/// [`order`](crate::order::order). Two comparisons per entry with the bounds of [`Frame::interval`] leave
/// only the entries near those buckets for the key. Gives up, returning false, once more
/// than about `cap` tokens were found (`out` is then incomplete and unsorted).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn collect<T: Logit>(
    row: &[T],
    overlay: &Overlay,
    f: Frame,
    lo: usize,
    hi: usize,
    cap: usize,
    out: &mut Vec<(f32, TokenId)>,
    keys: &mut Vec<u64>,
) -> bool {
    out.clear();
    let full = match overlay.marked() {
        None => gather::<T, false>(row, &[], f, lo, hi, cap, out),
        Some(marks) => gather::<T, true>(row, marks, f, lo, hi, cap, out),
    };
    if full {
        finish_collect(overlay, f, (lo, hi), out, keys);
    }
    full
}

/// The end of [`collect`], once the row's unmarked tokens of buckets `lo..=hi` are in
/// `out`: adds the patches of those buckets and sorts `out` by [`order`](crate::order::order)
/// ([`order::sort`](crate::order::sort), through `keys`).
pub(crate) fn finish_collect(
    overlay: &Overlay,
    f: Frame,
    (lo, hi): (usize, usize),
    out: &mut Vec<(f32, TokenId)>,
    keys: &mut Vec<u64>,
) {
    for &(id, l) in &overlay.patch {
        if (lo..=hi).contains(&(key(l, f) as usize)) {
            out.push((l, id));
        }
    }
    crate::order::sort(out, keys);
}

/// The pass of [`collect`]: the unmarked tokens of buckets `lo..=hi`, unsorted; false
/// once more than about `cap` were found.
#[inline(always)]
fn gather<T: Logit, const MARKS: bool>(
    row: &[T],
    marks: &[u32],
    f: Frame,
    lo: usize,
    hi: usize,
    cap: usize,
    out: &mut Vec<(f32, TokenId)>,
) -> bool {
    let (a, z) = f.interval(lo, hi);
    let (lo, hi) = (lo as u32, hi as u32);
    let blocks = row.chunks_exact(BLOCK);
    let rem_start = row.len() - blocks.remainder().len();
    for (b, block) in blocks.enumerate() {
        for (ci, c) in block.chunks_exact(LANES).enumerate() {
            let v = load(c);
            let base = b * BLOCK + ci * LANES;
            // The entries within the interval's bounds; their keys decide.
            let mut near = [false; LANES];
            for j in 0..LANES {
                near[j] = (v[j] >= a) & (v[j] <= z);
            }
            if near.iter().any(|&x| x) {
                let m = lane_marks_if::<MARKS>(marks, base);
                for j in 0..LANES {
                    let k = key(v[j], f);
                    if near[j] && m & BITS[j] == 0 && k >= lo && k <= hi {
                        out.push((v[j], (base + j) as TokenId));
                    }
                }
            }
        }
        if out.len() > cap {
            return false;
        }
    }
    for (j, x) in row[rem_start..].iter().enumerate() {
        let l = x.to_f32();
        let i = rem_start + j;
        if (lo..=hi).contains(&key(l, f)) && !(MARKS && is_marked(marks, i)) {
            out.push((l, i as TokenId));
        }
    }
    true
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exp::PORTABLE_FUSED;

    /// A test row (`-inf` at every 89th entry) and its frame at temperature `t`.
    fn framed(x: &mut u64, n: usize, scale: f32, t: f32) -> (Vec<f32>, Frame) {
        let row = crate::test_rows::uniform_row(x, n, scale, 89, 3);
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        (row, Frame::new(max, t))
    }

    /// Every bucket's fast mass lies within [`error_bound`] of its precise mass, at
    /// temperatures with and without roundings in the argument.
    #[test]
    fn fast_masses_are_within_their_bound() {
        let mut x = 0x853c_49e6_748f_ea9bu64;
        for (n, scale, t) in [
            (151_936usize, 1.0f32, 1.0f32),
            (20_000, 2.0, 0.6),
            (20_000, 3.0, 0.5),
            (5_000, 30.0, 1.7),
            (300, 0.01, 1e-3),
            (300, 1.0, 1e-40),
            (300, 3e38, 4e37),
        ] {
            let (row, f) = framed(&mut x, n, scale, t);
            let ov = Overlay::new(n);
            let (mut c1, mut m1) = (vec![0u32; SLOTS], vec![0f64; SLOTS]);
            let (mut c2, mut m2) = (vec![0u32; SLOTS], vec![0f64; SLOTS]);
            build::<_, PORTABLE_FUSED>(&row, &ov, f, LAST, false, &mut c1, &mut m1, None);
            build::<_, PORTABLE_FUSED>(&row, &ov, f, LAST, true, &mut c2, &mut m2, None);
            assert_eq!(c1, c2);
            for b in 0..BUCKETS {
                let bound = error_bound(b, c1[b], m1[b], f);
                assert!(
                    (m1[b] - m2[b]).abs() <= bound,
                    "n {n} t {t} bucket {b}: {} vs {} (bound {bound})",
                    m1[b],
                    m2[b]
                );
                if t == 1.0 && b < LAST && m2[b] > 0.0 {
                    // (The lean exp's `2.2e-7`, and its `|x|` part below `1.8e-7`.)
                    assert!(bound <= 4e-7 * m2[b] + 1e-30, "bound {bound} for {}", m2[b]);
                }
            }
        }
    }

    /// The second masses of a pass in two frames: in every bucket but the last (and there
    /// too when they are computed in `g` at the lower temperature), the fast ones lie
    /// within [`second_error_bound`] of the precise ones, and the precise ones are, up to
    /// the `f64` rounding of the sums, those of the bucket's tokens weighed in the second
    /// frame.
    #[test]
    fn second_masses_are_within_their_bound() {
        let mut x = 0x5851_f42d_4c95_7f2du64;
        for (n, scale, t, t2) in [
            (151_936usize, 1.0f32, 1.0f32, 0.8f32),
            (151_936, 1.0, 1.0, 1.25),
            (20_000, 2.0, 0.6, 0.35),
            (20_000, 3.0, 0.5, 2.0),
            (5_000, 30.0, 1.7, 0.9),
            (5_000, 30.0, 0.9, 1.7),
            (300, 0.01, 1e-3, 3e-3),
            // (Ratios beyond the polynomial's: the weights computed in `g`.)
            (20_000, 2.0, 1.0, 0.2),
            (5_000, 30.0, 1.7, 0.1),
        ] {
            let (row, f) = framed(&mut x, n, scale, t);
            let g = Frame::new(f.max, t2);
            let ov = Overlay::new(n);
            let (mut c1, mut m1, mut d1) =
                (vec![0u32; SLOTS], vec![0f64; SLOTS], vec![0f64; 2 * SLOTS]);
            let (mut c2, mut m2, mut d2) =
                (vec![0u32; SLOTS], vec![0f64; SLOTS], vec![0f64; 2 * SLOTS]);
            build::<_, PORTABLE_FUSED>(
                &row,
                &ov,
                f,
                LAST,
                false,
                &mut c1,
                &mut m1,
                Some((g, &mut d1)),
            );
            build::<_, PORTABLE_FUSED>(
                &row,
                &ov,
                f,
                LAST,
                true,
                &mut c2,
                &mut m2,
                Some((g, &mut d2)),
            );
            assert_eq!(c1, c2);
            let mut naive = vec![0f64; BUCKETS];
            for &l in &row {
                if l > f32::NEG_INFINITY {
                    naive[key(l, f) as usize] += exp_neg(g.s64(l));
                }
            }
            for b in 0..BUCKETS {
                let close = (d2[b] - naive[b]).abs() <= 1e-12 * naive[b];
                assert!(close, "t {t} -> {t2} bucket {b}: {} vs {}", d2[b], naive[b]);
                let bound = second_error_bound(b, c1[b], d1[b], f, g);
                if b == LAST {
                    // (Finite only for weights computed in `g`, at a lower temperature.)
                    let computed = !Polynomial::holds(f, g) && t2 <= t;
                    assert_eq!(bound.is_finite(), computed, "t {t} -> {t2}");
                    continue;
                }
                assert!(
                    (d1[b] - d2[b]).abs() <= bound,
                    "n {n} t {t} -> {t2} bucket {b}: {} vs {} (bound {bound})",
                    d1[b],
                    d2[b]
                );
                // (And the bound decides: far below the mass it bounds.)
                assert!(bound <= 1e-4 * d2[b] + 1e-30, "bucket {b}: bound {bound}");
            }
        }
    }

    /// [`exp_small`] is within [`POLYNOMIAL_REL_ERROR`] of `e^y` on `|y| <= 1/32`, the
    /// range [`Polynomial`] uses it on (`|δ| <= 1/128`, `r <= 4`).
    #[test]
    fn small_exponential_is_within_its_bound() {
        let lim = 1.0f32 / 32.0;
        let mut worst = 0.0f64;
        let mut check = |y: f32| {
            let exact = f64::from(y).exp();
            worst = worst.max(((f64::from(exp_small(y)) - exact) / exact).abs());
        };
        let steps = 2_000_000;
        for i in 0..=steps {
            check(-lim + 2.0 * lim * (i as f32 / steps as f32));
        }
        // Every `f32` next to the ends and to 0.
        let mut y = lim;
        for _ in 0..100_000 {
            check(y);
            check(-y);
            y = y.next_down();
        }
        let mut y = 0.0f32;
        for _ in 0..100_000 {
            check(y);
            check(-y);
            y = y.next_up();
        }
        assert!(
            worst <= POLYNOMIAL_REL_ERROR,
            "worst relative error {worst:e}"
        );
        assert!(POLYNOMIAL_MAX_RATIO / 128.0 <= f64::from(lim));
    }

    /// Tokens beyond the limit and marked tokens count in no bucket, whichever lane they
    /// sit in, and the spare slots that take them are empty after the pass.
    #[test]
    fn tokens_left_out_count_nowhere() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let n = 10_007;
        let (row, f) = framed(&mut x, n, 4.0, 0.8);
        let allowed: Vec<u32> = (0..n.div_ceil(32) as u32)
            .map(|w| w.wrapping_mul(0x9e37_79b9) ^ 0x5555_0f0f)
            .collect();
        let mut marked = Overlay::new(n);
        marked.ban_marks(&allowed);
        for (ov, is_marked) in [(Overlay::new(n), false), (marked, true)] {
            for limit in [LAST, 300, 40, 0] {
                let (mut count, mut mass) = (vec![7u32; SLOTS], vec![7.0f64; SLOTS]);
                build::<_, PORTABLE_FUSED>(&row, &ov, f, limit, false, &mut count, &mut mass, None);
                assert!(count[BUCKETS..].iter().all(|&c| c == 0), "limit {limit}");
                assert!(mass[BUCKETS..].iter().all(|&m| m == 0.0), "limit {limit}");
                let mut naive = vec![0u32; BUCKETS];
                for (i, &l) in row.iter().enumerate() {
                    let k = key(l, f) as usize;
                    let left_out = is_marked && allowed[i / 32] & (1 << (i % 32)) == 0;
                    if k <= limit && !left_out {
                        naive[k] += 1;
                    }
                }
                assert_eq!(count[..BUCKETS], naive[..], "limit {limit}");
                let kept: u32 = naive.iter().sum();
                assert!(kept > 0 && kept < n as u32 || limit == 0, "limit {limit}");
            }
        }
    }

    /// [`Frame::interval`] holds every entry of its buckets, and little else: the
    /// tokens `collect` finds through it are exactly those whose key is in range.
    #[test]
    fn the_interval_holds_its_buckets() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for (n, scale, t) in [
            (20_000usize, 2.0f32, 1.0f32),
            (20_000, 0.3, 0.6),
            (20_000, 1e6, 1.7),
            (5_000, 1e-3, 1e-5),
            (5_000, 40.0, 1e-30),
            (5_000, 1.0, 1e20),
        ] {
            let (row, f) = framed(&mut x, n, scale, t);
            for (lo, hi) in [
                (0, 0),
                (0, 3),
                (1, 1),
                (2, 2),
                (5, 9),
                (64, 64),
                (700, LAST),
                (LAST, LAST),
            ] {
                let (a, z) = f.interval(lo, hi);
                let inside: Vec<usize> = (0..n)
                    .filter(|&i| (lo..=hi).contains(&(key(row[i], f) as usize)))
                    .collect();
                for &i in &inside {
                    assert!(a <= row[i] && row[i] <= z, "t {t} [{lo}, {hi}]: {}", row[i]);
                }
                let mut got = Vec::new();
                assert!(collect(
                    &row,
                    &Overlay::new(n),
                    f,
                    lo,
                    hi,
                    usize::MAX,
                    &mut got,
                    &mut Vec::new()
                ));
                let mut ids: Vec<usize> = got.iter().map(|&(_, id)| id as usize).collect();
                ids.sort_unstable();
                assert_eq!(ids, inside, "t {t} [{lo}, {hi}]");
                if t == 1.0 && (1..LAST).contains(&lo) && hi < LAST {
                    // A bucket is 1/64 nat wide: the bounds span a 32nd of one more.
                    let span = (hi - lo) as f64 + 1.0 + 2.0 / 64.0;
                    assert!(f64::from(z) - f64::from(a) <= span / 64.0 + 1e-6);
                }
            }
        }
    }
}
