//! Repetition (Hugging Face), frequency and presence (OpenAI) penalties.

use crate::params::SamplingParams;
use crate::penalize::{apply_penalties, for_each_count, penalize};

/// The penalty stage of a [`Chain`](crate::Chain): repetition, frequency and presence
/// penalties over the history, with the same semantics as in
/// [`SamplingParams`].
///
/// # Example
/// ```
/// use logits::Penalties;
/// let p = Penalties::new(1.1, 0.0, 0.5)?.window(64).penalize_prompt(false);
/// assert!(Penalties::new(0.0, 0.0, 0.0).is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Penalties {
    params: SamplingParams,
    counts: Vec<u32>,
}

impl Penalties {
    /// # Errors
    /// [`Error::InvalidParameter`](crate::Error::InvalidParameter) for a repetition
    /// penalty that is not finite and `> 0`, or a non-finite frequency or presence
    /// penalty.
    pub fn new(repetition: f32, frequency: f32, presence: f32) -> Result<Self, crate::Error> {
        let params = SamplingParams::builder()
            .repetition_penalty(repetition)
            .frequency_penalty(frequency)
            .presence_penalty(presence)
            .build()?;
        Ok(Penalties {
            params,
            counts: Vec::new(),
        })
    }

    /// Count only the last `n` history tokens.
    pub fn window(mut self, n: usize) -> Self {
        self.params.penalty_window = Some(n);
        self
    }

    /// Whether prompt tokens count (default true).
    pub fn penalize_prompt(mut self, yes: bool) -> Self {
        self.params.penalize_prompt = yes;
        self
    }
}

impl crate::chain::Stage for Penalties {
    fn name(&self) -> &'static str {
        "penalties"
    }

    fn lowering(&self) -> crate::chain::lower::Lowering {
        crate::chain::lower::Lowering::Penalties(self.params.clone())
    }

    fn apply(
        &mut self,
        c: &mut crate::Candidates,
        ctx: &crate::StageContext<'_>,
    ) -> Result<(), crate::Error> {
        if !self.params.has_penalties() {
            return Ok(());
        }
        let window = ctx
            .history
            .penalized(self.params.penalty_window(), self.params.penalize_prompt());
        if c.is_dense() {
            if self.counts.len() < c.len() {
                self.counts.resize(c.len(), 0);
            }
            if let Some(&id) = window.iter().find(|&&id| id as usize >= c.len()) {
                return Err(crate::Error::TokenOutOfRange {
                    id,
                    vocab_size: c.len(),
                });
            }
            apply_penalties(c.logits_mut(), window, &self.params, &mut self.counts);
            return Ok(());
        }
        // A reordered set: penalise each distinct seen token once, through lookups.
        let max_id = window.iter().copied().max().map_or(0, |m| m as usize + 1);
        if self.counts.len() < max_id {
            self.counts.resize(max_id, 0);
        }
        let params = &self.params;
        for_each_count(window, &mut self.counts, |id, n| {
            if let Some(x) = c.logit_of_mut(id) {
                *x = penalize(*x, n, params);
            }
        });
        Ok(())
    }
}
