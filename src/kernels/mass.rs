//! The total probability mass of a row, `Z = sum exp((l - max) / T)`, in one vectorised
//! pass, with a bound on its error.
//!
//! Top-p compares a cumulative mass with `p * Z`, so it needs `Z` over the whole
//! vocabulary, while the tokens it keeps are usually a few hundred. [`fast`] computes `Z`
//! with the `f32` [`exp_neg_f32_lean`] on an `f32` argument, every lane independent, so
//! the loop compiles to full-width SIMD; [`precise`] computes it with the `f64`
//! [`exp_neg`] for the rare step where a decision falls within the fast bound.
//!
//! Both sum only the entries at or below a `ceiling`. Top-p weighs its candidates
//! exactly already, so it asks for the mass below them: the fast bound, proportional to
//! the mass summed, is then a bound on the background's mass only, which on a peaked row
//! is a few percent of `Z`, and a decision rarely falls within it.
//!
//! # Error bound of [`fast`]
//! For each finite entry the exact weight is `e^x` with `x = (l - max) / T <= 0`:
//! - the argument is `fl(fl(l - max) * fl(1 / T))`: at most three roundings (one when
//!   `T = 1`), so within `3.01 * 2^-24 * |x|` of `x`, which moves `e^x` by at most that
//!   relative amount;
//! - [`exp_neg_f32_lean`] adds a relative error of at most
//!   [`LEAN_REL_ERROR`]` + `[`LEAN_ARG_ERROR`]` |x|`;
//! - below `-87` the weight is `e^-87` instead of something smaller: an absolute error
//!   of at most [`F32_ABS_ERROR`] per entry (`-inf` entries included);
//! - each lane sums four weights in `f32` (at most `3 * 2^-24` of their sum) before
//!   adding them to `f64` sums, which add below `1e-11` of `Z`.
//!
//! The pass also sums `w * |x|` (in `f32`, with a margin of 1% for its own rounding), so
//! the parts proportional to `|x|` are bounded a-posteriori and tightly: tokens near the
//! maximum, which carry the mass, have small `|x|`.
//!
//! The mass is only ever weighed against its bound, so its weights need no more accuracy
//! than the bound states: the lean `exp` takes seven fused multiply-adds per entry
//! against ten for [`exp_neg_f32`], which the weights written for a caller
//! ([`weights_into`]) keep.

use crate::adjust::{is_marked, lane_marks_if, load, BLOCK, LANES};
use crate::element::Logit;
use crate::exp::{
    exp_neg, exp_neg_f32, exp_neg_f32_lean, exp_shifted_fused, mul_add, Shift, F32_ABS_ERROR,
    LEAN_ARG_ERROR, LEAN_REL_ERROR, PORTABLE_FUSED, SHIFTED_REL_ERROR,
};
use crate::mask::BITS;
use crate::TokenId;

/// `2^-24`, the unit roundoff of `f32`.
const U32: f64 = 5.960_464_477_539_063e-8;

/// Blocks per group in [`fast_with`]'s collecting loop: one bit each in a `u64`.
const GROUP_BLOCKS: usize = 64;

/// The mass of the entries of `row` at or below `ceiling`, relative to `max` (the
/// maximum of its unmarked entries, finite) at temperature `t`, with `f32` weights, and a
/// bound on `|Z - exact|` (see the module documentation). With `marks`, the tokens whose
/// bit is set count for nothing. `ceiling = +inf` sums the whole row.
///
/// The row must hold no NaN or `+inf` (checked beforehand). Always inlined, so that
/// [`simd::row_mass`](crate::simd::row_mass) can compile it for AVX2.
#[inline(always)]
pub(crate) fn fast<T: Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    max: f32,
    t: f32,
    ceiling: f32,
) -> (f64, f64) {
    fast_in::<T, false>(row, marks, max, t, ceiling)
}

/// [`fast`], and with `FUSED` its multiply-adds fused (see [`exp_neg_f32_lean`]): for
/// code compiled with the `fma` target feature. The fused `Z` may differ from [`fast`]'s
/// in the last bits, within the same bound.
#[inline(always)]
pub(crate) fn fast_in<T: Logit, const FUSED: bool>(
    row: &[T],
    marks: Option<&[u32]>,
    max: f32,
    t: f32,
    ceiling: f32,
) -> (f64, f64) {
    if !crate::histogram::f32_weights_hold(t) {
        // (Below `e^-708` a weight is `e^-708`.)
        let z = precise(row, marks, max, t, ceiling);
        return (z, z * 1e-14 + row.len() as f64 * 3.4e-308);
    }
    let none = (0.0, &mut [][..]);
    let no_split = ((0.0, 0.0, f32::NEG_INFINITY), &mut [0.0; 4]);
    match marks {
        None => fast_with::<T, false, FUSED, false, false, false>(
            row,
            &[],
            max,
            t,
            ceiling,
            none,
            no_split,
        ),
        Some(marks) => fast_with::<T, true, FUSED, false, false, false>(
            row, marks, max, t, ceiling, none, no_split,
        ),
    }
}

/// What [`fast_split_in`] found: the mass of the row at or above its floor, of its entries
/// above `hi` and of those in `(lo, hi]`, and the terms of their error bounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Split {
    /// The mass of every unmarked entry at or above the floor.
    pub(crate) total: f64,
    /// The mass of the unmarked entries `> hi`: those before the window in draw order.
    pub(crate) above: f64,
    /// The mass of the unmarked entries in `(lo, hi]`.
    pub(crate) window: f64,
    /// Bound on each weight's relative error (the exponential's, with the argument's
    /// roundings where [`Split::dev`] does not count them).
    pub(crate) rel: f64,
    /// Bound on the error the arguments' roundings put in the total (`0` where `rel`
    /// counts them): every weight's share of it is at most its `w |x|` share.
    pub(crate) dev: f64,
    /// Bound on the absolute error of the weights clamped below `e^-87`, all of them.
    pub(crate) abs: f64,
}

impl Split {
    /// [`fast`]'s bound on the error of `total`, which bounds that of each part too.
    #[cfg(test)]
    pub(crate) fn err(&self) -> f64 {
        self.total * (self.rel + SUM_ERROR) + self.dev + self.abs
    }

    /// A bound on the error of `u * total - before`, `before` the mass of the entries
    /// above a point of the draw order summed from these weights (`above`, or `above +
    /// window`): each weight's error counts once, with the factor `u - 1` when its
    /// entry is before the point and `u` otherwise, so the weights' part is
    /// `rel (u (total - before) + (1 - u) before)` (raised by `1e-5` of itself, for the
    /// computed masses in place of the exact ones) and `max(u, 1 - u)` of `dev`; the sums
    /// round each by [`SUM_ERROR`]. Against `(1 + u)` times the total's bound
    /// ([`fast`]'s) for the two sums taken apart: about a third of it at `u = 1 / 2`.
    pub(crate) fn err_against(&self, u: f64, before: f64) -> f64 {
        let weights = self.rel * (u * (self.total - before).max(0.0) + (1.0 - u) * before);
        weights * (1.0 + 1e-5)
            + u.max(1.0 - u) * self.dev
            + SUM_ERROR * (u * self.total + before)
            + self.abs
    }
}

/// [`fast`]'s mass of the entries of `row` at or above `floor` (`-inf`: the whole row, as
/// `fast` with `ceiling = +inf`), and in the same pass that of its entries above `hi` and
/// of those in the window `(lo, hi]` (entries below `floor` weighing nothing in any):
/// where a draw's target lies against the window, from one read of the row in place.
/// Each part sums a subset of the same `f32` weights in the same way (four per lane in
/// `f32`, then `f64`), so the total's bound bounds each part's error. With `FUSED` and a
/// [`Shift`] of `max` and `t`, the weights of [`exp_shifted_fused`], as the whole-row
/// weights take them: within [`SHIFTED_REL_ERROR`] each, without the arguments'
/// roundings (`w |x|`), which on a flat row are most of [`fast`]'s bound (about `4e-7`
/// of the total against `1e-6` at T 0.8). `t` must be one at which
/// [`f32_weights_hold`](crate::histogram::f32_weights_hold).
#[inline(always)]
pub(crate) fn fast_split_in<T: Logit, const FUSED: bool>(
    row: &[T],
    marks: Option<&[u32]>,
    max: f32,
    t: f32,
    window: (f32, f32),
    floor: f32,
) -> Split {
    let inf = f32::INFINITY;
    let none = (0.0, &mut [][..]);
    let mut parts = [0.0; 4];
    let split = ((window.0, window.1, floor), &mut parts);
    // (Without a floor, no comparison with it.)
    let total = match (marks, floor > f32::NEG_INFINITY) {
        (None, false) => {
            fast_with::<T, false, FUSED, false, true, false>(row, &[], max, t, inf, none, split)
        }
        (None, true) => {
            fast_with::<T, false, FUSED, false, true, true>(row, &[], max, t, inf, none, split)
        }
        (Some(m), false) => {
            fast_with::<T, true, FUSED, false, true, false>(row, m, max, t, inf, none, split)
        }
        (Some(m), true) => {
            fast_with::<T, true, FUSED, false, true, true>(row, m, max, t, inf, none, split)
        }
    }
    .0;
    let [above, window, rel, dev] = parts;
    Split {
        total,
        above,
        window,
        rel,
        dev,
        abs: row.len() as f64 * F32_ABS_ERROR,
    }
}

