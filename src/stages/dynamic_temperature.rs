//! Dynamic (entropy-scaled) temperature, llama.cpp's `temp_ext` ("dynatemp").

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::floor_band::temperature_at;
use crate::typical_p::{entropy, exact_total};

/// Keeps only the most likely candidate (ties to the lower id): a temperature of 0.
fn keep_argmax(c: &mut Candidates) {
    let max = c.max_logit();
    let top = c
        .ids()
        .iter()
        .zip(c.logits())
        .filter(|&(_, &l)| l == max)
        .map(|(&id, _)| id)
        .min();
    if let Some(top) = top {
        c.retain(|id, _| id == top);
    }
}

/// Dynamic temperature (llama.cpp `temp_ext(t, delta, exponent)`, the `dynatemp_range`
/// and `dynatemp_exponent` knobs): a temperature between `t - delta` and `t + delta`
/// chosen from the entropy of the distribution.
///
/// With `n` finite candidates, `H` the entropy of their distribution (after any
/// temperature applied so far) and `H / ln n` its normalised value in `[0, 1]`:
///
/// ```text
/// T = T_min + (T_max - T_min) * (H / ln n)^exponent,
///     T_min = max(0, t - delta),  T_max = t + delta
/// ```
///
/// and the candidates' temperature is multiplied by `T` (a confident, low-entropy step
/// is sampled colder, an uncertain one hotter). A `T <= 0` keeps only the most likely
/// candidate (ties to the lower id), as llama.cpp's `temp <= 0`. With `delta = 0` it is
/// the plain temperature `t`. In `f64`.
///
/// - **Defaults** (llama.cpp): `dynatemp_range = 0` (off: plain `temp = 0.8`),
///   `dynatemp_exponent = 1`.
/// - **Edge cases**: zero or one finite candidate: unchanged (llama.cpp returns before
///   scaling); `n` counts only finite candidates (llama.cpp counts the whole array).
/// - **Cost**: two passes, no sort, no allocation once warm. As the first stage of a
///   chain (after any bias and penalties) followed by a temperature, a top-k or both,
///   and the draw, the row is not copied: one vectorised pass bounds the entropy, so
///   the temperature lies within a bracket of two `f32`s (7e-8 to 2e-6 of it apart in
///   the tests), and the draw on the row in place at each end picks the token. A token picked at both ends is the
///   one at every temperature between them (a token later in draw order only gains
///   mass as the temperature rises), so it is this stage's token; otherwise the stage
///   runs as here. The sample's logprobs are then those at the lower end, within a
///   millionth of this stage's temperature: with logprobs requested, a wider bracket
///   (near a zero entropy an exponent below 1 magnifies the bound's error) is narrowed
///   by a precise `f64` pass, or else this stage runs as here.
///
/// # Example
/// ```
/// use logits::{Chain, DynamicTemperature};
///
/// let stage = DynamicTemperature::new(0.8, 0.5, 1.0)?;
/// let mut chain = Chain::builder(3).stage(stage).draw().seed(2).build()?;
/// assert!(chain.sample(&[1.0f32, 0.5, 0.0])?.token < 3);
/// assert!(DynamicTemperature::new(0.8, -0.1, 1.0).is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct DynamicTemperature {
    t: f32,
    delta: f32,
    exponent: f32,
    weights: Vec<f64>,
}

impl DynamicTemperature {
    /// Temperature `t` with range `delta` and exponent `exponent`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] unless all three are finite and `>= 0`.
    pub fn new(t: f32, delta: f32, exponent: f32) -> Result<Self, Error> {
        for (name, v) in [
            ("temperature", t),
            ("dynatemp_range", delta),
            ("dynatemp_exponent", exponent),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::InvalidParameter {
                    name,
                    value: v.into(),
                    expected: "a finite value >= 0",
                });
            }
        }
        Ok(DynamicTemperature {
            t,
            delta,
            exponent,
            weights: Vec::new(),
        })
    }

    /// The temperature this stage would apply to `c` (before the `T <= 0` rule), or
    /// `None` when it leaves `c` unchanged.
    pub fn temperature_for(&mut self, c: &Candidates) -> Option<f64> {
        let t = f64::from(self.t);
        if self.delta <= 0.0 {
            return Some(t);
        }
        let n = c
            .logits()
            .iter()
            .filter(|&&l| l > f32::NEG_INFINITY)
            .count();
        if n <= 1 {
            return None;
        }
        c.weights(&mut self.weights);
        let h = entropy(c, &self.weights, exact_total(&self.weights));
        Some(temperature_at(self.t, self.delta, self.exponent, h, n))
    }
}

impl Stage for DynamicTemperature {
    fn name(&self) -> &'static str {
        "dynamic_temperature"
    }

    fn lowering(&self) -> crate::chain::lower::Lowering {
        use crate::chain::lower::Lowering;
        if self.delta <= 0.0 {
            return Lowering::Opaque;
        }
        Lowering::DynamicTemperature {
            t: self.t,
            delta: self.delta,
            exponent: self.exponent,
        }
    }

    fn apply(&mut self, c: &mut Candidates, _: &StageContext<'_>) -> Result<(), Error> {
        if c.max_logit() == f32::NEG_INFINITY {
            return Ok(());
        }
        match self.temperature_for(c) {
            None => {}
            Some(t) if t > 0.0 => c.scale_temperature(t)?,
            Some(_) => keep_argmax(c),
        }
        Ok(())
    }
}
