//! Runtime dispatch of the histogram pass to AVX2 on x86-64.
//!
//! The default x86-64 target only guarantees SSE2, 4 `f32` lanes. The histogram pass
//! ([`histogram::build`], and [`histogram::collect`] after it) spends its time in the vectorised `exp`, which runs about
//! 2.5 to 3 times faster when the same code is compiled for AVX2's 8 lanes (measured:
//! 152 us against 53 us for the exp-and-sum loop over 151,936 logits). So this module
//! compiles that one pass a second time with AVX2 enabled and picks it at run time when
//! the CPU has it.
//!
//! Both versions are the same Rust code: element-wise IEEE operations, no fused
//! multiply-add (Rust never contracts `a * b + c` on its own) and the same sequential
//! order of the scatter, so they give bit-identical counts and masses, hence identical
//! tokens. The test below checks it.
//!
//! This is the crate's only `unsafe` code: calling a `#[target_feature]` function from
//! code compiled without that feature.

#![allow(unsafe_code)]

use crate::adjust::Overlay;
use crate::element::Logit;
use crate::histogram::{self, Frame};
use crate::mass;
use crate::TokenId;

/// [`histogram::build`], on AVX2 when the CPU has it.
pub(crate) fn build<T: Logit>(
    row: &[T],
    overlay: &Overlay,
    f: Frame,
    limit: usize,
    precise: bool,
    count: &mut [u32],
    mass: &mut [f64],
) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: `build_avx2` only requires the AVX2 instructions it is compiled with,
        // and the CPU was just checked to support them.
        unsafe { build_avx2(row, overlay, f, limit, precise, count, mass) };
        return;
    }
    histogram::build(row, overlay, f, limit, precise, count, mass);
}

/// [`histogram::build`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn build_avx2<T: Logit>(
    row: &[T],
    overlay: &Overlay,
    f: Frame,
    limit: usize,
    precise: bool,
    count: &mut [u32],
    mass: &mut [f64],
) {
    histogram::build(row, overlay, f, limit, precise, count, mass);
}

/// [`histogram::collect`], on AVX2 when the CPU has it.
pub(crate) fn collect<T: Logit>(
    row: &[T],
    overlay: &Overlay,
    f: Frame,
    lo: usize,
    hi: usize,
    cap: usize,
    out: &mut Vec<(f32, TokenId)>,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: as in `build`: the CPU supports the AVX2 instructions `collect_avx2` is
        // compiled with.
        return unsafe { collect_avx2(row, overlay, f, lo, hi, cap, out) };
    }
    histogram::collect(row, overlay, f, lo, hi, cap, out)
}

/// [`histogram::collect`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn collect_avx2<T: Logit>(
    row: &[T],
    overlay: &Overlay,
    f: Frame,
    lo: usize,
    hi: usize,
    cap: usize,
    out: &mut Vec<(f32, TokenId)>,
) -> bool {
    histogram::collect(row, overlay, f, lo, hi, cap, out)
}

/// [`mass::fast`], on AVX2 when the CPU has it.
pub(crate) fn row_mass<T: Logit>(row: &[T], max: f32, t: f32) -> (f64, f64) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: as in `build`: the CPU supports the AVX2 instructions `row_mass_avx2`
        // is compiled with.
        return unsafe { row_mass_avx2(row, max, t) };
    }
    mass::fast(row, max, t)
}

/// [`mass::fast`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn row_mass_avx2<T: Logit>(row: &[T], max: f32, t: f32) -> (f64, f64) {
    mass::fast(row, max, t)
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::histogram::SLOTS;

    #[test]
    fn dispatched_and_portable_paths_are_bit_identical() {
        if !std::is_x86_feature_detected!("avx2") {
            return;
        }
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for (n, scale, t) in [
            (151_936usize, 2.0f32, 1.0f32),
            (4_097, 0.3, 0.6),
            (33, 40.0, 1.7),
        ] {
            let row: Vec<f32> = (0..n)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if i % 97 == 5 {
                        f32::NEG_INFINITY
                    } else {
                        ((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
                    }
                })
                .collect();
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let f = Frame::new(max, t);
            let ov = Overlay::new(n);
            for precise in [false, true] {
                for limit in [histogram::LAST, 40] {
                    let (mut c1, mut m1) = (vec![0u32; SLOTS], vec![0f64; SLOTS]);
                    let (mut c2, mut m2) = (vec![0u32; SLOTS], vec![0f64; SLOTS]);
                    histogram::build(&row, &ov, f, limit, precise, &mut c1, &mut m1);
                    // SAFETY: AVX2 support was checked at the top of the test.
                    unsafe { build_avx2(&row, &ov, f, limit, precise, &mut c2, &mut m2) };
                    assert_eq!(c1, c2);
                    let bits = |m: &[f64]| m.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&m1), bits(&m2), "n {n}, precise {precise}");
                    let (mut o1, mut o2) = (Vec::new(), Vec::new());
                    histogram::collect(&row, &ov, f, 3, limit, usize::MAX, &mut o1);
                    // SAFETY: AVX2 support was checked at the top of the test.
                    unsafe { collect_avx2(&row, &ov, f, 3, limit, usize::MAX, &mut o2) };
                    assert_eq!(o1, o2);
                }
            }
        }
    }
}
