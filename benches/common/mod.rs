//! The rows and baselines shared by the `sampling` and `chain` benches: one definition of
//! the peaked and flat rows, of the read floor and of the softmax baselines, so that
//! figures from either bench are measured against the same things. The rows and the
//! floor come from `tests/mix/rows.rs`, which the `bench` example includes too.
#![allow(dead_code)]

#[path = "../../tests/mix/mod.rs"]
pub mod mix;
// Each bench uses some of these.
use mix::rows::{min_p_size, nucleus};
#[allow(unused_imports)]
pub use mix::{
    machine::Machine,
    rows::{flat, floor, peaked, peaked_from},
    Mix,
};

/// A plain softmax with std's `f32::exp`: max, exp and sum, normalise.
pub fn softmax_std(row: &[f32], out: &mut [f32]) -> f32 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f32;
    for (o, &l) in out.iter_mut().zip(row) {
        *o = (l - max).exp();
        sum += *o;
    }
    let inv = 1.0 / sum;
    out.iter_mut().for_each(|o| *o *= inv);
    out[0]
}

/// One vectorised softmax pass over the row: its maximum, then the sum of
/// `exp(l - max)`, with nothing stored. Returns the sum.
///
/// This is the least any exact full-row probability computation does (the crate's own
/// row-mass pass is this loop), so it is the baseline of the full-row stages and of the
/// full distribution. The `exp` is Cephes' `expf` (Cody-Waite reduction, degree-7
/// polynomial, relative error about `1e-7`), branch-free so that the loops vectorise.
/// Like the crate's passes it is compiled again for AVX2 and for AVX-512 (each with FMA)
/// and runs the widest the CPU has; on the default x86-64 target alone it would be
/// SSE2, 4 lanes, which would make the baseline about three times slower than what the
/// crate itself runs.
pub fn softmax_vec(row: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has the features the function is compiled for.
            return unsafe { softmax_vec_avx512(row) };
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: as above.
            return unsafe { softmax_vec_avx2(row) };
        }
    }
    softmax_pass::<false>(row)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn softmax_vec_avx512(row: &[f32]) -> f32 {
    softmax_pass::<true>(row)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn softmax_vec_avx2(row: &[f32]) -> f32 {
    softmax_pass::<true>(row)
}

#[inline(always)]
fn softmax_pass<const FUSED: bool>(row: &[f32]) -> f32 {
    const L: usize = 16;
    let chunks = row.chunks_exact(L);
    let rem = chunks.remainder();
    let mut m = [f32::NEG_INFINITY; L];
    for c in chunks.clone() {
        for j in 0..L {
            m[j] = if c[j] > m[j] { c[j] } else { m[j] };
        }
    }
    let max = rem
        .iter()
        .chain(&m)
        .copied()
        .fold(f32::NEG_INFINITY, |a, b| if b > a { b } else { a });
    let mut acc = [0.0f32; L];
    for c in chunks {
        for j in 0..L {
            acc[j] += exp_neg::<FUSED>(c[j] - max);
        }
    }
    let rem: f32 = rem.iter().map(|&l| exp_neg::<FUSED>(l - max)).sum();
    acc.iter().sum::<f32>() + rem
}

/// `a * b + c`, fused when `FUSED` (only where the `fma` feature is enabled).
#[inline(always)]
fn fma<const FUSED: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FUSED {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// `e^x` for `x <= 0` (clamped at `-87`), branch-free.
#[inline(always)]
fn exp_neg<const FUSED: bool>(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0;
    let x = if x > -87.0 { x } else { -87.0 };
    let t = fma::<FUSED>(x, std::f32::consts::LOG2_E, ROUND);
    let k = t - ROUND;
    let r = fma::<FUSED>(k, 2.121_944_4e-4, fma::<FUSED>(k, -0.693_359_4, x));
    let mut p = 1.987_569_1e-4f32;
    p = fma::<FUSED>(p, r, 1.398_199_9e-3);
    p = fma::<FUSED>(p, r, 8.333_452e-3);
    p = fma::<FUSED>(p, r, 4.166_579_6e-2);
    p = fma::<FUSED>(p, r, 1.666_666_5e-1);
    p = fma::<FUSED>(p, r, 0.5);
    p = fma::<FUSED>(p * r, r, r) + 1.0;
    let ki = t.to_bits().wrapping_sub(ROUND.to_bits());
    f32::from_bits(p.to_bits().wrapping_add(ki << 23))
}

/// What a row is, in the terms of the cuts: the size of its top-p 0.95 nucleus at
/// temperature 1 and at `t`, and the number of tokens min-p 0.05 keeps (at temperature
/// 1), computed exactly in `f64` with a sort.
pub fn row_sets(row: &[f32], t: f64) -> (usize, usize, usize) {
    (
        nucleus(row, 1.0, 0.95),
        nucleus(row, t, 0.95),
        min_p_size(row, 1.0, 0.05),
    )
}