/// Bound on the relative error of [`fast`]'s sums: the sums of four in `f32` (`3 *
/// 2^-24` at most), then the `f64` ones.
const SUM_ERROR: f64 = 3.01 * U32 + 1e-11;

/// [`fast`], with the test of the marks compiled in or out; with `COLLECT` the blocks
/// that hold an entry `>= above` (marked or not) noted for [`collect_noted`], one bit
/// per block in `hit_words` (a word per group of [`GROUP_BLOCKS`], entries after the
/// last whole block not noted); with `SPLIT` ([`fast_split_in`]) the mass of the entries `> hi` into
/// `parts[0]` and of those in `(lo, hi]` into `parts[1]`, each summed as the total is,
/// and the terms of the bound into `parts[2]` (each weight's relative error) and
/// `parts[3]` (the arguments' roundings, as a sum); with `FLOOR` too, the entries
/// below `floor` weigh nothing (without it, `floor` is `-inf`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn fast_with<
    T: Logit,
    const MARKS: bool,
    const FUSED: bool,
    const COLLECT: bool,
    const SPLIT: bool,
    const FLOOR: bool,
>(
    row: &[T],
    marks: &[u32],
    max: f32,
    t: f32,
    ceiling: f32,
    (above, hit_words): (f32, &mut [u64]),
    ((lo, hi, floor), parts): ((f32, f32, f32), &mut [f64; 4]),
) -> (f64, f64) {
    let inv_t = 1.0 / t;
    // The rounding steps in the argument: the subtraction, and the product unless
    // `1 / T` is 1; `1 / T` itself unless it is exact in `f32`.
    let steps = 1.0
        + f64::from(u8::from(inv_t != 1.0))
        + f64::from(u8::from(f64::from(inv_t) != 1.0 / f64::from(t)));
    let mut z = [0.0f64; LANES];
    let mut dev = [0.0f32; LANES];
    let mut split = [[0.0f64; LANES]; 2];
    // The split's weights, where fused, are those of the whole-row weights
    // ([`weights_with`]): the argument never rounded whole, so the bound needs no `w |x|`.
    let shift = if SPLIT && FUSED {
        Shift::new(max, t)
    } else {
        None
    };
    let least = (-87.0 * f64::from(t)) as f32;
    let weight = |v: f32, skip: bool, z: &mut f32, dev: &mut f32| {
        if let (true, Some(s)) = (SPLIT && FUSED, &shift) {
            // Below `least` (a weight under `e^-87`, `-inf` too), 0: within
            // `F32_ABS_ERROR` of the exact weight.
            let d = v - max;
            let w = exp_shifted_fused::<false>(v, d, s);
            // (The split sums the row above its floor: no ceiling.)
            let w = if !(MARKS && skip) && d > least && (!FLOOR || v >= floor) {
                w
            } else {
                0.0
            };
            *z += w;
            return w;
        }
        let x = (v - max) * inv_t;
        // (A marked entry may lie above `max`: its weight is computed at 0, then dropped.)
        let x = if MARKS && x > 0.0 { 0.0 } else { x };
        let x = if x > -87.0 { x } else { -87.0 };
        // (The masses are weighed only against their bounds: the leaner `exp`, whose
        // error the bound below takes.)
        let w = exp_neg_f32_lean::<FUSED>(x);
        let w = if (MARKS && skip) || v > ceiling || (FLOOR && v < floor) {
            0.0
        } else {
            w
        };
        *z += w;
        // (`x <= 0`: `dev` sums `w x`, negated once at the end.)
        *dev = mul_add::<FUSED>(w, x, *dev);
        w
    };
    // A weight `w` of the value `v` added to the parts: above `hi`, and in `(lo, hi]`.
    // (Each sum taken or left as a whole, not added a zero: the same bits, since no sum
    // is `-0`, and one masked add per part where the vectors have them.)
    let part = |v: f32, w: f32, ab: &mut f32, ib: &mut f32| {
        let a = v > hi;
        let inside = v > lo && !a;
        *ab = if a { *ab + w } else { *ab };
        *ib = if inside { *ib + w } else { *ib };
    };
    let blocks = row.len() / BLOCK;
    let rem = &row[blocks * BLOCK..];
    // The blocks go by groups of `GROUP_BLOCKS`, each noting in one word which of its
    // blocks hold an entry `>= above` (from the lanes' maxima, one comparison a block).
    // The collection from those blocks is left to the caller, after the pass: so the
    // loop calls nothing (a push may grow `out`, a call across which no vector register
    // survives, and the loop would load its constants again on every block).
    for g in (0..blocks).step_by(GROUP_BLOCKS) {
        let end = blocks.min(g + GROUP_BLOCKS);
        let mut hits = 0u64;
        for b in g..end {
            let block = &row[b * BLOCK..(b + 1) * BLOCK];
            // Four weights per lane are summed in `f32`, then the lanes join the `f64`
            // sums.
            let mut zb = [0.0f32; LANES];
            let (mut ab, mut ib) = ([0.0f32; LANES], [0.0f32; LANES]);
            let mut top = [f32::NEG_INFINITY; LANES];
            for (c, chunk) in block.chunks_exact(LANES).enumerate() {
                let v = load(chunk);
                let m = lane_marks_if::<MARKS>(marks, b * BLOCK + c * LANES);
                for j in 0..LANES {
                    let w = weight(v[j], m & BITS[j] != 0, &mut zb[j], &mut dev[j]);
                    if SPLIT {
                        part(v[j], w, &mut ab[j], &mut ib[j]);
                    }
                }
                if COLLECT {
                    for j in 0..LANES {
                        top[j] = if v[j] > top[j] { v[j] } else { top[j] };
                    }
                }
            }
            if COLLECT {
                let mut hit = false;
                for x in top {
                    hit |= x >= above;
                }
                hits |= u64::from(hit) << (b - g);
            }
            for j in 0..LANES {
                z[j] += f64::from(zb[j]);
                if SPLIT {
                    split[0][j] += f64::from(ab[j]);
                    split[1][j] += f64::from(ib[j]);
                }
            }
        }
        if COLLECT {
            hit_words[g / GROUP_BLOCKS] = hits;
        }
    }
    let base = row.len() - rem.len();
    for (j, c) in rem.iter().enumerate() {
        let mut zj = 0.0;
        let skip = MARKS && is_marked(marks, base + j);
        let v = c.to_f32();
        let w = weight(v, skip, &mut zj, &mut dev[j % LANES]);
        z[j % LANES] += f64::from(zj);
        if SPLIT {
            let (mut a, mut i) = (0.0, 0.0);
            part(v, w, &mut a, &mut i);
            split[0][j % LANES] += f64::from(a);
            split[1][j % LANES] += f64::from(i);
        }
    }
    let z: f64 = z.iter().sum();
    let dev: f64 = -dev.iter().map(|&d| f64::from(d)).sum::<f64>();
    // Per weight: the exp, the sums of four in `f32` (`3 * 2^-24` at most), the `f64`
    // sums; the argument's roundings through `dev`; the clamped tail.
    let (rel, dev) = match shift {
        Some(_) => (SHIFTED_REL_ERROR, 0.0),
        None => (
            LEAN_REL_ERROR,
            1.01 * ((steps + 0.01) * U32 + LEAN_ARG_ERROR) * dev,
        ),
    };
    if SPLIT {
        let [above, inside] = split.map(|p| p.iter().sum());
        *parts = [above, inside, rel, dev];
    }
    let err = z * (rel + SUM_ERROR) + dev + row.len() as f64 * F32_ABS_ERROR;
    (z, err)
}

/// The mass of the entries of `row` at or below `ceiling`, relative to `max` at
/// temperature `t`, with the `f64` [`exp_neg`] (relative error below `4e-15`), leaving
/// out the tokens `marks` marks. Always inlined, so that
/// [`simd::row_mass_precise`](crate::simd::row_mass_precise) can compile it for AVX2.
#[inline(always)]
pub(crate) fn precise<T: Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    max: f32,
    t: f32,
    ceiling: f32,
) -> f64 {
    // (The split's second sum, the first unused.)
    precise_split(row, marks, max, t, ceiling).1
}

/// [`precise`] of the whole of `row` and of its entries at or below `ceiling`, in one
/// pass: [`precise`] is its second sum, and the first is the same weights summed in the
/// same order, so it is [`precise`] at `+inf`, bit for bit. Always inlined, so that
/// [`simd::row_mass_precise_split`](crate::simd::row_mass_precise_split) can compile it
/// for wider vectors.
#[inline(always)]
pub(crate) fn precise_split<T: Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    max: f32,
    t: f32,
    ceiling: f32,
) -> (f64, f64) {
    match marks {
        None => precise_split_with::<T, false>(row, &[], max, t, ceiling),
        Some(marks) => precise_split_with::<T, true>(row, marks, max, t, ceiling),
    }
}

