//! Uniforms placed on and next to the cumulative boundaries of the reference's draw,
//! where any rounding of a running sum or of the total would move the token.

use logits::reference::{self, Candidate};

/// The largest uniform below 1.
pub const TOP: f64 = 1.0 - f64::EPSILON / 2.0;

/// `u` moved by `k` ulps (within `[0, TOP]`).
pub fn step_ulps(u: f64, k: i64) -> f64 {
    let b = (u.to_bits() as i64 + k).max(0) as u64;
    f64::from_bits(b).min(TOP)
}

/// Position in `c` of the reference's token for `u`.
pub fn index(c: &[Candidate], u: f64) -> usize {
    let id = reference::draw(c, u);
    c.iter().position(|x| x.id == id).unwrap()
}

/// The uniforms on and next to the cumulative boundaries of `c`: for each survivor `b`
/// (all of them, or `limit` spread over them), the smallest `f64` whose exact draw lies
/// past `b` (found by bisection around `C_b / T` in `f64`) and the `width` `f64`s on
/// either side of it; and 0, the smallest positive `f64`, and the two largest uniforms
/// below 1.
pub fn boundary_uniforms(c: &[Candidate], limit: usize, width: i64) -> Vec<f64> {
    let total: f64 = c.iter().map(Candidate::weight).sum();
    let mut out = vec![0.0, f64::from_bits(1), TOP, step_ulps(TOP, -1)];
    let mut cum = 0.0;
    let stride = c.len().div_ceil(limit).max(1);
    for (b, x) in c.iter().enumerate() {
        cum += x.weight();
        if b + 1 == c.len() || b % stride != 0 {
            continue;
        }
        let u0 = (cum / total).min(TOP);
        let (mut lo, mut hi) = (step_ulps(u0, -256), step_ulps(u0, 256));
        let mut at = u0;
        if index(c, lo) <= b && index(c, hi) > b {
            // Invariant: index(lo) <= b < index(hi).
            while hi.to_bits() - lo.to_bits() > 1 {
                let mid = f64::from_bits(lo.to_bits() + (hi.to_bits() - lo.to_bits()) / 2);
                if index(c, mid) > b {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            at = hi;
        }
        out.extend((-width..=width).map(|k| step_ulps(at, k)));
    }
    out
}
