//! A branch-free `f64` exponential for non-positive arguments, written so that loops
//! over arrays of it compile to SIMD on the default target.
//!
//! `std`'s `f64::exp` is a call into the platform's libm: exact to within an ulp, but one
//! call per token, which the compiler cannot vectorise. The sampler only ever needs
//! `exp(s)` for `s = (l - max) / T <= 0`, so this version reduces `s = k ln 2 + r` with
//! `|r| <= ln 2 / 2`, evaluates a degree-12 Taylor polynomial of `e^r` and scales by
//! `2^k` through the exponent bits.
//!
//! # Error bound
//! For `s` in `[-708, 0]` the result is within `4e-15` relative error of the exact
//! value (truncation `|r|^13 / 13! < 2e-16`, plus the rounding of the reduction and of
//! Horner's scheme, a few ulps). Below `-708` the argument is clamped, so the result is
//! `exp(-708) ~ 3.3e-308` instead of something smaller: an absolute error under
//! `3.3e-308`, irrelevant next to the weight 1 of the maximum. The unit test below
//! checks the bound against `std` over the whole range.
//!
//! [`exp_neg_f32`] is the fast `f32` counterpart (relative error below
//! [`F32_REL_ERROR`]): the histogram pass uses it first and keeps a bound on the error of
//! every sum it makes, falling back to [`exp_neg`] only when a decision falls within that
//! bound.
//!
//! Every decision the sampler takes on such a sum (which bucket a cumulative mass
//! reaches) can therefore differ from the `f64` reference only when the reference's own
//! margin is below about `1e-13` of the total.
//!
//! [`exp_neg_f32_lean`] is a cheaper `f32` exponential (a degree-5 polynomial, seven
//! fused multiply-adds against ten) for the passes whose sums are only compared with
//! their bounds: its error, within [`LEAN_REL_ERROR`]` + `[`LEAN_ARG_ERROR`]` |x|`, is in
//! theirs. The whole-row weights a caller reads ([`exp_shifted_fused`]) use its
//! polynomial behind an exact reduction.

/// `1.5 * 2^52`: adding it rounds an `f64` of magnitude `< 2^51` to an integer held in
/// the low mantissa bits.
const ROUND: f64 = 6_755_399_441_055_744.0;
const LOG2_E: f64 = std::f64::consts::LOG2_E;
/// `ln 2` split in two so that `k * LN2_HI` is exact for `|k| < 2^11`.
const LN2_HI: f64 = 6.931_471_803_691_238e-1;
const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
/// The lowest argument evaluated; below it the result is `exp(MIN_ARG)`.
pub(crate) const MIN_ARG: f64 = -708.0;

/// `e^s` for `s <= 0` (see the module documentation for the error bound).
#[inline(always)]
pub(crate) fn exp_neg(s: f64) -> f64 {
    let s = if s > MIN_ARG { s } else { MIN_ARG };
    let t = s * LOG2_E + ROUND;
    let k = t - ROUND;
    let r = (s - k * LN2_HI) - k * LN2_LO;
    // Taylor series of e^r to degree 12, Horner's scheme.
    let mut p = 1.0 / 479_001_600.0;
    p = p * r + 1.0 / 39_916_800.0;
    p = p * r + 1.0 / 3_628_800.0;
    p = p * r + 1.0 / 362_880.0;
    p = p * r + 1.0 / 40_320.0;
    p = p * r + 1.0 / 5_040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    // `t`'s low bits hold `k` (two's complement offset by ROUND's bits); shifting them
    // into the exponent field multiplies by 2^k. `k >= -1022` keeps the result normal.
    let ki = t.to_bits().wrapping_sub(ROUND.to_bits());
    f64::from_bits(p.to_bits().wrapping_add(ki << 52))
}

