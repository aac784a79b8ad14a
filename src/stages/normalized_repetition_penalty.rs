//! The repetition penalty in log-softmax space: Hugging Face's
//! `RepetitionPenaltyLogitsProcessor` with `normalize=True`.

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::history::History;
use crate::processor::LogitsProcessor;
use crate::TokenId;

/// Replaces `logits` by their log-softmax, `(l - max) - ln(sum exp(l - max))`, computed
/// in `f64` (the sum in row order) and rounded to `f32`. A row of `-inf` alone is left as
/// it is.
pub(crate) fn log_softmax(logits: &mut [f32]) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return;
    }
    let max = f64::from(max);
    let sum: f64 = logits.iter().map(|&l| (f64::from(l) - max).exp()).sum();
    let ln_sum = sum.ln();
    for l in logits {
        *l = ((f64::from(*l) - max) - ln_sum) as f32;
    }
}

/// One bit per token id, cleared after each use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    bits: Vec<u64>,
}

impl Seen {
    /// Marks every id of `ids`, which must be `< vocab_size`, growing to `vocab_size`
    /// bits on first use.
    pub(crate) fn mark(&mut self, ids: &[TokenId], vocab_size: usize) -> Result<(), Error> {
        let words = vocab_size.div_ceil(64);
        if self.bits.len() < words {
            self.bits
                .try_reserve(words - self.bits.len())
                .map_err(|_| Error::OutOfMemory {
                    name: "vocab_size",
                    value: vocab_size,
                })?;
            self.bits.resize(words, 0);
        }
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(Error::TokenOutOfRange { id, vocab_size });
        }
        for &id in ids {
            self.bits[id as usize / 64] |= 1 << (id % 64);
        }
        Ok(())
    }

    /// True when `id` is marked; clears its bit, so a later call for the same id is
    /// false.
    pub(crate) fn take(&mut self, id: TokenId) -> bool {
        let Some(w) = self.bits.get_mut(id as usize / 64) else {
            return false;
        };
        let bit = 1u64 << (id % 64);
        let was = *w & bit != 0;
        *w &= !bit;
        was
    }
}

/// Hugging Face's repetition penalty with `normalize=True`: the row becomes its
/// log-softmax, and the log-probability of every token seen in the history is
/// multiplied by `penalty`.
///
/// Log-probabilities are `<= 0`, so `penalty > 1` pushes a seen token further down and
/// `penalty < 1` pulls it up, whatever the sign of its raw logit; the plain penalty
/// ([`Penalties`](crate::Penalties), `repetition_penalty`) divides positive logits and
/// multiplies negative ones, which depends on where the model's logits happen to sit.
/// Each seen token is penalised once, however often it occurs. The log-softmax is
/// computed in `f64` and rounded to `f32` (transformers: in `f32`), then the product in
/// `f32`. The whole row is shifted, which changes no probability.
///
/// Works as a [`Stage`] of a [`Chain`](crate::Chain) and as a [`LogitsProcessor`] for
/// [`Sampler::add_processor`](crate::Sampler::add_processor). After a cut it normalises
/// over the candidates it sees.
///
/// - **Default**: `penalty = 1` does nothing but normalise; prompt tokens count, as in
///   transformers (`prompt_ignore_length` unset); [`penalize_prompt(false)`](Self::penalize_prompt)
///   counts only the generated tokens, as `prompt_ignore_length` set to the prompt's
///   length does.
/// - **Valid**: `penalty` finite and `> 0`.
/// - **Edge cases**: a token with probability 1 has log-probability 0 and is unchanged;
///   `-inf` stays `-inf`; a history id outside the row gives [`Error::TokenOutOfRange`].
/// - **Cost**: one `f64` exp per token for the normaliser, `O(history)` for the seen
///   tokens (`O(candidates * history)` after a cut); no allocation once warm.
///
/// # Example
/// ```
/// use logits::{Chain, NormalizedRepetitionPenalty};
///
/// // Tokens 0 and 1: log-probabilities about -0.69 each; 0 was seen: -0.69 * 2.
/// let stage = NormalizedRepetitionPenalty::new(2.0)?;
/// let mut chain = Chain::builder(2).stage(stage).greedy().build()?;
/// chain.push_prompt(&[0])?;
/// assert_eq!(chain.sample(&[1.0f32, 1.0])?.token, 1);
/// assert!(NormalizedRepetitionPenalty::new(0.0).is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct NormalizedRepetitionPenalty {
    penalty: f32,
    penalize_prompt: bool,
    seen: Seen,
}

impl NormalizedRepetitionPenalty {
    /// The penalty on seen tokens' log-probabilities.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `repetition_penalty` unless `penalty` is finite
    /// and `> 0`.
    pub fn new(penalty: f32) -> Result<Self, Error> {
        if !(penalty.is_finite() && penalty > 0.0) {
            return Err(Error::InvalidParameter {
                name: "repetition_penalty",
                value: penalty.into(),
                expected: "a finite value > 0 (1 is off)",
            });
        }
        Ok(NormalizedRepetitionPenalty {
            penalty,
            penalize_prompt: true,
            seen: Seen::default(),
        })
    }

    /// Whether prompt tokens count (default true).
    pub fn penalize_prompt(mut self, yes: bool) -> Self {
        self.penalize_prompt = yes;
        self
    }

    /// The penalty.
    pub fn penalty(&self) -> f32 {
        self.penalty
    }

    /// On a row indexed by id: each distinct token of the window once.
    pub(crate) fn run_row(
        &mut self,
        logits: &mut [f32],
        history: &History<'_>,
    ) -> Result<(), Error> {
        let window = history.penalized(None, self.penalize_prompt);
        self.seen.mark(window, logits.len())?;
        log_softmax(logits);
        for &id in window {
            if self.seen.take(id) {
                logits[id as usize] *= self.penalty;
            }
        }
        Ok(())
    }
}

impl Stage for NormalizedRepetitionPenalty {
    fn name(&self) -> &'static str {
        "normalized_repetition_penalty"
    }

    fn apply(&mut self, c: &mut Candidates, ctx: &StageContext<'_>) -> Result<(), Error> {
        if c.is_dense() {
            return self.run_row(c.logits_mut(), &ctx.history);
        }
        // A compact set: each candidate once, looked up in the window.
        let window = ctx.history.penalized(None, self.penalize_prompt);
        let p = self.penalty;
        let (ids, logits) = c.ids_and_logits_mut();
        log_softmax(logits);
        for (id, l) in ids.iter().zip(logits) {
            if window.contains(id) {
                *l *= p;
            }
        }
        Ok(())
    }
}

impl LogitsProcessor for NormalizedRepetitionPenalty {
    fn process(&mut self, logits: &mut [f32], history: &History<'_>) -> Result<(), Error> {
        self.run_row(logits, history)
    }
}
