//! The benchmark rows and the read floor, shared by the criterion benches
//! (`benches/common`) and the `bench` example, so that a figure from either is measured
//! on the same rows against the same floor.

use super::Mix;
use logits::half::{bf16, f16};

/// A peaked row: 36 plausible tokens 8 to 15 above an N(0, 2) background (the criterion
/// benches' `peaked` row; at 151,936 logits its 0.95 nucleus is 973 tokens).
pub fn peaked(n: usize) -> Vec<f32> {
    peaked_from(Mix(n as u64), n)
}

/// A peaked row from the generator `r`.
pub fn peaked_from(mut r: Mix, n: usize) -> Vec<f32> {
    let mut row: Vec<f32> = (0..n).map(|_| (2.0 * r.normal()) as f32).collect();
    for _ in 0..36 {
        let i = (r.next() % n as u64) as usize;
        row[i] = (8.0 + 7.0 * r.unit()) as f32;
    }
    row
}

/// A flat row: N(0, 1), where the 0.95 nucleus holds about 74% of the tokens.
pub fn flat(n: usize) -> Vec<f32> {
    flat_from(Mix(n as u64 ^ 0xF1A7), n)
}

/// A flat row from the generator `r`.
pub fn flat_from(mut r: Mix, n: usize) -> Vec<f32> {
    (0..n).map(|_| r.normal() as f32).collect()
}

/// The `k`-th row of a shape (`"peaked"` or `"flat"`): row 0 is [`peaked`] or [`flat`],
/// the others come from the seeds `7_919 k + 1` (the criterion benches' `peaked_rows`).
pub fn nth_row(shape: &str, n: usize, k: u64) -> Vec<f32> {
    match (shape, k) {
        ("flat", 0) => flat(n),
        ("flat", _) => flat_from(Mix((7_919 * k + 1) ^ 0xF1A7), n),
        (_, 0) => peaked(n),
        _ => peaked_from(Mix(7_919 * k + 1), n),
    }
}

/// The cheapest exact conversion to `f32` of each element type: `bf16` is the top half
/// of an `f32`, so a shift; `f16` goes through `half`.
pub trait Load: Copy {
    /// The element as an `f32`.
    fn load(self) -> f32;
}

impl Load for f32 {
    #[inline(always)]
    fn load(self) -> f32 {
        self
    }
}

impl Load for bf16 {
    #[inline(always)]
    fn load(self) -> f32 {
        f32::from_bits(u32::from(self.to_bits()) << 16)
    }
}

impl Load for f16 {
    #[inline(always)]
    fn load(self) -> f32 {
        self.to_f32()
    }
}

/// The read floor: the sum of the row, each element converted to `f32`, in 16
/// independent lanes so that the loop vectorises. One read of the row; no sampler can
/// read and convert its row faster.
pub fn floor<T: Load>(row: &[T]) -> f32 {
    let mut acc = [0.0f32; 16];
    let chunks = row.chunks_exact(16);
    let rem: f32 = chunks.remainder().iter().map(|x| x.load()).sum();
    for c in chunks {
        for j in 0..16 {
            acc[j] += c[j].load();
        }
    }
    acc.iter().sum::<f32>() + rem
}

/// The size of the row's top-p `p` nucleus at temperature `t` (before any other cut),
/// computed exactly in `f64` with a sort: the fewest most probable tokens whose mass
/// reaches `p`. `p >= 1` keeps every token of nonzero weight.
pub fn nucleus(row: &[f32], t: f64, p: f64) -> usize {
    let max = f64::from(row.iter().copied().fold(f32::NEG_INFINITY, f32::max));
    let mut w: Vec<f64> = row
        .iter()
        .map(|&l| ((f64::from(l) - max) / t).exp())
        .collect();
    if p >= 1.0 {
        return w.iter().filter(|&&x| x > 0.0).count();
    }
    let z: f64 = w.iter().sum();
    w.sort_by(|a, b| b.total_cmp(a));
    let mut cum = 0.0;
    1 + w
        .iter()
        .position(|&x| {
            cum += x;
            cum >= p * z
        })
        .unwrap_or(w.len() - 1)
}

/// The number of tokens min-p `p` keeps at temperature `t` (before any other cut): those
/// whose probability is at least `p` times the largest.
pub fn min_p_size(row: &[f32], t: f64, p: f64) -> usize {
    let max = f64::from(row.iter().copied().fold(f32::NEG_INFINITY, f32::max));
    row.iter()
        .filter(|&&l| ((f64::from(l) - max) / t).exp() >= p)
        .count()
}
