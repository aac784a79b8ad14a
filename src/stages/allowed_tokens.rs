//! An allowed-token whitelist, with vLLM's `allowed_token_ids` semantics.

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::history::History;
use crate::processor::LogitsProcessor;
use crate::TokenId;

/// Only the listed tokens can be drawn (vLLM `allowed_token_ids`): every other logit
/// becomes `-inf`; the allowed ones are left unchanged.
///
/// Works as a [`Stage`] of a [`Chain`](crate::Chain) and as a [`LogitsProcessor`] for
/// [`Sampler::add_processor`](crate::Sampler::add_processor).
///
/// - **Default**: no restriction (leave the stage out).
/// - **Edge cases**: an empty list is refused when built; an id outside the vocabulary
///   gives [`Error::TokenOutOfRange`] at sampling time (vLLM refuses the request); if
///   every allowed token is already `-inf`, the sampler reports
///   [`Error::NoCandidates`].
/// - **Cost**: one pass over the row against a bit set built once; no allocation.
///
/// # Example
/// ```
/// use logits::{AllowedTokens, Sampler, SamplingParams};
///
/// let mut sampler = Sampler::new(SamplingParams::greedy(), 4)?;
/// sampler.add_processor(Box::new(AllowedTokens::new([1, 3])?));
/// assert_eq!(sampler.sample(&[9.0f32, 1.0, 8.0, 2.0])?.token, 3);
/// assert!(AllowedTokens::new([]).is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedTokens {
    /// Bit `id` set = allowed.
    bits: Vec<u64>,
    max_id: TokenId,
}

impl AllowedTokens {
    /// The allowed token ids (duplicates are fine).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for an empty list.
    pub fn new(ids: impl IntoIterator<Item = TokenId>) -> Result<Self, Error> {
        let mut bits = Vec::new();
        let mut max_id = None;
        for id in ids {
            let w = id as usize / 64;
            if bits.len() <= w {
                bits.resize(w + 1, 0u64);
            }
            bits[w] |= 1 << (id % 64);
            max_id = max_id.max(Some(id));
        }
        let Some(max_id) = max_id else {
            return Err(Error::InvalidParameter {
                name: "allowed_token_ids",
                value: 0.0,
                expected: "at least one token id",
            });
        };
        Ok(AllowedTokens { bits, max_id })
    }

    /// True when `id` is allowed.
    pub fn allows(&self, id: TokenId) -> bool {
        self.bits
            .get(id as usize / 64)
            .is_some_and(|w| w & (1 << (id % 64)) != 0)
    }

    fn mask(&self, logits: &mut [f32]) -> Result<(), Error> {
        if self.max_id as usize >= logits.len() {
            return Err(Error::TokenOutOfRange {
                id: self.max_id,
                vocab_size: logits.len(),
            });
        }
        // 64 logits per bit-set word: whole words of banned tokens are one fill.
        for (w, chunk) in logits.chunks_mut(64).enumerate() {
            let bits = self.bits.get(w).copied().unwrap_or(0);
            if bits == 0 {
                chunk.fill(f32::NEG_INFINITY);
            } else if bits != u64::MAX {
                for (j, l) in chunk.iter_mut().enumerate() {
                    if bits >> j & 1 == 0 {
                        *l = f32::NEG_INFINITY;
                    }
                }
            }
        }
        Ok(())
    }
}

impl Stage for AllowedTokens {
    fn name(&self) -> &'static str {
        "allowed_tokens"
    }

    fn apply(&mut self, c: &mut Candidates, _: &StageContext<'_>) -> Result<(), Error> {
        if c.is_dense() {
            return self.mask(c.logits_mut());
        }
        c.retain(|id, _| self.allows(id));
        Ok(())
    }
}

impl LogitsProcessor for AllowedTokens {
    fn process(&mut self, logits: &mut [f32], _: &History<'_>) -> Result<(), Error> {
        self.mask(logits)
    }
}
