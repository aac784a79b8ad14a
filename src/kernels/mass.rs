//! The total probability mass of a row, `Z = sum exp((l - max) / T)`, in one vectorised
//! pass, with a bound on its error.
//!
//! Top-p compares a cumulative mass with `p * Z`, so it needs `Z` over the whole
//! vocabulary, while the tokens it keeps are usually a few hundred. [`fast`] computes `Z`
//! with the `f32` [`exp_neg_f32`](crate::exp::exp_neg_f32) on an `f32` argument, every
//! lane independent, so the loop compiles to full-width SIMD; [`precise`] computes it
//! with the `f64` [`exp_neg`] for the rare step where a decision falls within the fast
//! bound.
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
//! - [`exp_neg_f32`](crate::exp::exp_neg_f32) adds a relative error of at most [`F32_REL_ERROR`];
//! - below `-87` the weight is `e^-87` instead of something smaller: an absolute error
//!   of at most [`F32_ABS_ERROR`] per entry (`-inf` entries included);
//! - each lane sums four weights in `f32` (at most `3 * 2^-24` of their sum) before
//!   adding them to `f64` sums, which add below `1e-11` of `Z`.
//!
//! The pass also sums `w * |x|` (in `f32`, with a margin of 1% for its own rounding), so
//! the bound is a-posteriori and tight: tokens near the maximum, which carry the mass,
//! have small `|x|`.

use crate::adjust::{is_marked, lane_marks_if, load, BLOCK, LANES};
use crate::element::Logit;
use crate::exp::{exp_neg, exp_neg_f32_with, mul_add, F32_ABS_ERROR, F32_REL_ERROR};
use crate::mask::BITS;
use crate::TokenId;

/// `2^-24`, the unit roundoff of `f32`.
const U32: f64 = 5.960_464_477_539_063e-8;

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

/// [`fast`], and with `FUSED` its multiply-adds fused (see [`exp_neg_f32_with`]): for
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
    let none = &mut Vec::new();
    match marks {
        None => fast_with::<T, false, FUSED, false>(row, &[], max, t, ceiling, 0.0, 0, none),
        Some(marks) => {
            fast_with::<T, true, FUSED, false>(row, marks, max, t, ceiling, 0.0, 0, none)
        }
    }
}

/// [`fast`] over the whole row at temperature 1, collecting on the way the unmarked
/// entries `>= above` into `out` (unsorted, in id order) while there are at most `cap`.
/// Returns the mass, its bound, and whether `out` holds every such entry. With `FUSED`,
/// as [`fast_in`].
#[inline(always)]
pub(crate) fn fast_collect_in<T: Logit, const FUSED: bool>(
    row: &[T],
    marks: Option<&[u32]>,
    max: f32,
    above: f32,
    cap: usize,
    out: &mut Vec<(f32, TokenId)>,
) -> (f64, f64, bool) {
    out.clear();
    let inf = f32::INFINITY;
    let (z, err) = match marks {
        None => fast_with::<T, false, FUSED, true>(row, &[], max, 1.0, inf, above, cap, out),
        Some(m) => fast_with::<T, true, FUSED, true>(row, m, max, 1.0, inf, above, cap, out),
    };
    (z, err, out.len() <= cap)
}

/// [`fast_collect_in`] without fused multiply-adds.
#[inline(always)]
pub(crate) fn fast_collect<T: Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    max: f32,
    above: f32,
    cap: usize,
    out: &mut Vec<(f32, TokenId)>,
) -> (f64, f64, bool) {
    fast_collect_in::<T, false>(row, marks, max, above, cap, out)
}