/// [`precise_split`], with the test of the marks compiled in or out. Every lane computes
/// its weight and drops it when it is left out, so that the loop compiles to SIMD.
#[inline(always)]
fn precise_split_with<T: Logit, const MARKS: bool>(
    row: &[T],
    marks: &[u32],
    max: f32,
    t: f32,
    ceiling: f32,
) -> (f64, f64) {
    let inv_t = 1.0 / f64::from(t);
    let max = f64::from(max);
    let (mut z, mut below) = ([0.0f64; LANES], [0.0f64; LANES]);
    let weight = |v: f32, skip: bool| {
        let w = exp_neg(((f64::from(v) - max) * inv_t).min(0.0));
        if MARKS && skip {
            0.0
        } else {
            w
        }
    };
    let chunks = row.chunks_exact(LANES);
    let base = row.len() - chunks.remainder().len();
    for (c, chunk) in chunks.enumerate() {
        let v = load(chunk);
        let m = lane_marks_if::<MARKS>(marks, c * LANES);
        for j in 0..LANES {
            let w = weight(v[j], m & BITS[j] != 0);
            z[j] += w;
            below[j] += if v[j] > ceiling { 0.0 } else { w };
        }
    }
    for (j, x) in row[base..].iter().enumerate() {
        let v = x.to_f32();
        let w = weight(v, MARKS && is_marked(marks, base + j));
        z[j] += w;
        below[j] += if v > ceiling { 0.0 } else { w };
    }
    (z.iter().sum(), below.iter().sum())
}

/// The bound on the relative error of each weight [`weights_with`] writes, for
/// arguments above `-87`: the fused weights' ([`SHIFTED_REL_ERROR`], `2.81e-7`), above
/// the unfused ones' (`F32_REL_ERROR + 2^-23`, `2.39e-7`).
#[cfg(test)]
const WEIGHT_REL_ERROR: f64 = SHIFTED_REL_ERROR;

/// The largest rise `(top - at) / T` of a span's maximum `top` above the reference `at`
/// that [`weights_with`]'s weights may take: each weight then at most `e^64` (about
/// `6e27`, far from `f32`'s range in lane sums of four), and the `exp` within its bound
/// there too (the polynomial sees the same reduced arguments; see [`exp_neg_f32`]).
pub(crate) const RISE_MAX: f64 = 64.0;

/// Writes into `out[i]` the weight `exp((l_i - at) / T)` of every unmarked finite entry
/// of `row`, and 0 for the marked and `-inf` ones; returns the sum of the weights written
/// (`f32` sums of four per lane, then `f64`) and the maximum of the unmarked entries
/// (`-inf` if none), and adds every entry, marked or not, to the lane sums `check` (as
/// [`span_max`]). `out.len()` is `row.len()`.
///
/// The reference `at` need not be the maximum: an argument above 0 gives a weight above
/// one. The bound below holds while `(max - at) / T <= `[`RISE_MAX`]; beyond, the
/// weights are meaningless (possibly infinite or NaN) and the caller computes them again
/// against the maximum returned.
///
/// The argument is computed in `f64` (within `2^-52` of the exact one), rounded to `f32`
/// for [`exp_neg_f32`], and the rounding `c` is added back to first order (`w + w c`,
/// `|c| <= 2^-24 |x|`, so the neglected `c^2 / 2` is below `2^-48 |x|^2`): each weight
/// within `F32_REL_ERROR + 2^-23` (relative) of the exact value for arguments above
/// `-87`, and within [`F32_ABS_ERROR`] below. The sum adds
/// `3 * 2^-24` of itself for the `f32` sums and `1e-11` for the `f64` ones.
///
/// With the marks' test compiled in or out, and at `UNIT` (`t == 1`) the argument in
/// `f32`: the exact error of `l - at` (two sums, as in
/// [`histogram::fill`](crate::histogram::fill)) is the rounding added back.
///
/// With `FUSED` and a [`Shift`] (`|at / T| < 2^13`), the weights of
/// [`exp_shifted_fused`] instead: the argument never rounded whole, each weight within
/// its bound ([`SHIFTED_REL_ERROR`], `2.81e-7`: its degree-5 polynomial is
/// [`exp_neg_f32_lean`]'s) for arguments above -87 and 0 below (within
/// [`F32_ABS_ERROR`]). Six operations per entry fewer than the two-sum and the
/// correction: a whole row's probabilities (151,936 entries, AVX-512) took 48 us against
/// 54, and two multiply-adds fewer for the polynomial about 10% less again.
///
/// Without `WRITE`, nothing is written to `out`: the same sum and maximum, bit for bit,
/// for a caller that needs only the mass.
#[inline(always)]
fn weights_with<
    T: Logit,
    const MARKS: bool,
    const UNIT: bool,
    const FUSED: bool,
    const WRITE: bool,
>(
    row: &[T],
    marks: &[u32],
    (at32, shift): (f32, Option<Shift>),
    t: f32,
    out: &mut [f32],
    check: &mut [f32; LANES],
) -> (f64, f32) {
    debug_assert_eq!(row.len(), out.len());
    let (at, inv_t) = (f64::from(at32), 1.0 / f64::from(t));
    // The least `d = l - at` whose argument `d / T` is at least about -87 (at least
    // -87.68, where `exp_shifted_fused`'s `2^n` would leave the normal range).
    let least = (-87.0 * f64::from(t)) as f32;
    let weight = |v: f32, skip: bool| {
        if let (true, Some(s)) = (FUSED, &shift) {
            // Below `least` (a weight under `e^-87`, `-inf` too), 0: within
            // `F32_ABS_ERROR` of the exact weight.
            let d = v - at32;
            let w = exp_shifted_fused::<UNIT>(v, d, s);
            return if !(MARKS && skip) && d > least {
                w
            } else {
                0.0
            };
        }
        // Unfused: the argument rounded to `f32` and the rounding `c` added back.
        let (s32, c) = if UNIT {
            // (`l - at` as `d + e` exactly: a two-sum.)
            let d = v - at32;
            let back = d - v;
            let e = (v - (d - back)) + (-at32 - back);
            (d, if d > -87.0 { e } else { 0.0 })
        } else {
            let s = (f64::from(v) - at) * inv_t;
            let s = if s > -87.0 { s } else { -87.0 };
            let s32 = s as f32;
            (s32, (s - f64::from(s32)) as f32)
        };
        // (`exp_neg_f32` takes every argument below -87 to -87.)
        let w = exp_neg_f32(s32);
        let w = w + w * c;
        if (MARKS && skip) || v == f32::NEG_INFINITY {
            0.0
        } else {
            w
        }
    };
    let mut z = [0.0f64; LANES];
    let mut top = [f32::NEG_INFINITY; LANES];
    let blocks = row.chunks_exact(BLOCK);
    let rem = blocks.remainder().len();
    let (body, tail) = out.split_at_mut(row.len() - rem);
    for (b, (block, ob)) in blocks.zip(body.chunks_exact_mut(BLOCK)).enumerate() {
        let mut zb = [0.0f32; LANES];
        for (c, (chunk, o)) in block
            .chunks_exact(LANES)
            .zip(ob.chunks_exact_mut(LANES))
            .enumerate()
        {
            let v = load(chunk);
            let m = lane_marks_if::<MARKS>(marks, b * BLOCK + c * LANES);
            for j in 0..LANES {
                let skip = m & BITS[j] != 0;
                check[j] += v[j];
                let take = !(MARKS && skip) & (v[j] > top[j]);
                top[j] = if take { v[j] } else { top[j] };
                let w = weight(v[j], skip);
                if WRITE {
                    o[j] = w;
                }
                zb[j] += w;
            }
        }
        for j in 0..LANES {
            z[j] += f64::from(zb[j]);
        }
    }
    let base = row.len() - rem;
    for (j, o) in tail.iter_mut().enumerate() {
        let (v, skip) = (row[base + j].to_f32(), MARKS && is_marked(marks, base + j));
        let lane = j % LANES;
        check[lane] += v;
        if !skip && v > top[lane] {
            top[lane] = v;
        }
        let w = weight(v, skip);
        if WRITE {
            *o = w;
        }
        z[lane] += f64::from(w);
    }
    let top = top
        .iter()
        .copied()
        .fold(f32::NEG_INFINITY, |a, b| if b > a { b } else { a });
    (z.iter().sum(), top)
}

/// The most spans the one-pass (online) kernels cut a row into (see [`span_len`]).
pub(crate) const SPANS: usize = 256;

/// The length of the spans of the one-pass kernels for a row of `n` entries: a multiple
/// of [`BLOCK`] (so that a span's marks start at a word), at least 4,096 entries (16 KiB
/// of `f32`, read again from L1: shorter spans measured slower, the fixed cost of a span
/// outweighing) and long enough that the row has at most [`SPANS`].
#[inline(always)]
pub(crate) fn span_len(n: usize) -> usize {
    n.div_ceil(SPANS).next_multiple_of(BLOCK).max(64 * BLOCK)
}

