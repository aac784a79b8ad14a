//! Suppressed tokens, with Hugging Face's `SuppressTokensLogitsProcessor`
//! (`suppress_tokens`) semantics.

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::history::History;
use crate::processor::LogitsProcessor;
use crate::token_list::TokenList;
use crate::TokenId;

/// Bans the listed tokens at every step (Hugging Face `suppress_tokens`, as Whisper's
/// generation config sets it): each gets `-inf`.
///
/// Works as a [`Stage`] of a [`Chain`](crate::Chain) and as a [`LogitsProcessor`] for
/// [`Sampler::add_processor`](crate::Sampler::add_processor). After a cut it removes the
/// listed tokens from the candidates.
///
/// - **Default**: no tokens (an empty list is accepted and does nothing).
/// - **Edge cases**: duplicates are fine; an id outside the vocabulary gives
///   [`Error::TokenOutOfRange`] when the [`Chain`](crate::Chain) is built and at sampling
///   time as a processor (transformers ignores such an id); suppressing every candidate
///   gives [`Error::NoCandidates`].
/// - **Cost**: `O(number of ids)` per step on the whole row, `O(candidates * log ids)`
///   after a cut; no allocation.
///
/// # Example
/// ```
/// use logits::{Chain, SuppressTokens};
///
/// let mut chain = Chain::builder(4).stage(SuppressTokens::new([2, 3])?).greedy().build()?;
/// assert_eq!(chain.sample(&[0.0f32, 1.0, 9.0, 8.0])?.token, 1);
/// assert_eq!(chain.sample(&[0.0f32, 1.0, 9.0, 8.0])?.token, 1); // at every step
/// assert!(Chain::builder(4).stage(SuppressTokens::new([4])?).greedy().build().is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuppressTokens {
    ids: TokenList,
}

impl SuppressTokens {
    /// Suppress the tokens in `ids`.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] naming `suppress_tokens` when the list cannot be copied.
    pub fn new(ids: impl IntoIterator<Item = TokenId>) -> Result<Self, Error> {
        Ok(SuppressTokens {
            ids: TokenList::new("suppress_tokens", ids)?,
        })
    }

    /// The suppressed ids, ascending, without duplicates.
    pub fn ids(&self) -> &[TokenId] {
        self.ids.ids()
    }
}

impl Stage for SuppressTokens {
    fn name(&self) -> &'static str {
        "suppress_tokens"
    }

    /// # Errors
    /// [`Error::TokenOutOfRange`] for an id `>= vocab_size`.
    fn check_vocab(&self, vocab_size: usize) -> Result<(), Error> {
        self.ids.check(vocab_size)
    }

    fn apply(&mut self, c: &mut Candidates, _: &StageContext<'_>) -> Result<(), Error> {
        self.ids.ban(c)
    }
}

impl LogitsProcessor for SuppressTokens {
    fn process(&mut self, logits: &mut [f32], _: &History<'_>) -> Result<(), Error> {
        self.ids.ban_row(logits)
    }
}