/// `1.5 * 2^23`, the `f32` counterpart of [`ROUND`].
const ROUND_F32: f32 = 12_582_912.0;
/// The lowest argument [`exp_neg_f32`] evaluates (`e^-87` is still a normal `f32`).
const MIN_ARG_F32: f32 = -87.0;
/// Bound on the relative error of [`exp_neg_f32`] for arguments in `[-87, 0]` (the
/// polynomial and its rounding: an exhaustive check of every `f32` in `[-87, 0]` against
/// `f64::exp` found at most `8.31e-8`; the test below samples the range), and for
/// arguments in `(0, 64]`, which the one-pass weights may take
/// ([`RISE_MAX`](crate::mass::RISE_MAX)): the same check found at most `8.20e-8`.
pub(crate) const F32_REL_ERROR: f64 = 1.2e-7;
/// Bound on the absolute error of [`exp_neg_f32`] below `-87`, where it returns `e^-87`.
pub(crate) const F32_ABS_ERROR: f64 = 1.7e-38;

/// `e^x` for `x <= 0` in `f32`, 4 to 8 lanes per instruction once vectorised: Cody-Waite
/// reduction and the degree-7 polynomial of Cephes' `expf`, unfused (the same bits on
/// every CPU). Relative error at most [`F32_REL_ERROR`] on `[-87, 0]`; below, the
/// result is `e^-87`.
#[inline(always)]
pub(crate) fn exp_neg_f32(x: f32) -> f32 {
    let x = if x > MIN_ARG_F32 { x } else { MIN_ARG_F32 };
    let t = x * std::f32::consts::LOG2_E + ROUND_F32;
    let k = t - ROUND_F32;
    // `x - k ln 2`, with `ln 2` in two parts (the first exact in 9 bits).
    let r = k * LN2_LO_F32 + (k * -LN2_HI_F32 + x);
    scale_poly(r, t)
}

/// Bound on the relative error of [`exp_neg_f32_lean`] for arguments `x` in `[-87, 0]`,
/// beside [`LEAN_ARG_ERROR`]` * |x|`: an exhaustive check of every `f32` in `[-87, 0]`
/// against `f64::exp` found at most `1.73e-7` beside `2.75e-9 |x|` fused, and `1.82e-7`
/// unfused (where the second term is not needed); the test below samples the range.
pub(crate) const LEAN_REL_ERROR: f64 = 2.2e-7;
/// The part of [`exp_neg_f32_lean`]'s relative error proportional to `|x|`, where its
/// multiply-adds are fused: `ln 2` taken as the nearest `f32` (`1.905e-9` above it), so
/// the reduced argument is off by `1.905e-9 |k|`, with `|k| <= |x| log2(e) + 1 / 2`
/// (the half in [`LEAN_REL_ERROR`]).
pub(crate) const LEAN_ARG_ERROR: f64 = 2.75e-9;

/// `e^x` for `x <= 0` with fewer operations than [`exp_neg_f32`], for passes that
/// only sum weights against a bound: the reduction in one fused multiply-add with `ln 2`
/// rounded to `f32` where `FUSED` (Cody-Waite's two parts otherwise), and a degree-5
/// polynomial `1 + r + r^2 q(r)` (`q` a minimax cubic, relative error `1.05e-7` on
/// `|r| <= ln 2 / 2`) in place of Cephes' degree 7: three multiply-adds fewer per entry,
/// fused. Within [`LEAN_REL_ERROR`]` + `[`LEAN_ARG_ERROR`]` |x|` (relative) on `[-87, 0]`;
/// below, the result is `e^-87`.
#[inline(always)]
pub(crate) fn exp_neg_f32_lean<const FUSED: bool>(x: f32) -> f32 {
    let x = if x > MIN_ARG_F32 { x } else { MIN_ARG_F32 };
    let t = mul_add::<FUSED>(x, std::f32::consts::LOG2_E, ROUND_F32);
    let k = t - ROUND_F32;
    let r = if FUSED {
        k.mul_add(-std::f32::consts::LN_2, x)
    } else {
        (x - k * LN2_HI_F32) + k * LN2_LO_F32
    };
    scale_poly_lean::<FUSED>(r, t)
}

/// [`scale_poly`] with [`exp_neg_f32_lean`]'s degree-5 polynomial: within
/// [`LEAN_POLY_ERROR`] for `|r| <= 0.3467`.
#[inline(always)]
fn scale_poly_lean<const FUSED: bool>(r: f32, t: f32) -> f32 {
    let q = mul_add::<FUSED>(mul_add::<FUSED>(LEAN_C5, r, LEAN_C4), r, LEAN_C3);
    let q = mul_add::<FUSED>(q, r, LEAN_C2);
    let p = mul_add::<FUSED>(q * r, r, r) + 1.0;
    let ki = t.to_bits().wrapping_sub(ROUND_F32.to_bits());
    f32::from_bits(p.to_bits().wrapping_add(ki << 23))
}