/// The maximum of the entries of `span` that `marks` leaves unmarked (`-inf` if none),
/// adding every entry, marked or not, to the lane sums `check`: they turn NaN or `+inf`
/// once a NaN or a `+inf` is seen (see [`max_checked`](crate::simd::max_checked)).
/// `marks` starts at the span's first token.
///
/// Per block, the four chunks' entries are added in a tree, `(c0 + c1) + (c2 + c3)`,
/// then to the check sums, and their maximum taken in a tree too (the first of equal
/// values kept, as a running `>` keeps it): one dependent addition and one dependent
/// maximum per block rather than per chunk. A running sum per chunk held the loop to
/// the addition's latency: about 8.8 against 7.0 us over a row of 151,936 entries
/// (AVX-512, from `perf`'s shares of epsilon first).
#[inline(always)]
pub(crate) fn span_max<T: Logit, const MARKS: bool>(
    span: &[T],
    marks: &[u32],
    check: &mut [f32; LANES],
) -> f32 {
    let mut top = [f32::NEG_INFINITY; LANES];
    let blocks = span.chunks_exact(BLOCK);
    let rem = blocks.remainder();
    for (b, block) in blocks.enumerate() {
        let v: [[f32; LANES]; 4] = std::array::from_fn(|c| load(&block[c * LANES..][..LANES]));
        let m: [u32; 4] =
            std::array::from_fn(|c| lane_marks_if::<MARKS>(marks, b * BLOCK + c * LANES));
        for j in 0..LANES {
            check[j] += (v[0][j] + v[1][j]) + (v[2][j] + v[3][j]);
            // (A marked entry, and NaN, which fails the comparison: `-inf`.)
            let u = |c: usize| {
                let free = !(MARKS && m[c] & BITS[j] != 0);
                if free && v[c][j] > f32::NEG_INFINITY {
                    v[c][j]
                } else {
                    f32::NEG_INFINITY
                }
            };
            let tree = later_max(later_max(u(3), u(2)), later_max(u(1), u(0)));
            top[j] = later_max(tree, top[j]);
        }
    }
    finish_span_max::<T, MARKS>(rem, span.len() - rem.len(), marks, check, top)
}

/// `a` when `a > b`, else `b`: on equal values (`0` and `-0`), and when either is NaN,
/// the second. With the later value first, the first of equal values stays.
#[inline(always)]
fn later_max(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// The end of a span's maximum: the entries `rest` (the span's from `base` on, after
/// its whole chunks or blocks) added to the lanes' check sums and maxima, the `j`-th in
/// lane `j % LANES`, then the largest lane (the first of equal ones).
#[inline(always)]
pub(crate) fn finish_span_max<T: Logit, const MARKS: bool>(
    rest: &[T],
    base: usize,
    marks: &[u32],
    check: &mut [f32; LANES],
    mut top: [f32; LANES],
) -> f32 {
    for (j, x) in rest.iter().enumerate() {
        let v = x.to_f32();
        check[j % LANES] += v;
        if !(MARKS && is_marked(marks, base + j)) && v > top[j % LANES] {
            top[j % LANES] = v;
        }
    }
    top.iter()
        .copied()
        .fold(f32::NEG_INFINITY, |a, b| if b > a { b } else { a })
}

/// [`span_max`], writing as well into `maxima[b]` the largest entry of each whole block
/// `b` of `span`, marked or not (`-inf` for a block of `-inf` and NaN entries alone),
/// for a later collection to visit only the blocks that can hold an entry above its
/// threshold (see [`for_each_block_bits`](crate::simd::for_each_block_bits)). `maxima`
/// has at least one entry per whole block; the maximum and the check sums are
/// [`span_max`]'s.
#[inline(always)]
pub(crate) fn span_max_blocks<T: Logit, const MARKS: bool>(
    span: &[T],
    marks: &[u32],
    check: &mut [f32; LANES],
    maxima: &mut [f32],
) -> f32 {
    let mut top = [f32::NEG_INFINITY; LANES];
    let blocks = span.chunks_exact(BLOCK);
    let rem = blocks.remainder();
    for ((b, block), block_max) in blocks.enumerate().zip(maxima.iter_mut()) {
        let mut block_top = [f32::NEG_INFINITY; LANES];
        // (The four chunks added in a tree, then to the check sums, as [`span_max`].)
        let v: [[f32; LANES]; 4] = std::array::from_fn(|c| load(&block[c * LANES..][..LANES]));
        for j in 0..LANES {
            check[j] += (v[0][j] + v[1][j]) + (v[2][j] + v[3][j]);
        }
        for (c, chunk) in block.chunks_exact(LANES).enumerate() {
            let v = load(chunk);
            let m = lane_marks_if::<MARKS>(marks, b * BLOCK + c * LANES);
            for j in 0..LANES {
                let take = !(MARKS && m & BITS[j] != 0) & (v[j] > top[j]);
                top[j] = if take { v[j] } else { top[j] };
                block_top[j] = if v[j] > block_top[j] {
                    v[j]
                } else {
                    block_top[j]
                };
            }
        }
        *block_max = crate::adjust::lanes_max(&block_top);
    }
    // (The entries after the last whole block, fewer than `BLOCK`.)
    finish_span_max::<T, MARKS>(rem, span.len() - rem.len(), marks, check, top)
}

/// [`span_max_blocks`] with the marks' test chosen at run time. Always inlined, so that
/// [`simd::span_max_blocks`](crate::simd::span_max_blocks) can compile it for wider
/// vectors.
#[inline(always)]
pub(crate) fn span_max_blocks_of<T: Logit>(
    span: &[T],
    marks: Option<&[u32]>,
    check: &mut [f32; LANES],
    maxima: &mut [f32],
) -> f32 {
    match marks {
        None => span_max_blocks::<T, false>(span, &[], check, maxima),
        Some(m) => span_max_blocks::<T, true>(span, m, check, maxima),
    }
}

/// The factor `exp((old - new) / T)` that takes a sum relative to a running maximum
/// `old` to one relative to a larger `new`, in `f64`, and the relative error of
/// multiplying a sum by it: the argument's two roundings (`2.01 * 2^-53 * a` with
/// `a = (new - old) / T`, which moves the factor by `e^{2.01 * 2^-53 a}`), `std`'s `exp`
/// (within an ulp, `2^-52`) and the product (`2^-53`). The factor is 0 beyond
/// `a = 746`: a sum of `n` weights at most 1 then loses below `n * 1e-323`, which the
/// caller adds.
#[inline(always)]
pub(crate) fn rescale(old: f32, new: f32, t: f32) -> (f64, f64) {
    let a = (f64::from(new) - f64::from(old)) / f64::from(t);
    if a > 746.0 {
        return (0.0, 0.0);
    }
    ((-a).exp(), (3.02 * a + 3.01) * U64)
}

/// `2^-53`, the unit roundoff of `f64`.
const U64: f64 = 1.110_223_024_625_156_5e-16;

/// What a one-pass kernel found: the maximum of the unmarked entries (`-inf` if none),
/// the mass relative to it, a bound on the mass's error, and whether the row may hold a
/// NaN or a `+inf` (the caller then runs the row's exact check, which reports it or
/// clears a finite sum that overflowed).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Online {
    pub(crate) max: f32,
    pub(crate) z: f64,
    pub(crate) err: f64,
    pub(crate) bad: bool,
}

/// [`weights_with`] for the whole of `row` (see there for the bound), on the portable
/// code: fused as [`PORTABLE_FUSED`] says.
#[inline(always)]
pub(crate) fn weights_into<T: Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    at: f32,
    t: f32,
    out: &mut [f32],
    check: &mut [f32; LANES],
) -> (f64, f32) {
    weights_into_in::<T, PORTABLE_FUSED, true>(row, marks, at, t, out, check)
}

/// [`weights_with`] for the whole of `row`, with [`exp_shifted_fused`]'s fused
/// multiply-adds when `FUSED` (for code compiled with the `fma` target feature, or where
/// [`PORTABLE_FUSED`] holds) and `|at / T| < 2^13`, else unfused. Fused or not, the
/// bound is the same; the fused weights are the same bits on every CPU that fuses.
/// Without `WRITE`, nothing is written to `out`: the same sum and maximum, bit for bit,
/// for the logprobs, which need only the mass `Z`. Always inlined, so that
/// [`simd::weights_into`](crate::simd::weights_into) and
/// [`simd::weights_sum`](crate::simd::weights_sum) can compile it for wider vectors.
#[inline(always)]
pub(crate) fn weights_into_in<T: Logit, const FUSED: bool, const WRITE: bool>(
    row: &[T],
    marks: Option<&[u32]>,
    at: f32,
    t: f32,
    out: &mut [f32],
    check: &mut [f32; LANES],
) -> (f64, f32) {
    // (Fused where `at / T` is small enough for `Shift`; otherwise, as everywhere, the
    // unfused weights.)
    let (r, o, c) = (row, out, check);
    let shift = if FUSED { Shift::new(at, t) } else { None };
    let at = (at, shift);
    match (marks, t == 1.0) {
        (None, true) => weights_with::<T, false, true, FUSED, WRITE>(r, &[], at, t, o, c),
        (None, false) => weights_with::<T, false, false, FUSED, WRITE>(r, &[], at, t, o, c),
        (Some(m), true) => weights_with::<T, true, true, FUSED, WRITE>(r, m, at, t, o, c),
        (Some(m), false) => weights_with::<T, true, false, FUSED, WRITE>(r, m, at, t, o, c),
    }
}

