//! The encoder no-repeat n-gram ban, with Hugging Face's
//! `EncoderNoRepeatNGramLogitsProcessor` (`encoder_no_repeat_ngram_size`) semantics.

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::history::History;
use crate::processor::LogitsProcessor;
use crate::TokenId;

/// Bans every token that would repeat an n-gram of a separate encoder input (Hugging
/// Face `encoder_no_repeat_ngram_size`): the list given to [`new`](Self::new), such as
/// an encoder-decoder model's input or an earlier conversation turn, instead of the
/// history.
///
/// With `s` the last `n - 1` tokens of the history (prompt and generated, as
/// transformers' `input_ids`), every token `t` such that `s ++ [t]` occurs in the
/// encoder tokens gets `-inf`. `n = 1` bans every encoder token at every step.
///
/// Works as a [`Stage`] of a [`Chain`](crate::Chain) and as a [`LogitsProcessor`] for
/// [`Sampler::add_processor`](crate::Sampler::add_processor).
///
/// - **Default**: off (transformers' `encoder_no_repeat_ngram_size = 0`).
/// - **Valid**: `n >= 1`.
/// - **Edge cases**: a history shorter than `n - 1` bans nothing; an encoder id outside
///   the vocabulary gives [`Error::TokenOutOfRange`] when the [`Chain`](crate::Chain) is
///   built and at every sampling call as a processor; a ban can leave no candidate,
///   which the sampler reports as [`Error::NoCandidates`].
/// - **Cost**: `O(encoder length * n)` per step, no allocation.
///
/// # Example
/// ```
/// use logits::{Chain, EncoderNoRepeatNGram};
///
/// // The encoder input holds "1 3": after 1, token 3 is banned.
/// let stage = EncoderNoRepeatNGram::new(2, [1, 3, 2])?;
/// let mut chain = Chain::builder(4).stage(stage).greedy().build()?;
/// chain.push_prompt(&[1])?;
/// assert_eq!(chain.sample(&[0.0f32, 0.0, 1.0, 5.0])?.token, 2);
/// assert!(EncoderNoRepeatNGram::new(0, [1]).is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncoderNoRepeatNGram {
    n: usize,
    encoder: Vec<TokenId>,
    max_id: Option<TokenId>,
}

impl EncoderNoRepeatNGram {
    /// Ban continuations of the n-grams of size `n` in `encoder_ids`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `encoder_no_repeat_ngram_size` when `n == 0`;
    /// [`Error::OutOfMemory`] when the list cannot be copied.
    pub fn new(n: usize, encoder_ids: impl IntoIterator<Item = TokenId>) -> Result<Self, Error> {
        if n == 0 {
            return Err(Error::InvalidParameter {
                name: "encoder_no_repeat_ngram_size",
                value: 0.0,
                expected: "an integer >= 1",
            });
        }
        let ids = encoder_ids.into_iter();
        let mut encoder = Vec::new();
        let oom = |value| Error::OutOfMemory {
            name: "encoder_input_ids",
            value,
        };
        encoder
            .try_reserve(ids.size_hint().0)
            .map_err(|_| oom(ids.size_hint().0))?;
        for id in ids {
            encoder.try_reserve(1).map_err(|_| oom(encoder.len() + 1))?;
            encoder.push(id);
        }
        let max_id = encoder.iter().copied().max();
        Ok(EncoderNoRepeatNGram { n, encoder, max_id })
    }

    /// `n`.
    pub fn n(&self) -> usize {
        self.n
    }

    fn check(&self, vocab_size: usize) -> Result<(), Error> {
        match self.max_id {
            Some(id) if id as usize >= vocab_size => Err(Error::TokenOutOfRange { id, vocab_size }),
            _ => Ok(()),
        }
    }

    /// Calls `ban` for every token that would complete an encoder n-gram after
    /// `tokens`.
    fn for_each_banned(&self, tokens: &[TokenId], mut ban: impl FnMut(TokenId)) {
        let n = self.n;
        if tokens.len() + 1 < n {
            return;
        }
        let suffix = &tokens[tokens.len() + 1 - n..];
        for w in self.encoder.windows(n) {
            if &w[..n - 1] == suffix {
                ban(w[n - 1]);
            }
        }
    }
}

impl Stage for EncoderNoRepeatNGram {
    fn name(&self) -> &'static str {
        "encoder_no_repeat_ngram"
    }

    /// # Errors
    /// [`Error::TokenOutOfRange`] for an encoder id `>= vocab_size`.
    fn check_vocab(&self, vocab_size: usize) -> Result<(), Error> {
        self.check(vocab_size)
    }

    fn apply(&mut self, c: &mut Candidates, ctx: &StageContext<'_>) -> Result<(), Error> {
        if c.is_dense() {
            self.check(c.len())?;
        }
        self.for_each_banned(ctx.history.tokens(), |id| {
            if let Some(l) = c.logit_of_mut(id) {
                *l = f32::NEG_INFINITY;
            }
        });
        Ok(())
    }
}

impl LogitsProcessor for EncoderNoRepeatNGram {
    fn process(&mut self, logits: &mut [f32], history: &History<'_>) -> Result<(), Error> {
        self.check(logits.len())?;
        self.for_each_banned(history.tokens(), |id| {
            logits[id as usize] = f32::NEG_INFINITY
        });
        Ok(())
    }
}
