//! A forced first token, with Hugging Face's `ForcedBOSTokenLogitsProcessor`
//! (`forced_bos_token_id`) semantics.

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::history::History;
use crate::processor::LogitsProcessor;
use crate::token_list::TokenList;
use crate::TokenId;

/// Forces the first generated token (Hugging Face `forced_bos_token_id`; mBART and
/// NLLB force the target language's token there).
///
/// At the step with no generated token yet ([`History::generated`] empty), every logit
/// becomes `-inf` except the forced token's, which becomes 0 (transformers' values), so
/// the token is drawn with probability 1 and a logprob of 0; at every other step nothing
/// changes. transformers tests that `input_ids` holds a single token, which for the
/// encoder-decoder models it serves is that same step (the decoder's start token
/// alone); here the prompt may have any length, so push the decoder's start token, or
/// the decoder-only prompt, as the prompt.
///
/// Works as a [`Stage`] of a [`Chain`](crate::Chain) and as a [`LogitsProcessor`] for
/// [`Sampler::add_processor`](crate::Sampler::add_processor). Put it before the cuts:
/// after one, a forced token that is no longer a candidate leaves none, which gives
/// [`Error::NoCandidates`].
///
/// - **Default**: off (leave the stage out).
/// - **Edge cases**: an id outside the vocabulary gives [`Error::TokenOutOfRange`] when
///   the [`Chain`](crate::Chain) is built and at every sampling call as a processor; a
///   forced token the grammar mask disallows gives [`Error::NoCandidates`] in a `Chain`
///   (the mask comes first there), while a [`Sampler`](crate::Sampler)'s processors run
///   after its mask and force it all the same.
/// - **Cost**: one pass over the row at the first step (`O(candidates)` after a cut),
///   nothing at the others; no allocation.
///
/// # Example
/// ```
/// use logits::{Chain, ForcedBos};
///
/// let mut chain = Chain::builder(4).stage(ForcedBos::new(2)?).draw().build()?;
/// chain.push_prompt(&[0])?;
/// let first = chain.sample(&[5.0f32, 4.0, -3.0, 1.0])?;
/// assert_eq!((first.token, first.logprob), (2, 0.0));
/// assert!(Chain::builder(4).stage(ForcedBos::new(4)?).greedy().build().is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForcedBos {
    bos: TokenId,
    id: TokenList,
}

impl ForcedBos {
    /// Force `bos_token_id` as the first generated token.
    ///
    /// # Errors
    /// None today; the `Result` keeps the stages' constructors alike.
    pub fn new(bos_token_id: TokenId) -> Result<Self, Error> {
        Ok(ForcedBos {
            bos: bos_token_id,
            id: TokenList::new("forced_bos_token_id", [bos_token_id])?,
        })
    }

    /// The forced token.
    pub fn token(&self) -> TokenId {
        self.bos
    }
}

impl Stage for ForcedBos {
    fn name(&self) -> &'static str {
        "forced_bos"
    }

    /// # Errors
    /// [`Error::TokenOutOfRange`] for an id `>= vocab_size`.
    fn check_vocab(&self, vocab_size: usize) -> Result<(), Error> {
        self.id.check(vocab_size)
    }

    fn apply(&mut self, c: &mut Candidates, ctx: &StageContext<'_>) -> Result<(), Error> {
        if ctx.history.generated().is_empty() {
            self.id.force(c)?;
        }
        Ok(())
    }
}

impl LogitsProcessor for ForcedBos {
    fn process(&mut self, logits: &mut [f32], history: &History<'_>) -> Result<(), Error> {
        self.id.check(logits.len())?;
        if history.generated().is_empty() {
            self.id.force_row(logits)?;
        }
        Ok(())
    }
}