/// [`span_max`] with the marks' test chosen at run time. Always inlined, so that
/// [`simd::span_max`](crate::simd::span_max) can compile it for wider vectors.
#[inline(always)]
pub(crate) fn span_max_of<T: Logit>(
    span: &[T],
    marks: Option<&[u32]>,
    check: &mut [f32; LANES],
) -> f32 {
    match marks {
        None => span_max::<T, false>(span, &[], check),
        Some(m) => span_max::<T, true>(span, m, check),
    }
}

/// [`fast`]'s mass of `row` at temperature 1 against `max` (summed piece by piece on a
/// row longer than [`PIECE_GROUPS`] groups, each piece within `fast`'s bound), collecting
/// after each piece's pass the unmarked entries `>= above` into `out` while it holds at
/// most `cap` (their ids offset by `first`). With `FUSED`, as [`fast_in`].
#[inline(always)]
pub(crate) fn mass_collect_in<T: Logit, const FUSED: bool>(
    row: &[T],
    marks: Option<&[u32]>,
    max: f32,
    above: f32,
    cap: usize,
    first: usize,
    out: &mut Vec<(f32, TokenId)>,
) -> (f64, f64) {
    let inf = f32::INFINITY;
    // The row in pieces of `PIECE_GROUPS` groups: each piece weighed, its blocks that
    // hold an entry `>= above` noted in `words`, then collected from.
    let mut words = [0u64; PIECE_GROUPS];
    let (mut z, mut err) = (0.0, 0.0);
    for (p, piece) in row.chunks(PIECE_GROUPS * GROUP_BLOCKS * BLOCK).enumerate() {
        let collect = (above, &mut words[..]);
        let no_split = ((0.0, 0.0, f32::NEG_INFINITY), &mut [0.0; 4]);
        let start = p * PIECE_GROUPS * GROUP_BLOCKS * BLOCK;
        let marks = span_marks(marks, start);
        let (zp, ep) = match marks {
            None => fast_with::<T, false, FUSED, true, false, false>(
                piece,
                &[],
                max,
                1.0,
                inf,
                collect,
                no_split,
            ),
            Some(m) => fast_with::<T, true, FUSED, true, false, false>(
                piece, m, max, 1.0, inf, collect, no_split,
            ),
        };
        z += zp;
        err += ep;
        collect_noted(piece, marks, above, cap, first + start, &words, out);
    }
    (z, err)
}

/// Groups per piece of [`mass_collect_in`]: the noted blocks of a piece fit one array.
const PIECE_GROUPS: usize = 16;

/// Pushes into `out` the unmarked entries `>= above` of the blocks of `row` that `words`
/// notes (bit `b % 64` of word `b / 64` for block `b`) and of the entries after its last
/// whole block, in id order (their index plus `first`), while `out` holds at most `cap`.
#[inline(always)]
fn collect_noted<T: Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    above: f32,
    cap: usize,
    first: usize,
    words: &[u64],
    out: &mut Vec<(f32, TokenId)>,
) {
    let skip = |i: usize| marks.is_some_and(|m| is_marked(m, i));
    let blocks = row.len() / BLOCK;
    for (w, &word) in words.iter().enumerate().take(blocks.div_ceil(GROUP_BLOCKS)) {
        let mut hits = word;
        // (Once `out` holds more than `cap`, nothing more joins it.)
        while hits != 0 && out.len() <= cap {
            let b = w * GROUP_BLOCKS + hits.trailing_zeros() as usize;
            hits &= hits - 1;
            for c in (b * BLOCK..(b + 1) * BLOCK).step_by(LANES) {
                let v: [f32; LANES] = load(&row[c..c + LANES]);
                if v.iter().any(|&x| x >= above) && out.len() <= cap {
                    for (j, &x) in v.iter().enumerate() {
                        if x >= above && !skip(c + j) {
                            out.push((x, (first + c + j) as TokenId));
                        }
                    }
                }
            }
        }
    }
    for (i, x) in row.iter().enumerate().skip(blocks * BLOCK) {
        let v = x.to_f32();
        if v >= above && !skip(i) && out.len() <= cap {
            out.push((v, (first + i) as TokenId));
        }
    }
}

/// [`mass_collect_in`] without fused multiply-adds.
#[inline(always)]
pub(crate) fn mass_collect<T: Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    max: f32,
    above: f32,
    cap: usize,
    first: usize,
    out: &mut Vec<(f32, TokenId)>,
) -> (f64, f64) {
    mass_collect_in::<T, false>(row, marks, max, above, cap, first, out)
}

/// The marks of the span from `start` (a multiple of [`BLOCK`]) on.
#[inline]
pub(crate) fn span_marks(marks: Option<&[u32]>, start: usize) -> Option<&[u32]> {
    marks.map(|m| &m[start / 32..])
}

/// The per-span kernels the one-pass loops call: the dispatched ones in the engine,
/// each SIMD level's copy in the tests.
pub(crate) struct SpanKernels<M, W> {
    /// [`span_max_of`].
    pub(crate) max: M,
    /// [`weights_into`] or [`mass_collect`].
    pub(crate) work: W,
}

/// [`weights_into`] without the maximum known beforehand: one pass over the row in
/// spans of [`span_len`] entries, the weights of each span written relative to a
/// reference `used[s]`, and the running sum multiplied by [`rescale`]'s factor whenever
/// the maximum rises. The reference is the running maximum of the spans before (the
/// first span with an unmarked finite entry reads its own maximum first, from L1): the
/// weights pass finds the span's maximum as it goes, and computes the span again
/// against that maximum only when it rose more than [`RISE_MAX`] (over `T`) above the
/// reference. `out[i] * exp((used[s] - max) / T)` is then entry `i`'s weight relative
/// to the row's maximum, within the bound [`weights_with`] states; `used` never
/// decreases.
///
/// `err` bounds only what the spans add to the error of the sum: at most 512 rescales
/// (one where a span is computed again, one where its maximum rises), each
/// `(3.02 a + 3.01) 2^-53` with `a <= 746`, and 256 additions of a span's sum, so below
/// `1.3e-10` of the sum; the sum of the weights written is otherwise within
/// [`weights_with`]'s bound.
///
/// The loop is scalar; each span runs the kernels `k` (on the widest vectors the CPU
/// has, through [`simd`](crate::simd)).
pub(crate) fn online_weights_into<T: Logit, M, W>(
    row: &[T],
    marks: Option<&[u32]>,
    t: f32,
    out: &mut [f32],
    used: &mut [f32; SPANS],
    k: SpanKernels<M, W>,
) -> Online
where
    M: Fn(&[T], Option<&[u32]>, &mut [f32; LANES]) -> f32,
    W: Fn(&[T], Option<&[u32]>, f32, f32, &mut [f32], &mut [f32; LANES]) -> (f64, f32),
{
    debug_assert_eq!(row.len(), out.len());
    let len = span_len(row.len());
    let mut check = [0.0f32; LANES];
    let (mut max, mut z, mut err) = (f32::NEG_INFINITY, 0.0f64, 0.0f64);
    let tiny = row.len() as f64 * 1e-323;
    // The running sum `z` and its bound, relative to `max`, taken to a higher `to`.
    let rise = |(max, z, err): (f32, f64, f64), to: f32| {
        if max == f32::NEG_INFINITY {
            return (to, z, err);
        }
        let (r, e) = rescale(max, to, t);
        (to, z * r, err * r + z * r * e + tiny)
    };
    for (s, (span, o)) in row.chunks(len).zip(out.chunks_mut(len)).enumerate() {
        let mk = span_marks(marks, s * len);
        let mut at = max;
        if at == f32::NEG_INFINITY {
            at = (k.max)(span, mk, &mut check);
            if at == f32::NEG_INFINITY {
                used[s] = at;
                o.fill(0.0);
                continue;
            }
        }
        let (mut zs, top) = (k.work)(span, mk, at, t, o, &mut check);
        if top > at && (f64::from(top) - f64::from(at)) / f64::from(t) > RISE_MAX {
            at = top;
            zs = (k.work)(span, mk, at, t, o, &mut check).0;
        }
        if at > max {
            (max, z, err) = rise((max, z, err), at);
        }
        used[s] = at;
        z += zs;
        // (The span's sum joins the running one: one more `f64` rounding.)
        err += U64 * z;
        if top > max {
            (max, z, err) = rise((max, z, err), top);
        }
    }
    let bad = check.iter().any(|&c| crate::adjust::not_finite_above(c));
    Online { max, z, err, bad }
}

/// Multiplies the entries of each span of `out` ([`span_len`] `len`, as
/// [`online_weights_into`] cuts the row) by that span's factor in `k`: each product
/// rounded once. (Memory-bound: compiled for AVX-512, it measured no faster.)
pub(crate) fn scale_spans(out: &mut [f32], k: &[f32], len: usize) {
    for (o, &k) in out.chunks_mut(len).zip(k) {
        o.iter_mut().for_each(|x| *x *= k);
    }
}

/// Writes into `out[i]` the logprob `(l_i - max) / T - ln_z` of every unmarked entry of
/// `row`, in `f64` and rounded once to `f32` (`-inf` for a `-inf` logit), and `-inf` for
/// the marked ones: [`histogram::fill`](crate::histogram::fill)'s `Fill::Log` with
/// nothing cut, without its buckets. The same operations on every level (none fused).
/// Always inlined, so that [`simd::logprobs_into`](crate::simd::logprobs_into) can
/// compile it for wider vectors.
#[inline(always)]
pub(crate) fn logprobs_into<T: Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    max: f32,
    t: f32,
    ln_z: f64,
    out: &mut [f32],
) {
    match marks {
        None => logprobs_with::<T, false>(row, &[], (max, t, ln_z), out),
        Some(m) => logprobs_with::<T, true>(row, m, (max, t, ln_z), out),
    }
}

