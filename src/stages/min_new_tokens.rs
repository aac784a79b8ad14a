//! Minimum new tokens before end of sequence, with Hugging Face's
//! `MinNewTokensLengthLogitsProcessor` and vLLM's `min_tokens` semantics.

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::history::History;
use crate::processor::LogitsProcessor;
use crate::TokenId;

/// Bans the end-of-sequence tokens until `min_new_tokens` tokens have been generated
/// (Hugging Face `min_new_tokens`, vLLM `min_tokens`).
///
/// While the number of generated tokens (the history after the prompt) is below
/// `min_new_tokens`, every listed EOS id gets `-inf`; from then on the stage does
/// nothing. Pass every id that ends generation (Qwen3: `151645` and `151643`; vLLM also
/// bans `stop_token_ids` here).
///
/// Works as a [`Stage`] of a [`Chain`](crate::Chain) and as a [`LogitsProcessor`] for
/// [`Sampler::add_processor`](crate::Sampler::add_processor).
///
/// - **Default**: `0` (off).
/// - **Edge cases**: an EOS id outside the vocabulary gives [`Error::TokenOutOfRange`]
///   while the ban is active; an empty EOS list is refused when built; a row where only
///   EOS is possible gives [`Error::NoCandidates`].
/// - **Cost**: `O(number of EOS ids)` per step, no allocation.
///
/// # Example
/// ```
/// use logits::{Chain, MinNewTokens};
///
/// let mut chain = Chain::builder(3).stage(MinNewTokens::new(1, [2])?).greedy().build()?;
/// assert_eq!(chain.sample(&[0.0f32, 1.0, 9.0])?.token, 1); // EOS banned at step 0
/// assert_eq!(chain.sample(&[0.0f32, 1.0, 9.0])?.token, 2); // allowed at step 1
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MinNewTokens {
    min_new_tokens: usize,
    eos: Vec<TokenId>,
}

impl MinNewTokens {
    /// Ban the ids in `eos` until `min_new_tokens` tokens have been generated.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for an empty `eos` list.
    pub fn new(
        min_new_tokens: usize,
        eos: impl IntoIterator<Item = TokenId>,
    ) -> Result<Self, Error> {
        let mut eos: Vec<TokenId> = eos.into_iter().collect();
        eos.sort_unstable();
        eos.dedup();
        if eos.is_empty() {
            return Err(Error::InvalidParameter {
                name: "eos_token_id",
                value: 0.0,
                expected: "at least one end-of-sequence token id",
            });
        }
        Ok(MinNewTokens {
            min_new_tokens,
            eos,
        })
    }

    /// The minimum number of new tokens.
    pub fn min_new_tokens(&self) -> usize {
        self.min_new_tokens
    }

    fn active(&self, history: &History<'_>) -> bool {
        history.generated().len() < self.min_new_tokens
    }
}

impl Stage for MinNewTokens {
    fn name(&self) -> &'static str {
        "min_new_tokens"
    }

    fn apply(&mut self, c: &mut Candidates, ctx: &StageContext<'_>) -> Result<(), Error> {
        if !self.active(&ctx.history) {
            return Ok(());
        }
        let vocab_size = if c.is_dense() { c.len() } else { usize::MAX };
        for &id in &self.eos {
            if id as usize >= vocab_size {
                return Err(Error::TokenOutOfRange { id, vocab_size });
            }
            if let Some(l) = c.logit_of_mut(id) {
                *l = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }
}

impl LogitsProcessor for MinNewTokens {
    fn process(&mut self, logits: &mut [f32], history: &History<'_>) -> Result<(), Error> {
        if !self.active(history) {
            return Ok(());
        }
        let vocab_size = logits.len();
        for &id in &self.eos {
            match logits.get_mut(id as usize) {
                Some(l) => *l = f32::NEG_INFINITY,
                None => return Err(Error::TokenOutOfRange { id, vocab_size }),
            }
        }
        Ok(())
    }
}
