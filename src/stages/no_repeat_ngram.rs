//! No-repeat n-gram ban, with Hugging Face's `NoRepeatNGramLogitsProcessor` semantics.

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::history::History;
use crate::processor::LogitsProcessor;
use crate::TokenId;

/// Calls `ban` for every token that would complete an n-gram already in `tokens`.
fn for_each_banned(tokens: &[TokenId], n: usize, mut ban: impl FnMut(TokenId)) {
    if tokens.len() + 1 < n {
        return;
    }
    let prefix = &tokens[tokens.len() + 1 - n..];
    for w in tokens.windows(n) {
        if &w[..n - 1] == prefix {
            ban(w[n - 1]);
        }
    }
}

/// Bans every token that would repeat an n-gram of the history (Hugging Face
/// `no_repeat_ngram_size`).
///
/// With `x` the whole history (prompt and generated, as Hugging Face's `input_ids`) and
/// `s = x[len - (n - 1)..]` its last `n - 1` tokens, every token `t` such that `s ++ [t]`
/// occurs in `x` gets `-inf`. `n = 1` bans every token already in the history.
///
/// Works as a [`Stage`] of a [`Chain`](crate::Chain) and as a [`LogitsProcessor`] for
/// [`Sampler::add_processor`](crate::Sampler::add_processor).
///
/// - **Default**: off (Hugging Face's `no_repeat_ngram_size = 0`).
/// - **Edge cases**: a history shorter than `n - 1` bans nothing; a ban can leave no
///   candidate, which the sampler reports as [`Error::NoCandidates`].
/// - **Cost**: `O(len * n)` per step over the history, no allocation.
///
/// # Example
/// ```
/// use logits::{Chain, NoRepeatNGram};
///
/// let mut chain = Chain::builder(4).stage(NoRepeatNGram::new(2)?).greedy().build()?;
/// chain.push_prompt(&[1, 3, 1])?; // the bigram "1 3" exists: 3 is banned after 1
/// assert_eq!(chain.sample(&[0.0f32, 0.0, 1.0, 5.0])?.token, 2);
/// assert!(NoRepeatNGram::new(0).is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoRepeatNGram {
    n: usize,
}

impl NoRepeatNGram {
    /// Ban repeats of n-grams of size `n`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] when `n == 0`.
    pub fn new(n: usize) -> Result<Self, Error> {
        if n == 0 {
            return Err(Error::InvalidParameter {
                name: "no_repeat_ngram_size",
                value: 0.0,
                expected: "an integer >= 1",
            });
        }
        Ok(NoRepeatNGram { n })
    }

    /// `n`.
    pub fn n(&self) -> usize {
        self.n
    }
}

impl Stage for NoRepeatNGram {
    fn name(&self) -> &'static str {
        "no_repeat_ngram"
    }

    fn apply(&mut self, c: &mut Candidates, ctx: &StageContext<'_>) -> Result<(), Error> {
        for_each_banned(ctx.history.tokens(), self.n, |id| {
            if let Some(l) = c.logit_of_mut(id) {
                *l = f32::NEG_INFINITY;
            }
        });
        Ok(())
    }
}

impl LogitsProcessor for NoRepeatNGram {
    fn process(&mut self, logits: &mut [f32], history: &History<'_>) -> Result<(), Error> {
        for_each_banned(history.tokens(), self.n, |id| {
            if let Some(l) = logits.get_mut(id as usize) {
                *l = f32::NEG_INFINITY;
            }
        });
        Ok(())
    }
}
