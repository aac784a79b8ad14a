//! [`LogitsProcessor`]: user-defined adjustments, run in the adjustment stage.

use crate::error::Error;
use crate::history::History;

/// A user-defined adjustment of the logits row.
///
/// Processors run in the adjustment stage, after the logit bias, the penalties and the
/// grammar mask and before temperature, in the order they were added to the
/// [`Sampler`](crate::Sampler). They receive the row as `f32` (already converted from
/// `f16`/`bf16`, already biased and penalised) and the sequence's [`History`].
///
/// A processor may set entries to `-inf` to ban tokens. If it leaves a NaN or `+inf` in the
/// row, sampling fails with [`Error::NanLogit`] or [`Error::InfiniteLogit`]; it never
/// draws from a poisoned row.
///
/// # Example
/// ```
/// use logits::{Error, History, LogitsProcessor, Sampler, SamplingParams};
///
/// /// Bans every odd token id.
/// #[derive(Debug)]
/// struct EvenOnly;
///
/// impl LogitsProcessor for EvenOnly {
///     fn process(&self, logits: &mut [f32], _history: &History<'_>) -> Result<(), Error> {
///         logits.iter_mut().skip(1).step_by(2).for_each(|l| *l = f32::NEG_INFINITY);
///         Ok(())
///     }
/// }
///
/// let mut sampler = Sampler::new(SamplingParams::greedy(), 4)?;
/// sampler.add_processor(Box::new(EvenOnly));
/// let out = sampler.sample(&[0.0f32, 5.0, 1.0, 4.0])?;
/// assert_eq!(out.token, 2);
/// # Ok::<(), Error>(())
/// ```
pub trait LogitsProcessor: Send + Sync + std::fmt::Debug {
    /// Adjusts `logits` (one entry per vocabulary token) in place.
    ///
    /// # Errors
    /// Any [`Error`]; it is returned from the sampling call unchanged.
    fn process(&self, logits: &mut [f32], history: &History<'_>) -> Result<(), Error>;
}
