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
/// `f64::exp` found at most `8.31e-8`; the test below samples the range).
pub(crate) const F32_REL_ERROR: f64 = 1.2e-7;
/// Bound on the absolute error of [`exp_neg_f32`] below `-87`, where it returns `e^-87`.
pub(crate) const F32_ABS_ERROR: f64 = 1.7e-38;

/// `e^x` for `x <= 0` in `f32`, 4 to 8 lanes per instruction once vectorised: Cody-Waite
/// reduction and the degree-7 polynomial of Cephes' `expf`. Relative error at most
/// [`F32_REL_ERROR`] on `[-87, 0]`; below, the result is `e^-87`.
#[inline(always)]
pub(crate) fn exp_neg_f32(x: f32) -> f32 {
    exp_neg_f32_with::<false>(x)
}

/// [`exp_neg_f32`] with every `a * b + c` of the reduction and the polynomial fused into
/// one rounding when `FUSED`. Only for code compiled with the `fma` target feature (in
/// [`simd`](crate::simd)): elsewhere `f32::mul_add` is a library call. The result may
/// differ from [`exp_neg_f32`] in the last bits; the same exhaustive check of every `f32`
/// in `[-87, 0]` found at most `8.53e-8` (against `8.31e-8` unfused), within
/// [`F32_REL_ERROR`].
#[inline(always)]
pub(crate) fn exp_neg_f32_with<const FUSED: bool>(x: f32) -> f32 {
    let x = if x > MIN_ARG_F32 { x } else { MIN_ARG_F32 };
    let t = mul_add::<FUSED>(x, std::f32::consts::LOG2_E, ROUND_F32);
    let k = t - ROUND_F32;
    // `x - k ln 2`, with `ln 2` in two parts (the first exact in 9 bits).
    let r = mul_add::<FUSED>(k, 2.121_944_4e-4, mul_add::<FUSED>(k, -0.693_359_4, x));
    let mut p = 1.987_569_1e-4f32;
    p = mul_add::<FUSED>(p, r, 1.398_199_9e-3);
    p = mul_add::<FUSED>(p, r, 8.333_452e-3);
    p = mul_add::<FUSED>(p, r, 4.166_579_6e-2);
    p = mul_add::<FUSED>(p, r, 1.666_666_5e-1);
    // (Cephes' coefficient 5.0000001201e-1 rounds to 0.5 in f32.)
    p = mul_add::<FUSED>(p, r, 0.5);
    p = mul_add::<FUSED>(p * r, r, r) + 1.0;
    let ki = t.to_bits().wrapping_sub(ROUND_F32.to_bits());
    f32::from_bits(p.to_bits().wrapping_add(ki << 23))
}

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

    #[test]
    fn f32_relative_error_is_below_the_stated_bound() {
        // Unfused and fused (`f32::mul_add` is exact wherever it runs).
        for exp in [exp_neg_f32_with::<false>, exp_neg_f32_with::<true>] {
            let mut worst = 0.0f64;
            let mut x = 0.0f32;
            while x > MIN_ARG_F32 {
                let exact = f64::from(x).exp();
                let err = ((f64::from(exp(x)) - exact) / exact).abs();
                worst = worst.max(err);
                x -= 0.000_123_4;
            }
            assert!(worst < F32_REL_ERROR, "worst relative error {worst:e}");
            assert_eq!(exp(0.0), 1.0);
        }
        assert_eq!(exp_neg_f32(0.0), 1.0);
        let low = f64::from(exp_neg_f32(-1e4));
        assert!(low > 0.0 && low <= F32_ABS_ERROR);
        assert!(f64::from(exp_neg_f32(f32::NEG_INFINITY)) <= F32_ABS_ERROR);
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
