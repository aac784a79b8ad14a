//! The encoder repetition penalty, with Hugging Face's
//! `EncoderRepetitionPenaltyLogitsProcessor` (`encoder_repetition_penalty`) semantics.

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::history::History;
use crate::normalized_repetition_penalty::log_softmax;
use crate::processor::LogitsProcessor;
use crate::token_list::TokenList;
use crate::TokenId;

/// Favours the tokens of a separate encoder input (Hugging Face
/// `encoder_repetition_penalty`): the inverse of the repetition penalty, applied to the
/// tokens of the list given to [`new`](Self::new) (the encoder's input of an
/// encoder-decoder model, or any source text to stay close to) instead of the history.
///
/// With `q = 1 / penalty` (`penalty` an `f64`, as transformers' Python float; `q`
/// computed in `f64` and rounded to `f32`, as there), each listed token's logit
/// `l` becomes `l * q` when `l < 0` and `l / q` otherwise, so `penalty > 1` raises the
/// listed tokens and `penalty < 1` lowers them; each token once, however often it is
/// listed. With [`normalize(true)`](Self::normalize), the row first becomes its
/// log-softmax (in `f64`, rounded to `f32`) and each listed token's log-probability is
/// multiplied by `q`.
///
/// Works as a [`Stage`] of a [`Chain`](crate::Chain) and as a [`LogitsProcessor`] for
/// [`Sampler::add_processor`](crate::Sampler::add_processor). After a cut it changes the
/// listed tokens that are still candidates (and normalises over the candidates).
///
/// - **Default**: `penalty = 1` does nothing; `normalize` false.
/// - **Valid**: `penalty` finite and `> 0`.
/// - **Edge cases**: an id outside the vocabulary gives [`Error::TokenOutOfRange`] when
///   the [`Chain`](crate::Chain) is built and at every sampling call as a processor; an
///   empty list does nothing (but normalise).
/// - **Cost**: `O(listed tokens)` per step (one `f64` exp per token when normalising);
///   no allocation.
///
/// # Example
/// ```
/// use logits::{Chain, EncoderRepetitionPenalty};
///
/// // The source text holds token 1: 2.0 / (1 / 1.5) = 3.0 beats 2.5.
/// let stage = EncoderRepetitionPenalty::new(1.5, [1, 1])?;
/// let mut chain = Chain::builder(3).stage(stage).greedy().build()?;
/// assert_eq!(chain.sample(&[0.0f32, 2.0, 2.5])?.token, 1);
/// assert!(EncoderRepetitionPenalty::new(-1.0, [1]).is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderRepetitionPenalty {
    penalty: f64,
    inverse: f32,
    normalize: bool,
    ids: TokenList,
}

impl EncoderRepetitionPenalty {
    /// The penalty and the encoder's input tokens.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `encoder_repetition_penalty` unless `penalty`
    /// is finite and `> 0`; [`Error::OutOfMemory`] when the list cannot be copied.
    pub fn new(
        penalty: f64,
        encoder_ids: impl IntoIterator<Item = TokenId>,
    ) -> Result<Self, Error> {
        if !(penalty.is_finite() && penalty > 0.0) {
            return Err(Error::InvalidParameter {
                name: "encoder_repetition_penalty",
                value: penalty,
                expected: "a finite value > 0 (1 is off)",
            });
        }
        Ok(EncoderRepetitionPenalty {
            penalty,
            inverse: (1.0 / penalty) as f32,
            normalize: false,
            ids: TokenList::new("encoder_input_ids", encoder_ids)?,
        })
    }

    /// Penalise log-probabilities instead of raw logits (transformers' `normalize`).
    pub fn normalize(mut self, yes: bool) -> Self {
        self.normalize = yes;
        self
    }

    /// The penalty.
    pub fn penalty(&self) -> f64 {
        self.penalty
    }

    fn adjust(&self, l: f32) -> f32 {
        if self.normalize || l < 0.0 {
            l * self.inverse
        } else {
            l / self.inverse
        }
    }
}

impl Stage for EncoderRepetitionPenalty {
    fn name(&self) -> &'static str {
        "encoder_repetition_penalty"
    }

    /// # Errors
    /// [`Error::TokenOutOfRange`] for an id `>= vocab_size`.
    fn check_vocab(&self, vocab_size: usize) -> Result<(), Error> {
        self.ids.check(vocab_size)
    }

    fn apply(&mut self, c: &mut Candidates, _: &StageContext<'_>) -> Result<(), Error> {
        if c.is_dense() {
            return self.process_row(c.logits_mut());
        }
        let (ids, logits) = c.ids_and_logits_mut();
        if self.normalize {
            log_softmax(logits);
        }
        for (&id, l) in ids.iter().zip(logits) {
            if self.ids.contains(id) {
                *l = self.adjust(*l);
            }
        }
        Ok(())
    }
}

impl EncoderRepetitionPenalty {
    fn process_row(&self, logits: &mut [f32]) -> Result<(), Error> {
        self.ids.check(logits.len())?;
        if self.normalize {
            log_softmax(logits);
        }
        for &id in self.ids.ids() {
            let l = &mut logits[id as usize];
            *l = self.adjust(*l);
        }
        Ok(())
    }
}

impl LogitsProcessor for EncoderRepetitionPenalty {
    fn process(&mut self, logits: &mut [f32], _: &History<'_>) -> Result<(), Error> {
        self.process_row(logits)
    }
}
