//! Classifier-free guidance over two rows, with Hugging Face's
//! `UnbatchedClassifierFreeGuidanceLogitsProcessor` (`guidance_scale`) semantics.

use crate::element::Logit;
use crate::error::Error;

/// Combines a conditional row and an unconditional one (Hugging Face `guidance_scale`;
/// Sanchez et al., arXiv:2306.17806): the caller runs the model twice per step, once
/// with the prompt and once without it (or with a negative prompt), and samples from
/// the combination.
///
/// With `c` and `u` the log-softmax of the conditional and the unconditional row,
/// token by token:
///
/// ```text
/// out = u + guidance_scale * (c - u)
/// ```
///
/// which is transformers' `generate(guidance_scale=..)` for decoder-only models: the
/// rows are normalised first (transformers' batched form, for MusicGen, skips the
/// log-softmax; its result differs only by a shift per row when the scale is 1, not
/// in general). `guidance_scale = 1` gives the conditional log-softmax, `0` the
/// unconditional one, `> 1` pushes away from the unconditional row, and `< 0` turns a
/// negative prompt into a positive one. Everything is computed in `f64` and rounded to
/// `f32`.
///
/// It is not a [`Stage`](crate::Stage): a stage sees one row. Write the combination into
/// a buffer and sample it with any [`Sampler`](crate::Sampler) or
/// [`Chain`](crate::Chain) (greedy, cuts and all); the history is the conditional
/// sequence's.
///
/// - **Valid**: `guidance_scale` finite.
/// - **Edge cases**: a token that is `-inf` in either row is `-inf` in the output
///   (banned there, banned here); a finite result beyond the `f32` range saturates at
///   `-f32::MAX` or `f32::MAX`. A NaN or `+inf` input gives [`Error::NanLogit`] or
///   [`Error::InfiniteLogit`] (with its index, the conditional row first); rows of
///   different lengths, or an output of another length, give [`Error::LengthMismatch`].
///   A row of `-inf` alone gives an output of `-inf` alone, which a sampler reports as
///   [`Error::NoCandidates`].
/// - **Cost**: two `f64` exp passes per row pair; no allocation.
///
/// # Example
/// ```
/// use logits::{ClassifierFreeGuidance, Sampler, SamplingParams};
///
/// let cfg = ClassifierFreeGuidance::new(1.5)?;
/// let cond = [2.0f32, 1.9, 0.0];   // with the prompt
/// let uncond = [2.0f32, 0.5, 0.0]; // without it
/// let mut row = [0.0f32; 3];
/// cfg.combine(&cond, &uncond, &mut row)?;
/// // Token 1 gains what the prompt added to it: it now beats token 0.
/// let mut sampler = Sampler::new(SamplingParams::greedy(), 3)?;
/// assert_eq!(sampler.sample(&row)?.token, 1);
/// assert!(cfg.combine(&cond, &uncond[..2], &mut row).is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClassifierFreeGuidance {
    scale: f32,
}

/// The log-softmax of a checked row is `(l - max) - ln(sum exp(l - max))`: `max` and
/// the logarithm (`None` when every entry is `-inf`).
fn normaliser<T: Logit>(row: &[T]) -> Option<(f64, f64)> {
    let max = row
        .iter()
        .map(|l| l.to_f32())
        .fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return None;
    }
    let max = f64::from(max);
    let sum: f64 = row
        .iter()
        .map(|l| (f64::from(l.to_f32()) - max).exp())
        .sum();
    Some((max, sum.ln()))
}

/// Refuses NaN and `+inf`.
fn check<T: Logit>(row: &[T]) -> Result<(), Error> {
    for (index, l) in row.iter().enumerate() {
        let l = l.to_f32();
        if l.is_nan() {
            return Err(Error::NanLogit { index });
        }
        if l == f32::INFINITY {
            return Err(Error::InfiniteLogit { index });
        }
    }
    Ok(())
}

impl ClassifierFreeGuidance {
    /// Guidance with `guidance_scale`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `guidance_scale` unless it is finite.
    pub fn new(guidance_scale: f32) -> Result<Self, Error> {
        if !guidance_scale.is_finite() {
            return Err(Error::InvalidParameter {
                name: "guidance_scale",
                value: guidance_scale.into(),
                expected: "a finite value (1 is the conditional row alone)",
            });
        }
        Ok(ClassifierFreeGuidance {
            scale: guidance_scale,
        })
    }

    /// The guidance scale.
    pub fn guidance_scale(&self) -> f32 {
        self.scale
    }

    /// Writes the guided row of `cond` (the prompt's logits) and `uncond` (the
    /// unconditional or negative prompt's) into `out`, all three of one length.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] (expected: `cond.len()`) when `uncond` or `out` has
    /// another length; [`Error::EmptyVocabulary`] for empty rows; [`Error::NanLogit`] or
    /// [`Error::InfiniteLogit`] for a NaN or `+inf` in either row. `out` is unchanged on
    /// error.
    pub fn combine<T: Logit>(
        &self,
        cond: &[T],
        uncond: &[T],
        out: &mut [f32],
    ) -> Result<(), Error> {
        for actual in [uncond.len(), out.len()] {
            if actual != cond.len() {
                return Err(Error::LengthMismatch {
                    expected: cond.len(),
                    actual,
                });
            }
        }
        if cond.is_empty() {
            return Err(Error::EmptyVocabulary);
        }
        check(cond)?;
        check(uncond)?;
        let (Some(nc), Some(nu)) = (normaliser(cond), normaliser(uncond)) else {
            out.fill(f32::NEG_INFINITY);
            return Ok(());
        };
        let s = f64::from(self.scale);
        let max = f64::from(f32::MAX);
        for ((o, c), u) in out.iter_mut().zip(cond).zip(uncond) {
            let (c, u) = (c.to_f32(), u.to_f32());
            *o = if c == f32::NEG_INFINITY || u == f32::NEG_INFINITY {
                f32::NEG_INFINITY
            } else {
                let c = (f64::from(c) - nc.0) - nc.1;
                let u = (f64::from(u) - nu.0) - nu.1;
                (u + s * (c - u)).clamp(-max, max) as f32
            };
        }
        Ok(())
    }
}