/// [`fast`], with the test of the marks compiled in or out, and with `COLLECT` the
/// collection of [`fast_collect_in`] (which stops once `out` holds more than `cap`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn fast_with<T: Logit, const MARKS: bool, const FUSED: bool, const COLLECT: bool>(
    row: &[T],
    marks: &[u32],
    max: f32,
    t: f32,
    ceiling: f32,
    above: f32,
    cap: usize,
    out: &mut Vec<(f32, TokenId)>,
) -> (f64, f64) {
    let inv_t = 1.0 / t;
    // The rounding steps in the argument: the subtraction, and the product unless
    // `1 / T` is 1; `1 / T` itself unless it is exact in `f32`.
    let steps = 1.0
        + f64::from(u8::from(inv_t != 1.0))
        + f64::from(u8::from(f64::from(inv_t) != 1.0 / f64::from(t)));
    let mut z = [0.0f64; LANES];
    let mut dev = [0.0f32; LANES];
    let weight = |v: f32, skip: bool, z: &mut f32, dev: &mut f32| {
        let x = (v - max) * inv_t;
        // (A marked entry may lie above `max`: its weight is computed at 0, then dropped.)
        let x = if MARKS && x > 0.0 { 0.0 } else { x };
        let x = if x > -87.0 { x } else { -87.0 };
        let w = exp_neg_f32_with::<FUSED>(x);
        let w = if (MARKS && skip) || v > ceiling {
            0.0
        } else {
            w
        };
        *z += w;
        *dev = mul_add::<FUSED>(w, -x, *dev);
    };
    let blocks = row.chunks_exact(BLOCK);
    let rem = blocks.remainder();
    for (b, block) in blocks.enumerate() {
        // Four weights per lane are summed in `f32`, then the lanes join the `f64` sums.
        let mut zb = [0.0f32; LANES];
        for (c, chunk) in block.chunks_exact(LANES).enumerate() {
            let v = load(chunk);
            let m = lane_marks_if::<MARKS>(marks, b * BLOCK + c * LANES);
            for j in 0..LANES {
                weight(v[j], m & BITS[j] != 0, &mut zb[j], &mut dev[j]);
            }
            if COLLECT {
                let mut hit = false;
                for x in v {
                    hit |= x >= above;
                }
                if hit && out.len() <= cap {
                    let base = b * BLOCK + c * LANES;
                    for j in 0..LANES {
                        if v[j] >= above && !(MARKS && m & BITS[j] != 0) {
                            out.push((v[j], (base + j) as TokenId));
                        }
                    }
                }
            }
        }
        for j in 0..LANES {
            z[j] += f64::from(zb[j]);
        }
    }
    let base = row.len() - rem.len();
    for (j, c) in rem.iter().enumerate() {
        let mut zj = 0.0;
        let skip = MARKS && is_marked(marks, base + j);
        let v = c.to_f32();
        weight(v, skip, &mut zj, &mut dev[j % LANES]);
        z[j % LANES] += f64::from(zj);
        if COLLECT && v >= above && !skip && out.len() <= cap {
            out.push((v, (base + j) as TokenId));
        }
    }
    let z: f64 = z.iter().sum();
    let dev: f64 = dev.iter().map(|&d| f64::from(d)).sum();
    // Per weight: the exp, the sums of four in `f32` (`3 * 2^-24` at most), the `f64`
    // sums; the argument's roundings through `dev`; the clamped tail.
    let err = z * (F32_REL_ERROR + 3.01 * U32 + 1e-11)
        + 1.01 * (steps + 0.01) * U32 * dev
        + row.len() as f64 * F32_ABS_ERROR;
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
    match marks {
        None => precise_with::<T, false>(row, &[], max, t, ceiling),
        Some(marks) => precise_with::<T, true>(row, marks, max, t, ceiling),
    }
}

/// [`precise`], with the test of the marks compiled in or out. Every lane computes its
/// weight and drops it when it is left out, so that the loop compiles to SIMD.
#[inline(always)]
fn precise_with<T: Logit, const MARKS: bool>(
    row: &[T],
    marks: &[u32],
    max: f32,
    t: f32,
    ceiling: f32,
) -> f64 {
    let inv_t = 1.0 / f64::from(t);
    let max = f64::from(max);
    let mut z = [0.0f64; LANES];
    let weight = |v: f32, skip: bool| {
        let w = exp_neg(((f64::from(v) - max) * inv_t).min(0.0));
        if (MARKS && skip) || v > ceiling {
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
            z[j] += weight(v[j], m & BITS[j] != 0);
        }
    }
    for (j, x) in row[base..].iter().enumerate() {
        z[j] += weight(x.to_f32(), MARKS && is_marked(marks, base + j));
    }
    z.iter().sum()
}

/// Writes into `out[i]` the weight `exp((l_i - max) / T)` of every unmarked finite entry
/// of `row`, and 0 for the marked and `-inf` ones; returns the sum of the weights written
/// (`f32` sums of four per lane, then `f64`). `out.len()` is `row.len()`; `max` is at
/// least every unmarked entry.
///
/// The argument is computed in `f64` (within `2^-52` of the exact one), rounded to `f32`
/// for [`exp_neg_f32`](crate::exp::exp_neg_f32), and the rounding `c` is added back to
/// first order (`w + w c`, `|c| <= 2^-24 |x|`, so the neglected `c^2 / 2` is below
/// `2^-48 |x|^2`): each weight within `F32_REL_ERROR + 2^-23` (relative) of the exact
/// value for arguments above `-87`, and within [`F32_ABS_ERROR`] below. The sum adds
/// `3 * 2^-24` of itself for the `f32` sums and `1e-11` for the `f64` ones.
///
/// Always inlined, so that [`simd::weights_into`](crate::simd::weights_into) can compile
/// it for wider vectors.
#[inline(always)]
pub(crate) fn weights_into<T: Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    max: f32,
    t: f32,
    out: &mut [f32],
) -> f64 {
    match (marks, t == 1.0) {
        (None, true) => weights_with::<T, false, true>(row, &[], max, t, out),
        (None, false) => weights_with::<T, false, false>(row, &[], max, t, out),
        (Some(marks), true) => weights_with::<T, true, true>(row, marks, max, t, out),
        (Some(marks), false) => weights_with::<T, true, false>(row, marks, max, t, out),
    }
}

