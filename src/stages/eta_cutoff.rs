//! Eta cutoff (Hewitt et al., arXiv 2210.15191), with Hugging Face's `EtaLogitsWarper`
//! semantics.

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::epsilon_cutoff::cut_below;
use crate::error::Error;
use crate::typical_p::{entropy, exact_total};

/// The eta-cutoff stage of a [`Chain`](crate::Chain) (Hugging Face `eta_cutoff`): an
/// entropy-dependent epsilon cutoff.
///
/// With `H = -sum p_i ln p_i` the entropy of the candidates' distribution (after the
/// temperature applied so far), the cut is `eta = min(epsilon, sqrt(epsilon) * exp(-H))`
/// and every candidate with `p_i < eta` is removed, except the `min_keep` most likely
/// (with every token tied with the last of them). Computed in `f64`.
///
/// - **Default**: off (Hugging Face's `eta_cutoff = 0.0` does not add the warper). The
///   paper suggests `3e-4` to `2e-3`.
/// - **Edge cases**: as [`EpsilonCutoff`](crate::EpsilonCutoff); a flat distribution
///   (high `H`) makes `eta` tiny, so little is cut; a peaked one gives `eta = epsilon`.
///   `epsilon` is read as the decimal it was written as ([`as_decimal`](crate::as_decimal)).
/// - **Cost**: two passes (entropy, cut), no sort; no allocation once warm. As the first
///   stage of a chain (after a bias and penalties), the row is never copied: one
///   vectorised pass bounds the mass and the entropy, and the tokens above the cut are
///   collected in draw order; a token within that bound of the cut is decided by this
///   stage's `f64` code.
///
/// # Example
/// ```
/// use logits::{Chain, EtaCutoff};
///
/// let mut chain = Chain::builder(3).stage(EtaCutoff::new(0.01)?).draw().build()?;
/// assert_eq!(chain.sample(&[10.0f32, 0.0, 0.0])?.token, 0);
/// assert!(EtaCutoff::new(0.0).is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct EtaCutoff {
    epsilon: crate::decimal::Threshold,
    min_keep: usize,
    weights: Vec<f64>,
    scratch: Vec<f32>,
}

impl EtaCutoff {
    /// Eta cutoff with `epsilon`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] unless `0 < epsilon < 1` (Hugging Face's range).
    pub fn new(epsilon: f32) -> Result<Self, Error> {
        if !(epsilon > 0.0 && epsilon < 1.0) {
            return Err(Error::InvalidParameter {
                name: "eta_cutoff",
                value: epsilon.into(),
                expected: "a value in (0, 1)",
            });
        }
        Ok(EtaCutoff {
            epsilon: crate::decimal::Threshold::new(epsilon),
            min_keep: 1,
            weights: Vec::new(),
            scratch: Vec::new(),
        })
    }

    /// Keep at least `n` candidates (default 1).
    pub fn min_keep(self, n: usize) -> Self {
        EtaCutoff {
            min_keep: n.max(1),
            ..self
        }
    }

    /// `epsilon`.
    pub fn epsilon(&self) -> f32 {
        self.epsilon.value
    }
}

impl Stage for EtaCutoff {
    fn name(&self) -> &'static str {
        "eta_cutoff"
    }

    fn lowering(&self) -> crate::chain::lower::Lowering {
        crate::chain::lower::Lowering::Floor(crate::chain::lower::Floor::Eta {
            epsilon: self.epsilon.value,
            keep: self.min_keep,
        })
    }

    fn apply(&mut self, c: &mut Candidates, _: &StageContext<'_>) -> Result<(), Error> {
        if c.max_logit() == f32::NEG_INFINITY {
            return Ok(());
        }
        let total = c.weights(&mut self.weights);
        let h = entropy(c, &self.weights, exact_total(&self.weights));
        let eps = self.epsilon.decimal;
        let eta = eps.min(eps.sqrt() * (-h).exp());
        cut_below(
            c,
            &self.weights,
            total,
            eta,
            self.min_keep,
            &mut self.scratch,
        );
        Ok(())
    }
}
