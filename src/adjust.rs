//! Stage 1 plumbing: convert the row to `f32` while checking it, then re-check after the
//! adjustments.

use crate::element::Logit;
use crate::error::Error;

/// Copies `row` into `out` as `f32`, returning the maximum.
///
/// # Errors
/// [`Error::NanLogit`] or [`Error::InfiniteLogit`] for the first NaN or `+inf`.
pub(crate) fn convert_checked<T: Logit>(row: &[T], out: &mut [f32]) -> Result<f32, Error> {
    debug_assert_eq!(row.len(), out.len());
    const W: usize = 8;
    let mut lanes = [f32::NEG_INFINITY; W];
    let mut bad = [false; W];
    let mut src = row.chunks_exact(W);
    let mut dst = out.chunks_exact_mut(W);
    for (s, d) in (&mut src).zip(&mut dst) {
        for j in 0..W {
            let v = s[j].to_f32();
            d[j] = v;
            bad[j] |= !(v < f32::INFINITY);
            lanes[j] = if v > lanes[j] { v } else { lanes[j] };
        }
    }
    let mut max = lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut any_bad = bad.iter().any(|&b| b);
    for (s, d) in src.remainder().iter().zip(dst.into_remainder()) {
        let v = s.to_f32();
        *d = v;
        any_bad |= !(v < f32::INFINITY);
        max = max.max(v);
    }
    if any_bad {
        first_non_finite(out)?;
    }
    Ok(max)
}

/// Maximum of a row that may have been changed anywhere, checking it again.
///
/// # Errors
/// As [`convert_checked`].
pub(crate) fn recheck(row: &[f32]) -> Result<f32, Error> {
    const W: usize = 8;
    let mut lanes = [f32::NEG_INFINITY; W];
    let mut bad = [false; W];
    let chunks = row.chunks_exact(W);
    let rem = chunks.remainder();
    for s in chunks {
        for j in 0..W {
            let v = s[j];
            bad[j] |= !(v < f32::INFINITY);
            lanes[j] = if v > lanes[j] { v } else { lanes[j] };
        }
    }
    let mut max = lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut any_bad = bad.iter().any(|&b| b);
    for &v in rem {
        any_bad |= !(v < f32::INFINITY);
        max = max.max(v);
    }
    if any_bad {
        first_non_finite(row)?;
    }
    Ok(max)
}

/// Reports the first NaN or `+inf` of `row` (there is one when called).
fn first_non_finite(row: &[f32]) -> Result<(), Error> {
    for (index, &v) in row.iter().enumerate() {
        if v.is_nan() {
            return Err(Error::NanLogit { index });
        }
        if v == f32::INFINITY {
            return Err(Error::InfiniteLogit { index });
        }
    }
    Ok(())
}