#[inline(always)]
fn logprobs_with<T: Logit, const MARKS: bool>(
    row: &[T],
    marks: &[u32],
    (max, t, ln_z): (f32, f32, f64),
    out: &mut [f32],
) {
    debug_assert_eq!(row.len(), out.len());
    // `(l - max) / T - ln_z` as `l / T - c`, `c = max / T + ln_z`: within `2^-52` of
    // the larger of `|l / T|` and `|c|` (absolute) before the rounding to `f32`.
    let inv_t = 1.0 / f64::from(t);
    let c = f64::from(max) * inv_t + ln_z;
    // (One plain loop over the entries, then the marks over it: written per chunk of
    // lanes, the compiler vectorised across chunks with scattered stores, about six
    // times slower.)
    for (o, x) in out.iter_mut().zip(row) {
        *o = (f64::from(x.to_f32()) * inv_t - c) as f32;
    }
    if MARKS {
        for (o, &w) in out.chunks_mut(32).zip(marks) {
            for (j, o) in o.iter_mut().enumerate() {
                *o = if w & (1 << j) != 0 {
                    f32::NEG_INFINITY
                } else {
                    *o
                };
            }
        }
    }
}

/// The collection threshold of [`online_collect`] for a maximum `m`.
#[inline(always)]
pub(crate) fn collect_above(m: f32, offset: f64) -> f32 {
    ((f64::from(m) + offset) as f32).next_down()
}

