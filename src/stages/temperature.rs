//! Temperature: divide every logit by `T`.

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;

/// The temperature stage of a [`Chain`](crate::Chain): divides every logit by `T > 0`.
///
/// Lower `T` sharpens the distribution (the gap between two logits is multiplied by
/// `1 / T`), higher `T` flattens it; it never changes the order of the candidates.
/// Greedy decoding is not a temperature: end the chain with
/// [`ChainBuilder::greedy`](crate::ChainBuilder::greedy), or use `temperature(0.0)` in
/// [`SamplingParams`](crate::SamplingParams).
///
/// # Example
/// ```
/// use logits::Temperature;
/// assert!(Temperature::new(0.6).is_ok());
/// assert!(Temperature::new(0.0).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Temperature {
    t: f32,
}

impl Temperature {
    /// # Errors
    /// [`Error::InvalidParameter`] unless `t` is finite and `> 0`.
    pub fn new(t: f32) -> Result<Self, Error> {
        if t.is_finite() && t > 0.0 {
            Ok(Temperature { t })
        } else {
            Err(Error::InvalidParameter {
                name: "temperature",
                value: t.into(),
                expected: "a finite value > 0 in a chain (end it with greedy() for T = 0)",
            })
        }
    }

    /// The temperature.
    pub fn value(&self) -> f32 {
        self.t
    }
}

impl Stage for Temperature {
    fn name(&self) -> &'static str {
        "temperature"
    }

    fn lowering(&self) -> crate::chain::lower::Lowering {
        crate::chain::lower::Lowering::Temperature(self.t)
    }

    fn apply(&mut self, c: &mut Candidates, _: &StageContext<'_>) -> Result<(), Error> {
        c.scale_temperature(f64::from(self.t))
    }
}
