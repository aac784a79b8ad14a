//! Top-n-sigma (Tang et al., arXiv 2411.07641), with llama.cpp's semantics.

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::history::History;
use crate::processor::LogitsProcessor;

/// The lowest logit kept: `max - n * sigma` over the finite logits (`f64`), or `None`
/// when fewer than two are finite (nothing to cut).
fn threshold(logits: &[f32], n: f32) -> Option<f64> {
    let (mut count, mut sum, mut max) = (0usize, 0.0f64, f64::NEG_INFINITY);
    for &l in logits {
        if l > f32::NEG_INFINITY {
            let l = f64::from(l);
            count += 1;
            sum += l;
            max = max.max(l);
        }
    }
    if count < 2 {
        return None;
    }
    let mean = sum / count as f64;
    let mut acc = 0.0;
    for &l in logits {
        if l > f32::NEG_INFINITY {
            let d = f64::from(l) - mean;
            acc += d * d;
        }
    }
    let sigma = (acc / count as f64).sqrt();
    Some(max - f64::from(n) * sigma)
}

/// Top-n-sigma (llama.cpp `top_n_sigma`): keep the logits within `n` standard
/// deviations of the largest.
///
/// Over the finite logits, with `max` the largest, `mean` their mean and `sigma` their
/// population standard deviation (divided by the count), every token with
/// `l < max - n * sigma` is removed (`f64` arithmetic; equality kept). Scaling every
/// logit by `1 / T` scales `sigma` and the gaps alike, so the result does not depend on
/// the temperature and the stage can go before or after it.
///
/// Works as a [`Stage`] of a [`Chain`](crate::Chain) and as a [`LogitsProcessor`] for
/// [`Sampler::add_processor`](crate::Sampler::add_processor) (there it sets the removed
/// logits to `-inf`).
///
/// - **Default**: off (llama.cpp's `-1`); the paper uses `n = 1.0`.
/// - **Edge cases**: fewer than two finite logits: unchanged; all logits equal:
///   `sigma = 0`, everything kept; `-inf` logits are ignored in the statistics.
/// - **Cost**: two passes, no sort, no allocation. As the first stage of a chain (after a
///   bias and penalties), the row is never copied: one vectorised pass of `f64` lane
///   sums bounds the floor, and the tokens above it are collected in draw order; a token
///   within that bound of the floor is decided by the two sequential passes above.
///
/// # Example
/// ```
/// use logits::{Sampler, SamplingParams, TopNSigma};
///
/// let mut sampler = Sampler::new(SamplingParams::builder().seed(3).build()?, 4)?;
/// sampler.add_processor(Box::new(TopNSigma::new(1.0)?));
/// // mean 2.5, sigma ~ 4.33: only logits >= 10 - 4.33 survive.
/// assert_eq!(sampler.sample(&[10.0f32, 0.0, 0.0, 0.0])?.token, 0);
/// assert!(TopNSigma::new(0.0).is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TopNSigma {
    n: f32,
}

impl TopNSigma {
    /// Keep logits within `n` standard deviations of the maximum.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] unless `n` is finite and `> 0` (llama.cpp's `n <= 0`
    /// means off: leave the stage out).
    pub fn new(n: f32) -> Result<Self, Error> {
        if !(n.is_finite() && n > 0.0) {
            return Err(Error::InvalidParameter {
                name: "top_n_sigma",
                value: n.into(),
                expected: "a finite value > 0",
            });
        }
        Ok(TopNSigma { n })
    }

    /// `n`.
    pub fn n(&self) -> f32 {
        self.n
    }
}

impl Stage for TopNSigma {
    fn name(&self) -> &'static str {
        "top_n_sigma"
    }

    fn lowering(&self) -> crate::chain::lower::Lowering {
        crate::chain::lower::Lowering::Floor(crate::chain::lower::Floor::TopNSigma { n: self.n })
    }

    fn apply(&mut self, c: &mut Candidates, _: &StageContext<'_>) -> Result<(), Error> {
        if let Some(floor) = threshold(c.logits(), self.n) {
            c.retain(|_, l| f64::from(l) >= floor);
        }
        Ok(())
    }
}

impl LogitsProcessor for TopNSigma {
    fn process(&mut self, logits: &mut [f32], _: &History<'_>) -> Result<(), Error> {
        if let Some(floor) = threshold(logits, self.n) {
            for l in logits.iter_mut() {
                if f64::from(*l) < floor {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        Ok(())
    }
}