/// The mass of the whole row at temperature 1 and the unmarked entries near its
/// maximum, in one pass that also finds the maximum: in spans, as
/// [`online_weights_into`], each span's mass and its bound ([`fast`]'s, at temperature
/// one) computed against the running maximum and both multiplied by [`rescale`]'s
/// factor (the bound takes the factor's own error too) when the maximum rises. The
/// entries collected are those `>= above(max)`, with
/// `above(m) = ((m + offset) as f32).next_down()` for the final maximum: each span
/// collects against its running maximum's (a lower threshold), and a rise drops what no
/// longer reaches the new one. Returns the [`Online`] result (`err` the whole bound), and
/// whether `out` holds every such entry, in id order (false when there are more than
/// `cap`, or when lower running thresholds took more than `4 cap` on the way, after
/// which `out` is left empty and the rest of the pass collects nothing).
pub(crate) fn online_collect<T: Logit, M, W>(
    row: &[T],
    marks: Option<&[u32]>,
    offset: f64,
    cap: usize,
    out: &mut Vec<(f32, TokenId)>,
    mut k: SpanKernels<M, W>,
) -> (Online, bool)
where
    M: FnMut(&[T], Option<&[u32]>, &mut [f32; LANES]) -> f32,
    W: Fn(&[T], Option<&[u32]>, f32, f32, usize, usize, &mut Vec<(f32, TokenId)>) -> (f64, f64),
{
    out.clear();
    let len = span_len(row.len());
    let mut check = [0.0f32; LANES];
    let (mut max, mut z, mut err) = (f32::NEG_INFINITY, 0.0f64, 0.0f64);
    let mut above = f32::INFINITY;
    let mut all = true;
    let tiny = row.len() as f64 * 1e-323;
    for (s, span) in row.chunks(len).enumerate() {
        let mk = span_marks(marks, s * len);
        let top = (k.max)(span, mk, &mut check);
        if top > max {
            if max > f32::NEG_INFINITY {
                let (r, e) = rescale(max, top, 1.0);
                z *= r;
                err = err * r + z * e + tiny;
            }
            max = top;
            if all {
                above = collect_above(max, offset);
                out.retain(|c| c.0 >= above);
            }
        }
        if max == f32::NEG_INFINITY {
            continue;
        }
        // (Early spans collect against a lower threshold: they may hold up to four
        // times `cap` until a rise prunes them. Beyond, the collection is given up: the
        // rest of the pass weighs the spans against an infinite threshold, which notes
        // no block, and prunes nothing.)
        let (zs, es) = (k.work)(span, mk, max, above, 4 * cap, s * len, out);
        z += zs;
        err += es + U64 * z;
        if all && out.len() > 4 * cap {
            all = false;
            above = f32::INFINITY;
            out.clear();
        }
    }
    all &= out.len() <= cap;
    let bad = check.iter().any(|&c| crate::adjust::not_finite_above(c));
    (Online { max, z, err, bad }, all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(row: &[f32], marks: Option<&[u32]>, max: f32, t: f32, ceiling: f32) -> f64 {
        row.iter()
            .enumerate()
            .filter(|&(i, &l)| l <= ceiling && !marks.is_some_and(|m| is_marked(m, i)))
            .map(|(_, &l)| ((f64::from(l) - f64::from(max)) / f64::from(t)).exp())
            .sum()
    }

    /// `row` as `f16`, the finite values clamped to its range.
    fn halves(row: &[f32]) -> Vec<half::f16> {
        let c = |l: f32| if l.is_finite() { l.clamp(-6e4, 6e4) } else { l };
        row.iter().map(|&l| half::f16::from_f32(c(l))).collect()
    }

    /// `row` as `bf16`, the finite values clamped to its range.
    fn brains(row: &[f32]) -> Vec<half::bf16> {
        let c = |l: f32| {
            if l.is_finite() {
                l.clamp(-3e38, 3e38)
            } else {
                l
            }
        };
        row.iter().map(|&l| half::bf16::from_f32(c(l))).collect()
    }

    /// [`online_weights_into`] on the portable kernels, their multiply-adds fused when
    /// `FUSED` (then bit for bit the wide copies, which `simd`'s tests check).
    fn portable<T: Logit, const FUSED: bool>(
        row: &[T],
        marks: Option<&[u32]>,
        t: f32,
        out: &mut [f32],
        used: &mut [f32; SPANS],
    ) -> Online {
        let k = SpanKernels {
            max: span_max_of::<T>,
            work: weights_into_in::<T, FUSED, true>,
        };
        online_weights_into(row, marks, t, out, used, k)
    }

    type OnlineWeights<T> = fn(&[T], Option<&[u32]>, f32, &mut [f32], &mut [f32; SPANS]) -> Online;

    /// Checks [`online_weights_into`] on `row` against a plain `f64` softmax: the
    /// maximum exactly, every weight written (scaled by its span's factor) and the sum
    /// within their bounds. Returns the sum's bound relative to the sum.
    fn check_online<T: Logit>(
        row: &[T],
        marks: Option<&[u32]>,
        t: f32,
        run: OnlineWeights<T>,
    ) -> f64 {
        let n = row.len();
        let v: Vec<f32> = row.iter().map(|x| x.to_f32()).collect();
        let max = (0..n)
            .filter(|&i| !marks.is_some_and(|m| is_marked(m, i)))
            .map(|i| v[i])
            .fold(f32::NEG_INFINITY, f32::max);
        let mut out = vec![f32::NAN; n];
        let mut used = [f32::NAN; SPANS];
        let on = run(row, marks, t, &mut out, &mut used);
        // (A finite lane sum may overflow: a false alarm, which the caller's exact check
        // clears; the results stand.)
        assert!(!on.bad || v.iter().any(|l| l.abs() > 1e30));
        assert_eq!(on.max.to_bits(), max.to_bits());
        if max == f32::NEG_INFINITY {
            assert!(out.iter().all(|&w| w == 0.0) && on.z == 0.0);
            return 0.0;
        }
        let len = span_len(n);
        assert!(n.div_ceil(len) <= SPANS);
        let scale = |l: f32| ((f64::from(l) - f64::from(max)) / f64::from(t)).exp();
        let mut sum = 0.0;
        for (i, (&l, &w)) in v.iter().zip(&out).enumerate() {
            let u = used[i / len];
            assert!(u <= max && (i < len || u >= used[i / len - 1]));
            let skip = marks.is_some_and(|m| is_marked(m, i)) || l == f32::NEG_INFINITY;
            let exact = if skip { 0.0 } else { scale(l) };
            sum += exact;
            let k = scale(u);
            let err = (f64::from(w) * k - exact).abs();
            assert!(
                err <= WEIGHT_REL_ERROR * exact + F32_ABS_ERROR + 1e-15 * exact,
                "{l}: {w} * {k} vs {exact}"
            );
        }
        let bound = sum * (WEIGHT_REL_ERROR + 3.01 * U32 + 1e-11) + n as f64 * F32_ABS_ERROR;
        assert!(
            on.err <= 1.3e-10 * on.z + n as f64 * 1e-300,
            "{} {}",
            on.err,
            on.z
        );
        assert!((on.z - sum).abs() <= bound + on.err, "{} vs {sum}", on.z);
        (bound + on.err) / sum
    }

    /// [`check_online`] on `row` as `f32`, `f16` and `bf16`, on the portable kernels
    /// unfused and fused. Returns the worst bound relative to the sum for `f32`.
    fn check_online_dtypes(row: &[f32], marks: Option<&[u32]>, t: f32) -> f64 {
        let (h, b) = (halves(row), brains(row));
        let mut worst = 0.0f64;
        worst = worst.max(check_online(row, marks, t, portable::<_, false>));
        worst = worst.max(check_online(row, marks, t, portable::<_, true>));
        check_online(&h, marks, t, portable::<_, false>);
        check_online(&h, marks, t, portable::<_, true>);
        check_online(&b, marks, t, portable::<_, false>);
        check_online(&b, marks, t, portable::<_, true>);
        worst
    }

    /// Rows that raise the maximum in every span (the most rescales), that hold their
    /// maximum in the first or the last span, and that are all `-inf` but one span.
    fn online_rows(x: &mut u64) -> Vec<(Vec<f32>, f32)> {
        let mut rows = Vec::new();
        for (n, scale, t) in [
            (151_936usize, 2.0f32, 1.0f32),
            (4_099, 8.0, 0.7),
            (33, 30.0, 1.9),
            (300_007, 0.5, 1.0),
        ] {
            let mut row = crate::test_rows::uniform_row(x, n, scale, 101, 7);
            row[n / 2] = f32::NEG_INFINITY;
            rows.push((row, t));
        }
        // Increasing: by 1e-3 (every weight in play), and by 0.7 per entry (each span's
        // maximum far above the last).
        for (step, t) in [(1e-3f32, 1.0f32), (1e-3, 0.6), (0.05, 1.0), (0.7, 1.3)] {
            let row: Vec<f32> = (0..151_936).map(|i| -80.0 + step * i as f32).collect();
            rows.push((row, t));
        }
        // Spans whose maximum rises by `RISE_MAX` over `T` exactly (weights up to `e^64`
        // against the running maximum) and by a little more (the span computed again).
        for (rise, t) in [(64.0f32, 1.0f32), (64.5, 1.0), (32.0, 0.5), (32.25, 0.5)] {
            let len = span_len(40_000);
            let row: Vec<f32> = (0..40_000)
                .map(|i| (i / len) as f32 * rise - (i % 97) as f32 * 0.37)
                .collect();
            rows.push((row, t));
        }
        let mut late: Vec<f32> = vec![f32::NEG_INFINITY; 20_000];
        late[19_000..]
            .iter_mut()
            .enumerate()
            .for_each(|(i, l)| *l = i as f32 * 1e-2);
        rows.push((late, 1.0));
        let mut huge = crate::test_rows::uniform_row(x, 9_000, 3e38, 13, 2);
        huge[8_999] = f32::MAX;
        rows.push((huge, 1.0));
        rows.push((crate::test_rows::uniform_row(x, 5_000, 1e-40, 50, 1), 0.8));
        rows.push((vec![f32::NEG_INFINITY; 3_000], 1.0));
        rows
    }

    #[test]
    fn online_weights_are_within_their_bound() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut worst = 0.0f64;
        for (row, t) in online_rows(&mut x) {
            let n = row.len();
            let marks: Vec<u32> = (0..n.div_ceil(32))
                .map(|w| (w as u32).wrapping_mul(0x0101_0101))
                .collect();
            for marks in [None, Some(&marks[..])] {
                worst = worst.max(check_online_dtypes(&row, marks, t));
            }
        }
        // The probabilities' stated bound keeps room for the sum's.
        assert!(worst < 4.7e-7, "{worst:e}");
    }

    #[test]
    fn the_online_pass_flags_nan_and_infinity() {
        for bad in [f32::NAN, f32::INFINITY] {
            let mut row = vec![0.5f32; 5_000];
            row[4_321] = bad;
            let mut out = vec![0.0; 5_000];
            let on = portable::<_, false>(&row, None, 1.0, &mut out, &mut [0.0; SPANS]);
            assert!(on.bad);
            let k = SpanKernels {
                max: span_max_of::<f32>,
                work: mass_collect::<f32>,
            };
            let (on, _) = online_collect(&row, None, -8.0, 10, &mut Vec::new(), k);
            assert!(on.bad);
        }
    }

    /// Checks [`online_collect`] against the mass of a plain `f64` sum and the
    /// entries at or above the threshold.
    fn check_online_collect<T: Logit, const FUSED: bool>(
        row: &[T],
        marks: Option<&[u32]>,
        offset: f64,
        cap: usize,
    ) {
        let v: Vec<f32> = row.iter().map(|x| x.to_f32()).collect();
        let unmarked = |i: usize| !marks.is_some_and(|m| is_marked(m, i));
        let max = (0..v.len())
            .filter(|&i| unmarked(i))
            .map(|i| v[i])
            .fold(f32::NEG_INFINITY, f32::max);
        let mut out = vec![(1.0, 7)];
        let k = SpanKernels {
            max: span_max_of::<T>,
            work: mass_collect_in::<T, FUSED>,
        };
        let (on, all) = online_collect(row, marks, offset, cap, &mut out, k);
        assert!(!on.bad || v.iter().any(|l| l.abs() > 1e30));
        assert_eq!(on.max.to_bits(), max.to_bits());
        if max == f32::NEG_INFINITY {
            assert!(on.z == 0.0 && out.is_empty() && all);
            return;
        }
        let truth = exact(&v, marks, max, 1.0, f32::INFINITY);
        assert!(
            (on.z - truth).abs() <= on.err,
            "{} vs {truth}: {}",
            on.z,
            on.err
        );
        assert!(on.err <= 1e-5 * truth + v.len() as f64 * 1e-30);
        let above = collect_above(max, offset);
        let want: Vec<(f32, TokenId)> = (0..v.len())
            .filter(|&i| unmarked(i) && v[i] >= above)
            .map(|i| (v[i], i as TokenId))
            .collect();
        if want.len() > cap {
            assert!(!all);
        }
        if all {
            assert_eq!(out, want);
        } else {
            // Given up on the way (nothing kept), or more than `cap` at the end.
            assert!(out.is_empty() || out.len() > cap);
        }
        // The collection, given up or not, leaves the sums alone.
        let mut every = Vec::new();
        let k = SpanKernels {
            max: span_max_of::<T>,
            work: mass_collect_in::<T, FUSED>,
        };
        let (whole, all) = online_collect(row, marks, offset, usize::MAX / 8, &mut every, k);
        let bits = |o: &Online| (o.max.to_bits(), o.z.to_bits(), o.err.to_bits(), o.bad);
        assert_eq!(bits(&whole), bits(&on));
        assert!(all);
        assert_eq!(every, want);
    }

    /// A NaN or a `+inf` in any span, the first or a later one, in a whole block or in
    /// the tail, marked or not: the one-pass result says the row may hold one.
    #[test]
    fn the_online_collection_sees_every_nan_and_infinity() {
        let n = 3 * span_len(151_936) + 3 * BLOCK + 5;
        let mut x = 0x0123_4567_89ab_cdefu64;
        let row = crate::test_rows::uniform_row(&mut x, n, 3.0, 1_000, 1_000);
        let marks: Vec<u32> = vec![0x0f0f_0f0f; n.div_ceil(32)];
        let k = || SpanKernels {
            max: span_max_of::<f32>,
            work: mass_collect_in::<f32, true>,
        };
        for bad in [f32::NAN, f32::INFINITY] {
            for at in [7, span_len(n) + 100, 2 * span_len(n) + 64 * 5 + 3, n - 2] {
                for marks in [None, Some(&marks[..])] {
                    let mut row = row.clone();
                    row[at] = bad;
                    let (on, _) = online_collect(&row, marks, -8.0, 100, &mut Vec::new(), k());
                    assert!(on.bad, "{bad} at {at}");
                }
            }
        }
        assert!(
            !online_collect(&row, None, -8.0, 100, &mut Vec::new(), k())
                .0
                .bad
        );
    }

    /// The collecting pass over several groups of blocks and a tail (longer than the
    /// spans of [`online_collect`] on a row of Qwen3's size), and over several pieces
    /// (a row of Qwen3's size in one call): every unmarked entry at or above the
    /// threshold, in id order; the same mass, bit for bit, as the pass that collects
    /// nothing, within its bound of the exact mass; once more than `cap` are held, a
    /// prefix of them longer than `cap`.
    #[test]
    fn the_collecting_pass_collects_across_groups_and_pieces() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for n in [3 * GROUP_BLOCKS * BLOCK + 5 * LANES + 7, 151_936] {
            let row = crate::test_rows::uniform_row(&mut x, n, 4.0, 97, 5);
            let marks: Vec<u32> = (0..n.div_ceil(32))
                .map(|w| (w as u32).wrapping_mul(0x9e37_79b9) & 0x0f0f_0f0f)
                .collect();
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            for marks in [None, Some(&marks[..])] {
                let unmarked = |i: usize| !marks.is_some_and(|m| is_marked(m, i));
                // (The same sums, bit for bit, whatever is collected.)
                let inf = f32::INFINITY;
                let bare = mass_collect(&row, marks, max, inf, 0, 9, &mut Vec::new());
                for above in [max, max - 1.0, max - 3.0, f32::NEG_INFINITY] {
                    let want: Vec<(f32, TokenId)> = (0..n)
                        .filter(|&i| unmarked(i) && row[i] >= above)
                        .map(|i| (row[i], (i + 9) as TokenId))
                        .collect();
                    for cap in [usize::MAX, want.len(), want.len() / 2, 0] {
                        let mut out = Vec::new();
                        let (z, err) = mass_collect(&row, marks, max, above, cap, 9, &mut out);
                        assert_eq!(
                            (z.to_bits(), err.to_bits()),
                            (bare.0.to_bits(), bare.1.to_bits())
                        );
                        let exact = exact(&row, marks, max, 1.0, f32::INFINITY);
                        assert!((z - exact).abs() <= err, "{n}: {z} against {exact}, {err}");
                        if want.len() <= cap {
                            assert_eq!(out, want);
                        } else {
                            assert!(out.len() > cap && want.starts_with(&out));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_online_mass_and_collection_are_within_their_bounds() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for (row, _) in online_rows(&mut x) {
            let n = row.len();
            let marks: Vec<u32> = (0..n.div_ceil(32))
                .map(|w| if w % 2 == 1 { 0x8421_0f0f } else { 0 })
                .collect();
            for marks in [None, Some(&marks[..])] {
                for (offset, cap) in [(-8.1, 4096), (-2.0, 3), (-1e3, 100)] {
                    check_online_collect::<f32, false>(&row, marks, offset, cap);
                    check_online_collect::<f32, true>(&row, marks, offset, cap);
                    let b = brains(&row);
                    check_online_collect::<half::bf16, false>(&b, marks, offset, cap);
                }
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// The span maximum (portable, dispatched, and both copies that record the blocks'
        /// maxima) is a running `>` over each lane's unmarked entries, then over the
        /// lanes, bit for bit (of `0.0` and `-0.0`, the first), NaN skipped; its check
        /// sums turn NaN or `+inf` exactly when an entry is NaN or `+inf`, and every copy
        /// sums the same check bits.
        #[test]
        fn the_span_maximum_is_a_running_comparison(
            picks in proptest::collection::vec(0usize..1_000, 0..400),
            signed_zeros in proptest::prelude::any::<bool>(),
            mark_seed in proptest::prelude::any::<u64>(),
            masked in proptest::prelude::any::<bool>(),
        ) {
            // Rows whose maximum is `0.0` or `-0.0`, with NaN and `-inf` among them; or
            // many distinct values (a maximum held by few entries), a few NaN and
            // infinities.
            const ZEROS: [f32; 6] = [0.0, -0.0, -1.5, f32::NEG_INFINITY, f32::NAN, -0.0];
            let value = |k: usize| match (signed_zeros, k) {
                (true, k) => ZEROS[k % ZEROS.len()],
                (false, 997) => f32::NAN,
                (false, 998) => f32::NEG_INFINITY,
                (false, 999) => f32::INFINITY,
                (false, k) => k as f32 * 0.01 - 5.0,
            };
            let row: Vec<f32> = picks.iter().map(|&k| value(k)).collect();
            let marks: Vec<u32> = (0..row.len().div_ceil(32))
                .map(|w| mark_seed.rotate_left(w as u32) as u32)
                .collect();
            let marks = masked.then_some(&marks[..]);
            // Per lane (entry `i` in lane `i % LANES`), a running `>`; then the largest
            // lane, the first of equal ones.
            let mut lanes = [f32::NEG_INFINITY; LANES];
            for (i, &v) in row.iter().enumerate() {
                if !marks.is_some_and(|m| is_marked(m, i)) && v > lanes[i % LANES] {
                    lanes[i % LANES] = v;
                }
            }
            let want = lanes.iter().fold(f32::NEG_INFINITY, |a, &v| if v > a { v } else { a });
            let bad = row.iter().any(|&v| crate::adjust::not_finite_above(v));
            let mut c0 = [0.0f32; LANES];
            let m0 = span_max_of(&row, marks, &mut c0);
            assert_eq!(m0.to_bits(), want.to_bits());
            assert_eq!(c0.iter().any(|&c| crate::adjust::not_finite_above(c)), bad);
            let mut maxima = vec![0.0f32; row.len() / BLOCK];
            type Copy<'a> = &'a dyn Fn(&mut [f32; LANES], &mut [f32]) -> f32;
            let copies: [Copy; 3] = [
                &|c, _| crate::simd::span_max(&row, marks, c),
                &|c, b| span_max_blocks_of(&row, marks, c, b),
                &|c, b| crate::simd::span_max_blocks(&row, marks, c, b),
            ];
            // (A NaN's sign and payload depend on the operands' order in the machine code.)
            let bits = |c: [f32; LANES]| c.map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() });
            for (i, copy) in copies.iter().enumerate() {
                let mut c = [0.0f32; LANES];
                let m = copy(&mut c, &mut maxima);
                assert_eq!(m.to_bits(), want.to_bits(), "copy {}", i);
                assert_eq!(bits(c), bits(c0), "copy {}", i);
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        #[test]
        fn online_passes_match_a_plain_f64_softmax(
            parts in proptest::collection::vec(
                (0u8..6, -60.0f32..60.0, 1usize..3_000), 1..6),
            t in proptest::prop_oneof![proptest::strategy::Just(1.0f32), 0.05f32..4.0],
            mark_seed in proptest::prelude::any::<u64>(),
            masked in proptest::prelude::any::<bool>(),
        ) {
            // Runs of constant, rising, falling, noisy, `-inf` and extreme values.
            let mut row = Vec::new();
            let mut x = mark_seed | 1;
            for (kind, base, len) in parts {
                for i in 0..len {
                    let f = i as f32 / len as f32;
                    row.push(match kind {
                        0 => base,
                        1 => base + 40.0 * f,
                        2 => base - 40.0 * f,
                        3 => crate::test_rows::uniform_row(&mut x, 1, 20.0, 7, 9)[0] + base,
                        4 => f32::NEG_INFINITY,
                        _ => if i % 2 == 0 { base * 1e36 } else { base * 1e-42 },
                    });
                }
            }
            let n = row.len();
            let marks: Vec<u32> = (0..n.div_ceil(32))
                .map(|w| (mark_seed.rotate_left(w as u32) as u32) & 0x5555_5555)
                .collect();
            let marks = masked.then_some(&marks[..]);
            check_online_dtypes(&row, marks, t);
            check_online_collect::<f32, false>(&row, marks, -8.1, 4096);
            check_online_collect::<f32, true>(&row, marks, -2.0, 50);
            check_online_collect::<half::bf16, false>(&brains(&row), marks, -8.1, 4096);
        }
    }

    #[test]
    fn the_fast_mass_is_within_its_bound_and_the_bound_is_tight() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for (n, scale, t) in [
            (151_936usize, 2.0f32, 1.0f32),
            (151_936, 0.5, 0.6),
            (4_099, 30.0, 1.7),
            (17, 3.0, 1e-3),
            (1_000, 1.0, 1e-40),
            (64, 3e38, 4e37),
            (64, 1e30, 2.0),
        ] {
            let mut row = crate::test_rows::uniform_row(&mut x, n, scale, 101, 7);
            row[n / 3] = 8.0 * scale.min(1e3);
            // Every other word of marks, but not the maximum's, which a marked entry
            // exceeds.
            let mut marks: Vec<u32> = (0..n.div_ceil(32))
                .map(|w| if w % 2 == 1 { 0x8421_0f0f } else { 0 })
                .collect();
            marks[n / 3 / 32] = 0;
            let top = marks.iter().position(|&m| m != 0).map(|w| 32 * w);
            if let Some(i) = top.filter(|&i| i < n) {
                row[i] = 9.0 * scale.min(1e3);
            }
            let max = if scale < 1e30 {
                8.0 * scale.min(1e3)
            } else {
                row.iter().copied().fold(f32::NEG_INFINITY, f32::max)
            };
            for marks in [None, Some(&marks[..])] {
                let max = match marks {
                    None => row.iter().copied().fold(f32::NEG_INFINITY, f32::max),
                    Some(_) => max,
                };
                // The whole row; the entries at or below an entry's value (ties
                // included); below the maximum by a tenth of the spread.
                let tie = row[n / 2];
                for ceiling in [f32::INFINITY, tie, max - scale.min(1e3) / 10.0] {
                    let truth = exact(&row, marks, max, t, ceiling);
                    let (z, err) = fast(&row, marks, max, t, ceiling);
                    assert!(
                        (z - truth).abs() <= err,
                        "n {n} t {t} ceiling {ceiling}: |{z} - {truth}| > {err}"
                    );
                    // (The weights clamped at `e^-87` or `e^-708` only count when
                    // everything summed lies that far below the maximum.)
                    let tiny = n as f64 * 1e-30;
                    assert!(err <= 1e-5 * truth + tiny, "bound {err} loose for {truth}");
                    let p = precise(&row, marks, max, t, ceiling);
                    let margin = 1e-13 * truth + n as f64 * 3.4e-308;
                    assert!((p - truth).abs() <= margin, "{p} vs {truth}");
                }
                // A ceiling at the maximum keeps it (weight 1), and one just below
                // leaves it out.
                let at = fast(&row, marks, max, t, max);
                let under = fast(&row, marks, max, t, max.next_down());
                let gap = at.0 - under.0;
                assert!((gap - 1.0).abs() <= at.1 + under.1, "{at:?} {under:?}");
            }
        }
    }
}
