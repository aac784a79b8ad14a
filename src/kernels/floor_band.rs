//! The floors of the stages that cut at a statistic of the whole row (epsilon, eta,
//! top-n-sigma): bounds `[lo, hi]` on the logit floor from the fast statistics of
//! [`stats`](crate::stats) and [`mass`](crate::mass), wide enough that a token outside
//! them is decided as the stage's own `f64` code decides it. The engine collects the
//! tokens above `lo` and leaves the ones in the band to the stage. Typical-p's centre,
//! from which it measures its distances, is bounded the same way.

use crate::stats::{Entropy, Moments, U64};

/// Bounds `[lo, hi]` on the logit floor of a probability cut at `cut`, from the fast
/// mass `z` (within `z_err`) of the row (maximum `max`, `n` entries): a token with `l >= hi` has
/// `w / total >= cut` and one with `l < lo` has not, both in exact arithmetic and in the
/// `f64` arithmetic of the epsilon-cutoff stage's `cut_below` (whose own rounding the
/// band covers: the weights within an ulp, the total within `(n + 2) 2^-53` of itself).
/// `None` when the bound on the mass leaves it unknown.
pub(crate) fn epsilon(cut: f64, z: f64, z_err: f64, n: usize, max: f32) -> Option<(f64, f64)> {
    let dz = z_err + 4.0 * (n as f64 + 2.0) * U64 * z;
    if !(z - dz > 0.0 && cut > 0.0) {
        return None;
    }
    let lo = cut.ln() + (z - dz).ln();
    let hi = cut.ln() + (z + dz).ln();
    let max = f64::from(max);
    let slack = 16.0 * U64 * (max.abs() + lo.abs().max(hi.abs()) + 1.0);
    Some((max + lo - slack, max + hi + slack))
}

/// Bounds `[h_lo, h_hi]` on the entropy of the row (`n` entries) from its fast
/// statistics `e`: the entropy `ln z + s / z` within the bounds of `z` and `s`, widened
/// by the rounding of the `f64` entropy of the typical-p stage's `entropy`
/// (`4 (n + 2) 2^-53` of its magnitude), which eta and dynamic temperature compute too.
/// `None` when the bounds leave the entropy unknown.
pub(crate) fn entropy(e: &Entropy, n: usize) -> Option<(f64, f64)> {
    let (z_lo, z_hi) = (e.z - e.z_err, e.z + e.z_err);
    if z_lo.is_nan() || z_lo <= 0.0 {
        return None;
    }
    let (s_lo, s_hi) = ((e.s - e.s_err).max(0.0), e.s + e.s_err);
    let h = e.z.ln() + e.s / e.z;
    let r = 4.0 * (n as f64 + 2.0) * U64 * (1.0 + h.abs() + e.z.ln().abs()) + 1e-15;
    let h_lo = z_lo.ln() + s_lo / z_hi - r;
    let h_hi = z_hi.ln() + s_hi / z_lo + r;
    Some((h_lo, h_hi))
}

/// Bounds `[lo, hi]` on the logit floor of the eta cutoff with `epsilon`, from the fast
/// statistics `e` of the row (maximum `max`, `n` entries): [`entropy`]'s bounds give
/// bounds on `eta`, and then [`epsilon`] on the floor. `None` when the bounds leave the
/// entropy unknown.
pub(crate) fn eta(epsilon: f64, e: &Entropy, n: usize, max: f32) -> Option<(f64, f64)> {
    let (h_lo, h_hi) = entropy(e, n)?;
    let eta = |h: f64| epsilon.min(epsilon.sqrt() * (-h).exp());
    // `eta` decreases with the entropy; `exp` and `sqrt` within a few ulps.
    let (eta_lo, eta_hi) = (eta(h_hi) * (1.0 - 8.0 * U64), eta(h_lo) * (1.0 + 8.0 * U64));
    let (lo, _) = self::epsilon(eta_lo, e.z, e.z_err, n, max)?;
    let (_, hi) = self::epsilon(eta_hi, e.z, e.z_err, n, max)?;
    Some((lo, hi))
}

