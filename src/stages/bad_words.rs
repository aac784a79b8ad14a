//! Bad-word sequences, with Hugging Face's `NoBadWordsLogitsProcessor` and vLLM's
//! `bad_words` semantics.

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::history::History;
use crate::processor::LogitsProcessor;
use crate::TokenId;

/// Bans the last token of each bad-word sequence whose other tokens end the history
/// (Hugging Face `bad_words_ids`, vLLM `bad_words` after tokenisation).
///
/// For a sequence `[w1, ..., wm]`: when the history ends with `w1 .. w(m-1)`, `wm` gets
/// `-inf`; a one-token sequence is banned at every step. So a bad word can never be
/// completed, though its prefix can be generated.
///
/// Works as a [`Stage`] of a [`Chain`](crate::Chain) and as a [`LogitsProcessor`] for
/// [`Sampler::add_processor`](crate::Sampler::add_processor).
///
/// - **Default**: no sequences; every sequence is banned, an end-of-sequence token's
///   included.
/// - **EOS**: transformers' `NoBadWordsLogitsProcessor` drops a bad word that is exactly
///   one EOS token (`generate` passes the model's `eos_token_id`), so that a bad-words
///   list built from special tokens cannot make generation endless. Opt in with
///   [`eos_token_id`](Self::eos_token_id): a one-token sequence equal to one of those ids
///   is then ignored. A longer sequence that ends in EOS is still banned, as there. Without
///   it, nothing is ignored.
/// - **Edge cases**: a banned id outside the vocabulary gives
///   [`Error::TokenOutOfRange`]: when the [`Chain`](crate::Chain) is built, wherever the
///   stage stands, and at sampling time as a processor (as Hugging Face raises); an
///   empty sequence is refused when built.
/// - **Cost**: `O(total sequence length)` per step, no allocation.
///
/// # Example
/// ```
/// use logits::{BadWords, Chain};
///
/// let stage = BadWords::new([vec![2], vec![1, 3]])?;
/// let mut chain = Chain::builder(4).stage(stage).greedy().build()?;
/// chain.push_prompt(&[1])?; // "1 3" would complete: 3 is banned, 2 always is
/// assert_eq!(chain.sample(&[0.0f32, 1.0, 9.0, 8.0])?.token, 1);
/// assert!(BadWords::new([Vec::<u32>::new()]).is_err());
///
/// // With EOS (3) given, the one-token bad word [3] is ignored, as in transformers.
/// let stage = BadWords::new([vec![3], vec![2]])?.eos_token_id([3]);
/// let mut chain = Chain::builder(4).stage(stage).greedy().build()?;
/// assert_eq!(chain.sample(&[0.0f32, 1.0, 9.0, 8.0])?.token, 3);
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadWords {
    sequences: Vec<Vec<TokenId>>,
}

impl BadWords {
    /// The bad-word sequences, as token ids.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for an empty sequence.
    pub fn new<I, S>(sequences: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<[TokenId]>,
    {
        let mut out = Vec::new();
        for (i, s) in sequences.into_iter().enumerate() {
            let s = s.as_ref();
            if s.is_empty() {
                return Err(Error::InvalidParameter {
                    name: "bad_words",
                    value: i as f64,
                    expected: "non-empty token sequences (value: index of the empty one)",
                });
            }
            out.push(s.to_vec());
        }
        Ok(BadWords { sequences: out })
    }

    /// The end-of-sequence token ids, as transformers' `eos_token_id`: a bad word that is
    /// exactly one of these ids, alone, is dropped (a longer sequence ending in one is
    /// kept). Ids need not be in the vocabulary; calling it again drops more.
    pub fn eos_token_id(mut self, eos: impl IntoIterator<Item = TokenId>) -> Self {
        for id in eos {
            self.sequences.retain(|s| s.as_slice() != [id]);
        }
        self
    }

    /// The bad-word sequences still in force, in the order given.
    pub fn sequences(&self) -> impl Iterator<Item = &[TokenId]> + '_ {
        self.sequences.iter().map(Vec::as_slice)
    }

    /// Calls `ban` for each token to ban after `history`.
    fn for_each_banned(
        &self,
        history: &[TokenId],
        vocab_size: usize,
        mut ban: impl FnMut(TokenId),
    ) -> Result<(), Error> {
        for s in &self.sequences {
            let Some((&last, prefix)) = s.split_last() else {
                continue;
            };
            if last as usize >= vocab_size {
                return Err(Error::TokenOutOfRange {
                    id: last,
                    vocab_size,
                });
            }
            if history.ends_with(prefix) {
                ban(last);
            }
        }
        Ok(())
    }
}

impl Stage for BadWords {
    fn name(&self) -> &'static str {
        "bad_words"
    }

    /// # Errors
    /// [`Error::TokenOutOfRange`] for a banned (last) id `>= vocab_size`.
    fn check_vocab(&self, vocab_size: usize) -> Result<(), Error> {
        self.for_each_banned(&[], vocab_size, |_| {})
    }

    fn apply(&mut self, c: &mut Candidates, ctx: &StageContext<'_>) -> Result<(), Error> {
        let vocab_size = if c.is_dense() { c.len() } else { usize::MAX };
        self.for_each_banned(ctx.history.tokens(), vocab_size, |id| {
            if let Some(l) = c.logit_of_mut(id) {
                *l = f32::NEG_INFINITY;
            }
        })
    }
}

impl LogitsProcessor for BadWords {
    fn process(&mut self, logits: &mut [f32], history: &History<'_>) -> Result<(), Error> {
        self.for_each_banned(history.tokens(), logits.len(), |id| {
            logits[id as usize] = f32::NEG_INFINITY;
        })
    }
}
