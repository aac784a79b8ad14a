//! Rows for the unit tests of the passes: values uniform in `[-scale / 2, scale / 2)` from
//! a xorshift generator, with `-inf` at a fixed stride.

/// `n` values drawn from the xorshift state `x` (advanced for every entry), entry `i`
/// being `-inf` when `i % stride == offset`.
pub(crate) fn uniform_row(
    x: &mut u64,
    n: usize,
    scale: f32,
    stride: usize,
    offset: usize,
) -> Vec<f32> {
    (0..n)
        .map(|i| {
            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            if i % stride == offset {
                f32::NEG_INFINITY
            } else {
                ((*x >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
            }
        })
        .collect()
}