/// The coefficients of [`exp_neg_f32_lean`]'s cubic: `e^r - 1 - r` over `r^2`, minimax
/// for the relative error of `e^r` on `|r| <= ln 2 / 2`, rounded to `f32`.
const LEAN_C2: f32 = 0.499_992_3;
const LEAN_C3: f32 = 0.166_671_15;
const LEAN_C4: f32 = 0.041_890_114;
const LEAN_C5: f32 = 0.008_312_525;

/// `ln 2` in two parts, as Cephes' `expf` splits it: the first exact in 9 bits (so that
/// `k * LN2_HI_F32` is exact for `|k| < 2^15`), the second the rest, negated.
const LN2_HI_F32: f32 = 0.693_359_4;
const LN2_LO_F32: f32 = 2.121_944_4e-4;

/// `e^r 2^k` for the reduced argument `r` (`|r| <= ln 2 / 2`, about) and `t`, the sum
/// `k log2(e) + 1.5 * 2^23` whose low bits hold `k`: Cephes' polynomial, then `k` added
/// to the exponent.
#[inline(always)]
fn scale_poly(r: f32, t: f32) -> f32 {
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    // (Cephes' coefficient 5.0000001201e-1 rounds to 0.5 in f32.)
    p = p * r + 0.5;
    p = (p * r) * r + r + 1.0;
    let ki = t.to_bits().wrapping_sub(ROUND_F32.to_bits());
    f32::from_bits(p.to_bits().wrapping_add(ki << 23))
}

/// The error bound of [`exp_shifted_fused`] relative to `e^((l - at) / T)`: the
/// polynomial and its scaling ([`LEAN_POLY_ERROR`]) and the reduced argument's roundings
/// (four, each within `2^-24` of a value below `0.41`: below `9.8e-8`; the splits of
/// `ln 2`, `1 / T` and `at / T` add below `3e-9`), for arguments in `[-87, 64]`.
pub(crate) const SHIFTED_REL_ERROR: f64 = LEAN_POLY_ERROR + 1.01e-7;

/// Bound on the relative error of [`exp_neg_f32_lean`]'s polynomial and its scaling by
/// `2^k`, fused or not, for reduced arguments `|r| <= 0.3467` (`ln 2 / 2` and the
/// reductions' slack, below `2e-5`): an exhaustive check of every such `f32` against
/// `f64::exp` found at most `1.75e-7` (the polynomial is minimax on `ln 2 / 2`: at
/// `|r| = 0.36` it would be `3.6e-7`); the test below samples the range.
pub(crate) const LEAN_POLY_ERROR: f64 = 1.8e-7;

/// The constants of [`exp_shifted_fused`] for a reference logit `at` and a temperature
/// `T`: `1 / T` as `k + kl` (`k` the nearest `f32`, `kl` the rest), and `A = at / T` as
/// `a_hi + a_lo` (`a_hi` a multiple of `2^-9`, `a_lo` the rest).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shift {
    k_log2e: f32,
    k: f32,
    kl: f32,
    a_hi: f32,
    a_lo: f32,
}

impl Shift {
    /// The constants for `at` and `t`, or `None` when `|at / T| >= 2^13`: beyond,
    /// `a_hi + n LN2_HI` may not be exact in `f32` (24 bits from `2^14` down to `2^-9`).
    pub(crate) fn new(at: f32, t: f32) -> Option<Self> {
        let inv = 1.0 / f64::from(t);
        let a = f64::from(at) * inv;
        if a.is_nan() || a.abs() >= 8192.0 {
            return None;
        }
        let k = inv as f32;
        let a_hi = (a * 512.0).round() / 512.0;
        Some(Self {
            k_log2e: k * std::f32::consts::LOG2_E,
            k,
            kl: (inv - f64::from(k)) as f32,
            a_hi: a_hi as f32,
            a_lo: (a - a_hi) as f32,
        })
    }
}