/// The bound on the relative error of each weight [`weights_into`] writes, for
/// arguments above `-87`.
#[cfg(test)]
const WEIGHT_REL_ERROR: f64 = F32_REL_ERROR + 2.0 * U32;

/// [`weights_into`], with the marks' test compiled in or out, and at `UNIT` (`t == 1`)
/// the argument in `f32`: the exact error of `l - max` (two sums, as in
/// [`histogram::fill`](crate::histogram::fill)) is the rounding added back.
#[inline(always)]
fn weights_with<T: Logit, const MARKS: bool, const UNIT: bool>(
    row: &[T],
    marks: &[u32],
    max32: f32,
    t: f32,
    out: &mut [f32],
) -> f64 {
    debug_assert_eq!(row.len(), out.len());
    let (max, inv_t) = (f64::from(max32), 1.0 / f64::from(t));
    let weight = |v: f32, skip: bool| {
        let (s32, c) = if UNIT {
            let d = v - max32;
            let back = d - v;
            let e = (v - (d - back)) + (-max32 - back);
            let d = if d < 0.0 { d } else { 0.0 };
            let c = if d > -87.0 { e } else { 0.0 };
            (if d > -87.0 { d } else { -87.0 }, c)
        } else {
            let s = (f64::from(v) - max) * inv_t;
            let s = if s < 0.0 { s } else { 0.0 };
            let s = if s > -87.0 { s } else { -87.0 };
            let s32 = s as f32;
            (s32, (s - f64::from(s32)) as f32)
        };
        let w = exp_neg_f32_with::<false>(s32);
        let w = w + w * c;
        if (MARKS && skip) || v == f32::NEG_INFINITY {
            0.0
        } else {
            w
        }
    };
    let mut z = [0.0f64; LANES];
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
                let w = weight(v[j], m & BITS[j] != 0);
                o[j] = w;
                zb[j] += w;
            }
        }
        for j in 0..LANES {
            z[j] += f64::from(zb[j]);
        }
    }
    let base = row.len() - rem;
    for (j, o) in tail.iter_mut().enumerate() {
        let w = weight(row[base + j].to_f32(), MARKS && is_marked(marks, base + j));
        *o = w;
        z[j % LANES] += f64::from(w);
    }
    z.iter().sum()
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

    #[test]
    fn written_weights_are_within_their_bound() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for (n, scale, t) in [
            (151_936usize, 2.0f32, 1.0f32),
            (4_099, 8.0, 0.7),
            (33, 30.0, 1.9),
        ] {
            let mut row = crate::test_rows::uniform_row(&mut x, n, scale, 101, 7);
            row[n / 2] = f32::NEG_INFINITY;
            let marks: Vec<u32> = (0..n.div_ceil(32))
                .map(|w| (w as u32).wrapping_mul(0x0101_0101))
                .collect();
            for marks in [None, Some(&marks[..])] {
                let max = (0..n)
                    .filter(|&i| !marks.is_some_and(|m| is_marked(m, i)))
                    .map(|i| row[i])
                    .fold(f32::NEG_INFINITY, f32::max);
                let mut out = vec![f32::NAN; n];
                let z = weights_into(&row, marks, max, t, &mut out);
                let mut sum = 0.0;
                for (i, (&l, &w)) in row.iter().zip(&out).enumerate() {
                    let skip = marks.is_some_and(|m| is_marked(m, i)) || l == f32::NEG_INFINITY;
                    let exact = if skip {
                        0.0
                    } else {
                        ((f64::from(l) - f64::from(max)) / f64::from(t)).exp()
                    };
                    sum += exact;
                    let err = (f64::from(w) - exact).abs();
                    assert!(
                        err <= WEIGHT_REL_ERROR * exact + F32_ABS_ERROR,
                        "{l}: {w} vs {exact}"
                    );
                }
                let bound =
                    sum * (WEIGHT_REL_ERROR + 3.01 * U32 + 1e-11) + n as f64 * F32_ABS_ERROR;
                assert!((z - sum).abs() <= bound, "{z} vs {sum}");
            }
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