/// The centre of the typical-p stage's distances, from the fast statistics `e` of the
/// row (`n` entries), relative to the row's maximum: `(c, delta, mag)` such that the
/// stage's own `f64` distance of a token at scaled logit `x = l - max` (temperature 1),
/// `|-(x - ln total) - h|`, lies within `delta + 6 * 2^-53 (|x| + mag)` of `|c - x|`
/// computed in `f64`.
///
/// In exact arithmetic the centre `ln z - H` is `-s / z` (the mean scaled logit), which
/// the bounds of `z` and `s` hold. The stage's total is within `3 * 2^-53` of the exact
/// mass (each `exp` within an ulp, the exact sum rounded once), so its logarithm within
/// `4 * 2^-53` plus an ulp of its magnitude; its entropy is within the bound [`eta`]
/// uses. The stage's three roundings of the distance (the difference `x`, the shift by
/// `ln total` and by `h`) and this function's two are each within an ulp of the
/// magnitudes involved, which `mag = |ln z| + |h| + |c| + 1` covers with `|x|`. `None`
/// when the bounds leave the mass unknown.
pub(crate) fn typical(e: &Entropy, n: usize) -> Option<(f64, f64, f64)> {
    let (z_lo, z_hi) = (e.z - e.z_err, e.z + e.z_err);
    if z_lo.is_nan() || z_lo <= 0.0 || !z_hi.is_finite() {
        return None;
    }
    let (s_lo, s_hi) = ((e.s - e.s_err).max(0.0), e.s + e.s_err);
    let ln_z = e.z.ln();
    let c = -e.s / e.z;
    let h = ln_z - c;
    let (c_lo, c_hi) = (-s_hi / z_lo, -s_lo / z_hi);
    let r = 4.0 * (n as f64 + 2.0) * U64 * (1.0 + h.abs() + ln_z.abs()) + 1e-15;
    let mag = ln_z.abs() + h.abs() + c.abs() + 1.0;
    let delta = (c - c_lo).max(c_hi - c) + r + 8.0 * U64 * mag;
    delta.is_finite().then_some((c, delta * 1.01, mag))
}

/// The temperature of [`DynamicTemperature`](crate::DynamicTemperature) with parameters `t`, `delta` and
/// `exponent` at entropy `h` over `n >= 2` finite candidates, in `f64`:
/// `T_min + (T_max - T_min) * (h / ln n)^exponent`. Non-decreasing in `h`.
pub(crate) fn temperature_at(t: f32, delta: f32, exponent: f32, h: f64, n: usize) -> f64 {
    let (t, d) = (f64::from(t), f64::from(delta));
    let (t_min, t_max) = ((t - d).max(0.0), t + d);
    let norm = h / (n as f64).ln();
    t_min + (t_max - t_min) * norm.powf(f64::from(exponent))
}

/// Bounds `[lo, hi]` on the floor of the top-n-sigma stage's `threshold` from the fast
/// moments `m` of the row about its maximum `max` (`n` entries): a token with `l >= hi`
/// is kept and one with `l < lo` is removed, in exact arithmetic and in `threshold`'s
/// `f64` arithmetic.
///
/// The variance is `sum_sq / count - (sum / count)^2` (moments about any point give
/// it); its uncertainty adds the lane sums' bounds, the rounding of `threshold`'s mean
/// (within `(count + 1) 2^-53` of the largest magnitude, which moves its variance by the
/// square of that error) and of its sum of squares (`(count + 4) 2^-53` of it). `None`
/// for fewer than two finite entries (where `threshold` cuts nothing).
pub(crate) fn top_n_sigma(n: f32, m: &Moments, rows: usize, max: f32) -> Option<(f64, f64)> {
    if m.count < 2 {
        return None;
    }
    let c = m.count as f64;
    let (e1, e2) = m.errors(rows);
    let mean = m.sum / c;
    let var = (m.sum_sq / c - mean * mean).max(0.0);
    let magnitude = f64::from(max).abs().max((f64::from(max) + m.lowest).abs());
    let dm = (c + 1.0) * U64 * magnitude;
    let ev = e2 / c
        + 2.0 * mean.abs() * (e1 / c)
        + (e1 / c).powi(2)
        + 4.0 * U64 * (m.sum_sq / c + mean * mean)
        + (c + 4.0) * U64 * (var + dm * dm) * 1.01
        + 1.01 * dm * dm;
    let (s_lo, s_hi) = ((var - ev).max(0.0).sqrt(), (var + ev).sqrt());
    let n = f64::from(n);
    let max = f64::from(max);
    let slack = 8.0 * U64 * (max.abs() + n * s_hi);
    Some((max - n * s_hi - slack, max - n * s_lo + slack))
}