/// `e^((l - at) / T)` for a logit `l`, `d` the `f32` difference `l - at` (rounded), and
/// the [`Shift`] of `at` and `T` (`UNIT` when `T = 1`, where `k = 1` and `kl = 0`), for
/// `(l - at) / T` in `[-87, 64]`, within `SHIFTED_REL_ERROR` (relative: the
/// polynomial's [`LEAN_POLY_ERROR`] and `1.01e-7` for the argument). Outside, the
/// result is meaningless: the caller selects another value. The polynomial is
/// [`exp_neg_f32_lean`]'s: the reduced argument lies within `ln 2 / 2 + 1.6e-5` of 0
/// (the roundings of `d`, `k` and `k log2(e)`, each within `2^-24`, move the estimate
/// of `n` by at most `3 * 2^-24 * 87 log2(e)`), where its degree 5 suffices.
///
/// The argument is never rounded whole. Its multiple `n` of `ln 2` comes from `d`; then
/// `b = a_hi + n LN2_HI` is exact, and the reduced argument
/// `r = l (k + kl) - (a_hi + a_lo) - n ln 2` is `l k - b` in one fused rounding (the
/// product exact inside it), then `l kl`, `n LN2_LO` and `-a_lo` each added in one more,
/// every value below `0.41`. Only with fused multiply-adds (code compiled with the `fma`
/// target feature, or where `f32::mul_add` is an instruction): elsewhere each would be a
/// library call.
#[inline(always)]
pub(crate) fn exp_shifted_fused<const UNIT: bool>(l: f32, d: f32, s: &Shift) -> f32 {
    // (Any `n` within about a half of `(l - at) / T / ln 2` will do: `r` is computed
    // against the one taken.)
    let t = d.mul_add(s.k_log2e, ROUND_F32);
    let n = t - ROUND_F32;
    let b = n.mul_add(LN2_HI_F32, s.a_hi);
    let r = if UNIT {
        l - b
    } else {
        l.mul_add(s.kl, l.mul_add(s.k, -b))
    };
    scale_poly_lean::<true>(n.mul_add(LN2_LO_F32, r) - s.a_lo, t)
}

/// Whether the portable code fuses the multiply-adds of the `f32` passes (the weights,
/// the row's mass, the histogram): on targets where `f32::mul_add` is one instruction
/// (AArch64, or x86-64 compiled with `fma`). Elsewhere it would be a library call, many
/// times slower than the unfused operations.
pub(crate) const PORTABLE_FUSED: bool = cfg!(any(target_arch = "aarch64", target_feature = "fma"));

