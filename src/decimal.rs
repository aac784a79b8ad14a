//! [`as_decimal`]: the value at which a probability threshold given as `f32` is compared.

use std::io::Write;

/// The `f64` nearest to the shortest decimal that rounds to `x`: the value every
/// probability threshold of the crate is compared at.
///
/// A threshold written `0.8` is stored as the `f32` nearest to 0.8, which is
/// 0.800000011920929; widened to `f64` it would ask for slightly more than 0.8 of the
/// mass, and a prefix holding 0.8000000042 of it would fall short. The crate takes the
/// threshold to mean the decimal that was written: the shortest decimal that rounds to
/// the given `f32` (the digits Rust prints for it), here 0.8, read as an `f64`. The rule
/// holds for `top_p` (the [`Sampler`](crate::Sampler), [`TopP`](crate::TopP) and
/// [`reference`](crate::reference)), `min_p` (compared as `ln(as_decimal(min_p))`),
/// typical-p's mass, the epsilon and eta cut-offs, and XTC's threshold and probability.
///
/// Non-finite values, zeros and values whose shortest digits cannot be written are
/// widened unchanged.
///
/// # Example
/// ```
/// use logits::as_decimal;
///
/// assert_eq!(as_decimal(0.8), 0.8);
/// assert_eq!(f64::from(0.8f32), 0.800000011920929);
/// assert_eq!(as_decimal(0.95), 0.95);
/// assert_eq!(as_decimal(0.5), 0.5); // exact in binary: unchanged
/// assert_eq!(as_decimal(1e-30), 1e-30);
/// ```
pub fn as_decimal(x: f32) -> f64 {
    let wide = f64::from(x);
    if !x.is_finite() || x == 0.0 {
        return wide;
    }
    // `{:e}` writes the shortest significand that reads back as `x` (at most nine digits
    // for an `f32`) and an exponent: at most 15 bytes, such as `-1.23456789e-45`.
    let mut buf = [0u8; 32];
    let written = {
        let mut w = &mut buf[..];
        if write!(w, "{x:e}").is_err() {
            return wide;
        }
        32 - w.len()
    };
    std::str::from_utf8(&buf[..written])
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(wide)
}

/// A probability threshold as given and as compared: the `f32` a stage was built with
/// and its [`as_decimal`], computed once when the stage is built, not at every step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Threshold {
    /// The value as given.
    pub(crate) value: f32,
    /// The value as compared: `as_decimal(value)`.
    pub(crate) decimal: f64,
}

impl Threshold {
    pub(crate) fn new(value: f32) -> Self {
        Threshold {
            value,
            decimal: as_decimal(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::as_decimal;

    #[test]
    fn reads_the_digits_that_were_written() {
        for (x, d) in [
            (0.8f32, 0.8f64),
            (0.1, 0.1),
            (0.95, 0.95),
            (0.05, 0.05),
            (0.9, 0.9),
            (1.0, 1.0),
            (0.3, 0.3),
            (3e-4, 3e-4),
            (0.123_456_79, 0.123_456_79),
        ] {
            assert_eq!(as_decimal(x), d, "{x}");
        }
    }

    #[test]
    fn rounds_back_to_the_same_f32_and_stays_near_it() {
        // Every f32 in (0, 1] on a stride, and every power of two's neighbours.
        let mut bits = 1u32;
        while bits <= 1.0f32.to_bits() {
            let x = f32::from_bits(bits);
            let d = as_decimal(x);
            assert_eq!(d as f32, x, "{x:e}");
            // Within half an f32 ulp of x.
            let ulp = f64::from(f32::from_bits(bits + 1)) - f64::from(x);
            assert!((d - f64::from(x)).abs() <= 0.5 * ulp, "{x:e}");
            bits += 7919;
        }
    }

    #[test]
    fn keeps_short_binary_fractions_exact() {
        for m in 0..=8u32 {
            for i in 1..(1u32 << m) {
                let x = i as f32 / (1u32 << m) as f32;
                assert_eq!(as_decimal(x), f64::from(x), "{i} / 2^{m}");
            }
        }
    }

    #[test]
    fn leaves_special_values_alone() {
        assert_eq!(as_decimal(0.0), 0.0);
        assert!(as_decimal(f32::NAN).is_nan());
        assert_eq!(as_decimal(f32::INFINITY), f64::INFINITY);
        assert_eq!(as_decimal(f32::MIN_POSITIVE), 1.175_494_4e-38);
        assert_eq!(as_decimal(f32::from_bits(1)), 1e-45);
    }
}
