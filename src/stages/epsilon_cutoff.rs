//! Epsilon cutoff (Hewitt et al., arXiv 2210.15191), with Hugging Face's
//! `EpsilonLogitsWarper` semantics.

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;

/// Removes the candidates whose probability `w / total` is below `cut`, except those
/// whose logit is at least the `min_keep`-th largest (ties kept), as Hugging Face's
/// epsilon and eta warpers do. `weights` and `total` are the candidates' weights (as
/// [`Candidates::weights`] writes them). `-inf` candidates are dropped. `scratch` holds
/// a copy of the logits when the `min_keep` rule is needed.
pub(crate) fn cut_below(
    c: &mut Candidates,
    weights: &[f64],
    total: f64,
    cut: f64,
    min_keep: usize,
    scratch: &mut Vec<f32>,
) {
    let kept = weights.iter().filter(|&&w| w / total >= cut).count();
    let mut floor = f32::INFINITY;
    if kept < min_keep {
        scratch.clear();
        scratch.extend(c.logits().iter().copied());
        let k = min_keep.min(scratch.len());
        let (_, kth, _) = scratch.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
        floor = *kth;
    }
    let mut i = 0;
    c.retain(|_, l| {
        let w = weights[i];
        i += 1;
        l > f32::NEG_INFINITY && (w / total >= cut || l >= floor)
    });
}

/// The epsilon-cutoff stage of a [`Chain`](crate::Chain) (Hugging Face `epsilon_cutoff`).
///
/// Removes every candidate whose probability `p_i` (after the temperature applied so
/// far) is below `epsilon`: keeps `p_i >= epsilon`, computed in `f64` as `w_i / total`.
/// The `min_keep` most likely candidates are always kept (with every token tied with the
/// last of them), as Hugging Face's `min_tokens_to_keep`.
///
/// - **Default**: off (Hugging Face's `epsilon_cutoff = 0.0` does not add the warper).
///   The paper suggests `3e-4` (`epsilon`) to `9e-4`.
/// - **Edge cases**: zero candidates or every candidate `-inf`: unchanged; `-inf`
///   candidates are dropped; no candidate above `epsilon`: the `min_keep` most likely
///   remain. `epsilon` is compared as the decimal it was written as
///   ([`as_decimal`](crate::as_decimal)).
/// - **Cost**: one pass, no sort; no allocation once warm. As the first stage of a
///   chain (after a bias and penalties), the row is never copied: one vectorised pass
///   bounds the total mass, and the tokens above the cut are collected in draw order;
///   a token within that bound of the cut is decided by this stage's `f64` code.
///
/// # Example
/// ```
/// use logits::{Chain, EpsilonCutoff};
///
/// let mut chain = Chain::builder(3).stage(EpsilonCutoff::new(0.01)?).draw().build()?;
/// // p = [0.9999, 5e-5, 5e-5]: only token 0 is at least 0.01.
/// assert_eq!(chain.sample(&[10.0f32, 0.0, 0.0])?.token, 0);
/// assert!(EpsilonCutoff::new(1.0).is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct EpsilonCutoff {
    epsilon: crate::decimal::Threshold,
    min_keep: usize,
    weights: Vec<f64>,
    scratch: Vec<f32>,
}

impl EpsilonCutoff {
    /// Cut below probability `epsilon`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] unless `0 < epsilon < 1` (Hugging Face's range).
    pub fn new(epsilon: f32) -> Result<Self, Error> {
        if !(epsilon > 0.0 && epsilon < 1.0) {
            return Err(Error::InvalidParameter {
                name: "epsilon_cutoff",
                value: epsilon.into(),
                expected: "a value in (0, 1)",
            });
        }
        Ok(EpsilonCutoff {
            epsilon: crate::decimal::Threshold::new(epsilon),
            min_keep: 1,
            weights: Vec::new(),
            scratch: Vec::new(),
        })
    }

    /// Keep at least `n` candidates (default 1).
    pub fn min_keep(self, n: usize) -> Self {
        EpsilonCutoff {
            min_keep: n.max(1),
            ..self
        }
    }

    /// `epsilon`.
    pub fn epsilon(&self) -> f32 {
        self.epsilon.value
    }
}

impl Stage for EpsilonCutoff {
    fn name(&self) -> &'static str {
        "epsilon_cutoff"
    }

    fn lowering(&self) -> crate::chain::lower::Lowering {
        crate::chain::lower::Lowering::Floor(crate::chain::lower::Floor::Epsilon {
            epsilon: self.epsilon.value,
            keep: self.min_keep,
        })
    }

    fn apply(&mut self, c: &mut Candidates, _: &StageContext<'_>) -> Result<(), Error> {
        if c.max_logit() == f32::NEG_INFINITY {
            return Ok(());
        }
        let total = c.weights(&mut self.weights);
        let cut = self.epsilon.decimal;
        cut_below(
            c,
            &self.weights,
            total,
            cut,
            self.min_keep,
            &mut self.scratch,
        );
        Ok(())
    }
}