/// `a * b + c`, in one rounding when `FUSED`.
#[inline(always)]
pub(crate) fn mul_add<const FUSED: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FUSED {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_error_is_below_the_stated_bound() {
        let mut worst = 0.0f64;
        let mut s = 0.0f64;
        while s > MIN_ARG {
            let exact = s.exp();
            let err = ((exp_neg(s) - exact) / exact).abs();
            worst = worst.max(err);
            s -= 0.000_731_3;
        }
        assert!(worst < 4e-15, "worst relative error {worst:e}");
        assert_eq!(exp_neg(0.0), 1.0);
        assert!(exp_neg(-1e6) > 0.0 && exp_neg(-1e6) < 4e-308);
        assert!(exp_neg(f64::NEG_INFINITY) < 4e-308);
    }

    /// Calls `each(x, e)` with the relative error `e` of `exp(x)` against `f64`'s `exp`
    /// for `x` from `top` down to -87 in steps of `1.234e-4`, then checks the ends: 1 at
    /// 0, and at most [`F32_ABS_ERROR`] (but above 0) below -87 and at `-inf`.
    fn for_each_error(exp: fn(f32) -> f32, top: f32, mut each: impl FnMut(f32, f64)) {
        let mut x = top;
        while x > MIN_ARG_F32 {
            let exact = f64::from(x).exp();
            each(x, ((f64::from(exp(x)) - exact) / exact).abs());
            x -= 0.000_123_4;
        }
        assert_eq!(exp(0.0), 1.0);
        let low = f64::from(exp(-1e4));
        assert!(low > 0.0 && low <= F32_ABS_ERROR);
        assert!(f64::from(exp(f32::NEG_INFINITY)) <= F32_ABS_ERROR);
    }

    #[test]
    fn f32_relative_error_is_below_the_stated_bound() {
        let mut worst = 0.0f64;
        // Down to -87, and up to 64 (the one-pass weights' arguments above 0).
        for_each_error(exp_neg_f32, 64.0, |_, e| worst = worst.max(e));
        assert!(worst < F32_REL_ERROR, "worst relative error {worst:e}");
    }

    /// [`exp_neg_f32_lean`], unfused and fused, against `f64`'s `exp` over `[-87, 0]`,
    /// and the bound it states is tight: the sampled worst is above 0.7 of it (about
    /// `1.65e-7`).
    #[test]
    fn lean_exp_is_within_its_bound() {
        for exp in [exp_neg_f32_lean::<false>, exp_neg_f32_lean::<true>] {
            let mut worst = 0.0f64;
            for_each_error(exp, 0.0, |x, e| {
                let part = LEAN_ARG_ERROR * f64::from(x).abs();
                assert!(e <= LEAN_REL_ERROR + part, "{x}: relative error {e:e}");
                worst = worst.max(e - part);
            });
            assert!(worst > 0.7 * LEAN_REL_ERROR, "worst {worst:e}");
        }
    }

    /// [`exp_neg_f32_lean`]'s polynomial, unfused and fused, against `f64`'s `exp` on a
    /// fine grid of reduced arguments `|r| <= 0.3467`, within [`LEAN_POLY_ERROR`] (and
    /// not loose: the worst above 0.9 of it).
    #[test]
    fn lean_polynomial_is_within_its_bound() {
        let one = ROUND_F32; // `k = 0`: no scaling
        for poly in [scale_poly_lean::<false>, scale_poly_lean::<true>] {
            let mut worst = 0.0f64;
            let mut r = -0.3467f32;
            while r <= 0.3467 {
                let exact = f64::from(r).exp();
                worst = worst.max(((f64::from(poly(r, one)) - exact) / exact).abs());
                r += 0.000_000_731;
            }
            assert!(worst < LEAN_POLY_ERROR, "worst relative error {worst:e}");
            assert!(
                worst > 0.9 * LEAN_POLY_ERROR,
                "worst relative error {worst:e}"
            );
        }
    }

    /// [`exp_shifted_fused`] against `f64`'s `exp` of the exact argument, over
    /// `[-87, 64]` at temperatures from 0.05 to 20 and at 1, for references `at` whose
    /// `at / T` runs from 0 to just inside the limit of [`Shift::new`].
    #[test]
    fn shifted_exp_is_within_its_bound() {
        for t in [1.0f32, 0.05, 0.3, 0.6, 0.7, 0.8, 1.3, 1.9, 2.5, 20.0] {
            let ats = [0.0f32, 13.37, -250.0, 4096.5, 8191.9, -8191.9].map(|a| a * t);
            let shifts = ats.map(|at| Shift::new(at, t).unwrap());
            let mut worst = 0.0f64;
            let (mut i, mut x) = (0usize, 64.0f64 * f64::from(t));
            while x / f64::from(t) > f64::from(MIN_ARG_F32) {
                let (at, s) = (ats[i % ats.len()], &shifts[i % ats.len()]);
                let l = (f64::from(at) + x) as f32;
                let exact = (f64::from(l) - f64::from(at)) / f64::from(t);
                let w = if t == 1.0 {
                    exp_shifted_fused::<true>(l, l - at, s)
                } else {
                    exp_shifted_fused::<false>(l, l - at, s)
                };
                let want = exact.exp();
                if exact > -87.0 && exact < 64.0 {
                    worst = worst.max(((f64::from(w) - want) / want).abs());
                }
                x -= 0.000_371_3 * f64::from(t);
                i += 1;
            }
            assert!(
                worst < SHIFTED_REL_ERROR,
                "T {t}: worst relative error {worst:e}"
            );
        }
        assert!(Shift::new(8192.0, 1.0).is_none() && Shift::new(-820.0, 0.1).is_none());
        assert!(Shift::new(f32::MAX, 1.0).is_none());
    }

    #[test]
    fn monotone_on_a_fine_grid() {
        let mut prev = exp_neg(0.0);
        let mut s = 0.0f64;
        for _ in 0..200_000 {
            s -= 1.0 / 1024.0;
            let e = exp_neg(s);
            assert!(e <= prev, "not monotone at {s}");
            prev = e;
        }
    }
}
