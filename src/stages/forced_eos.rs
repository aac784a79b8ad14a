//! A forced end of sequence at the length limit, with Hugging Face's
//! `ForcedEOSTokenLogitsProcessor` (`forced_eos_token_id`) semantics.

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::history::History;
use crate::processor::LogitsProcessor;
use crate::token_list::TokenList;
use crate::TokenId;

/// How [`ForcedEos`] measures the length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Limit {
    /// The whole history: prompt and generated tokens (transformers' `max_length`).
    Total(usize),
    /// The generated tokens only (`max_new_tokens`).
    New(usize),
}

/// Forces an end-of-sequence token as the last token before the length limit (Hugging
/// Face `forced_eos_token_id` with `max_length`).
///
/// At the step whose token will be the `max_length`-th of the whole history (prompt and
/// generated, as transformers counts `input_ids`: the history holds `max_length - 1`
/// tokens), every logit becomes `-inf` except the EOS ids', which become 0
/// (transformers' values); with several EOS ids the draw picks among them. At every other
/// step nothing changes. [`ForcedEos::max_new_tokens`] counts the generated tokens only,
/// as `generate` does when given `max_new_tokens` (its `max_length` is then the prompt's
/// length plus `max_new_tokens`).
///
/// Works as a [`Stage`] of a [`Chain`](crate::Chain) and as a [`LogitsProcessor`] for
/// [`Sampler::add_processor`](crate::Sampler::add_processor). Put it before the cuts:
/// after one, EOS ids that are no longer candidates are not forced, and if none is left
/// the step gives [`Error::NoCandidates`].
///
/// - **Default**: off (leave the stage out).
/// - **Valid**: `max_length >= 1`, at least one EOS id.
/// - **Edge cases**: an id outside the vocabulary gives [`Error::TokenOutOfRange`] when
///   the [`Chain`](crate::Chain) is built and at every sampling call as a processor; a
///   history already longer than the limit is left alone (the stage fires at one step
///   only, as in transformers; stop the generation with [`StopChecker`](crate::StopChecker)).
/// - **Cost**: one pass over the row at that step (`O(candidates)` after a cut), nothing
///   at the others; no allocation.
///
/// # Example
/// ```
/// use logits::{Chain, ForcedEos};
///
/// // max_length 4 counts the prompt: the 4th token of the history is EOS (3).
/// let mut chain = Chain::builder(4).stage(ForcedEos::new(4, [3])?).greedy().build()?;
/// chain.push_prompt(&[0, 1])?;
/// let row = [0.0f32, 1.0, 9.0, -2.0];
/// assert_eq!(chain.sample(&row)?.token, 2);
/// assert_eq!(chain.sample(&row)?.token, 3);
///
/// // Counting the generated tokens only: the 2nd generated token is EOS.
/// let stage = ForcedEos::max_new_tokens(2, [3])?;
/// let mut chain = Chain::builder(4).stage(stage).greedy().build()?;
/// chain.push_prompt(&[0, 1, 2, 0])?;
/// assert_eq!(chain.sample(&row)?.token, 2);
/// assert_eq!(chain.sample(&row)?.token, 3);
/// assert!(ForcedEos::new(0, [3]).is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForcedEos {
    eos: TokenList,
    limit: Limit,
}

impl ForcedEos {
    /// Force one of `eos` as the `max_length`-th token of the whole history (prompt
    /// included, as transformers' `max_length`).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `max_length` when it is 0, or
    /// `forced_eos_token_id` for an empty `eos` list; [`Error::OutOfMemory`] when the
    /// list cannot be copied.
    pub fn new(max_length: usize, eos: impl IntoIterator<Item = TokenId>) -> Result<Self, Error> {
        Self::build("max_length", Limit::Total(max_length), eos)
    }

    /// Force one of `eos` as the `max_new_tokens`-th generated token.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `max_new_tokens` when it is 0, or
    /// `forced_eos_token_id` for an empty `eos` list; [`Error::OutOfMemory`] when the
    /// list cannot be copied.
    pub fn max_new_tokens(
        max_new_tokens: usize,
        eos: impl IntoIterator<Item = TokenId>,
    ) -> Result<Self, Error> {
        Self::build("max_new_tokens", Limit::New(max_new_tokens), eos)
    }

    fn build(
        name: &'static str,
        limit: Limit,
        eos: impl IntoIterator<Item = TokenId>,
    ) -> Result<Self, Error> {
        let (Limit::Total(n) | Limit::New(n)) = limit;
        if n == 0 {
            return Err(Error::InvalidParameter {
                name,
                value: 0.0,
                expected: "an integer >= 1",
            });
        }
        let eos = TokenList::new("forced_eos_token_id", eos)?;
        if eos.is_empty() {
            return Err(Error::InvalidParameter {
                name: "forced_eos_token_id",
                value: 0.0,
                expected: "at least one end-of-sequence token id",
            });
        }
        Ok(ForcedEos { eos, limit })
    }

    /// The EOS ids, ascending, without duplicates.
    pub fn eos_token_ids(&self) -> &[TokenId] {
        self.eos.ids()
    }

    fn active(&self, history: &History<'_>) -> bool {
        match self.limit {
            Limit::Total(n) => history.tokens().len() == n - 1,
            Limit::New(n) => history.generated().len() == n - 1,
        }
    }
}

impl Stage for ForcedEos {
    fn name(&self) -> &'static str {
        "forced_eos"
    }

    /// # Errors
    /// [`Error::TokenOutOfRange`] for an id `>= vocab_size`.
    fn check_vocab(&self, vocab_size: usize) -> Result<(), Error> {
        self.eos.check(vocab_size)
    }

    fn apply(&mut self, c: &mut Candidates, ctx: &StageContext<'_>) -> Result<(), Error> {
        if self.active(&ctx.history) {
            self.eos.force(c)?;
        }
        Ok(())
    }
}

impl LogitsProcessor for ForcedEos {
    fn process(&mut self, logits: &mut [f32], history: &History<'_>) -> Result<(), Error> {
        self.eos.check(logits.len())?;
        if self.active(history) {
            self.eos.force_row(logits)?;
        }
        Ok(())
    }
}
