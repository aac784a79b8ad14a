//! Tokens suppressed at the first generated step, with Hugging Face's
//! `SuppressTokensAtBeginLogitsProcessor` (`begin_suppress_tokens`) semantics.

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::history::History;
use crate::processor::LogitsProcessor;
use crate::token_list::TokenList;
use crate::TokenId;

/// Bans the listed tokens at one step only: by default the first generated token
/// (Hugging Face `begin_suppress_tokens`; Whisper bans the blank and EOS there).
///
/// transformers compares the length of `input_ids` with a `begin_index`, which
/// `generate` sets to the input's length (one more when it also forces a BOS token after
/// a one-token input): the first step it samples freely. Here the default is the step
/// with no generated token yet ([`History::generated`] empty), whatever the prompt's
/// length; [`begin_index`](Self::begin_index) sets transformers' index instead, compared
/// with the length of the whole history (prompt and generated).
///
/// Works as a [`Stage`] of a [`Chain`](crate::Chain) and as a [`LogitsProcessor`] for
/// [`Sampler::add_processor`](crate::Sampler::add_processor).
///
/// - **Default**: no tokens (an empty list is accepted and does nothing); the first
///   generated step.
/// - **Edge cases**: as [`SuppressTokens`](crate::SuppressTokens) at that step: an id
///   outside the vocabulary gives [`Error::TokenOutOfRange`] when the chain is built and
///   at every sampling call as a processor; at every other step nothing changes.
/// - **Cost**: `O(number of ids)` at that step, nothing at the others; no allocation.
///
/// # Example
/// ```
/// use logits::{Chain, SuppressTokensAtBegin};
///
/// let stage = SuppressTokensAtBegin::new([2])?;
/// let mut chain = Chain::builder(3).stage(stage).greedy().build()?;
/// chain.push_prompt(&[0, 1])?;
/// assert_eq!(chain.sample(&[0.0f32, 1.0, 9.0])?.token, 1); // first step: 2 banned
/// assert_eq!(chain.sample(&[0.0f32, 1.0, 9.0])?.token, 2); // then allowed
///
/// // transformers' begin_index: the history's length (here prompt 2 + 1 generated).
/// let stage = SuppressTokensAtBegin::new([2])?.begin_index(3);
/// let mut chain = Chain::builder(3).stage(stage).greedy().build()?;
/// chain.push_prompt(&[0, 1])?;
/// assert_eq!(chain.sample(&[0.0f32, 1.0, 9.0])?.token, 2);
/// assert_eq!(chain.sample(&[0.0f32, 1.0, 9.0])?.token, 1);
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuppressTokensAtBegin {
    ids: TokenList,
    begin_index: Option<usize>,
}

impl SuppressTokensAtBegin {
    /// Suppress the tokens in `ids` at the first generated step.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] naming `begin_suppress_tokens` when the list cannot be
    /// copied.
    pub fn new(ids: impl IntoIterator<Item = TokenId>) -> Result<Self, Error> {
        Ok(SuppressTokensAtBegin {
            ids: TokenList::new("begin_suppress_tokens", ids)?,
            begin_index: None,
        })
    }

    /// Suppress at the step where the whole history (prompt and generated tokens) holds
    /// `begin_index` tokens, as transformers' `begin_index` compares with the length of
    /// `input_ids`, instead of at the first generated step.
    pub fn begin_index(mut self, begin_index: usize) -> Self {
        self.begin_index = Some(begin_index);
        self
    }

    /// The suppressed ids, ascending, without duplicates.
    pub fn ids(&self) -> &[TokenId] {
        self.ids.ids()
    }

    fn active(&self, history: &History<'_>) -> bool {
        match self.begin_index {
            None => history.generated().is_empty(),
            Some(i) => history.tokens().len() == i,
        }
    }
}

impl Stage for SuppressTokensAtBegin {
    fn name(&self) -> &'static str {
        "suppress_tokens_at_begin"
    }

    /// # Errors
    /// [`Error::TokenOutOfRange`] for an id `>= vocab_size`.
    fn check_vocab(&self, vocab_size: usize) -> Result<(), Error> {
        self.ids.check(vocab_size)
    }

    fn apply(&mut self, c: &mut Candidates, ctx: &StageContext<'_>) -> Result<(), Error> {
        if self.active(&ctx.history) {
            self.ids.ban(c)?;
        }
        Ok(())
    }
}

impl LogitsProcessor for SuppressTokensAtBegin {
    fn process(&mut self, logits: &mut [f32], history: &History<'_>) -> Result<(), Error> {
        self.ids.check(logits.len())?;
        if self.active(history) {
            self.ids.ban_row(logits)?;
        }
        Ok(())
    }
}
