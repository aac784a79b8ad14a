//! A length penalty that raises the end-of-sequence logit exponentially, with Hugging
//! Face's `ExponentialDecayLengthPenalty` (`exponential_decay_length_penalty`) semantics.

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::history::History;
use crate::processor::LogitsProcessor;
use crate::token_list::TokenList;
use crate::TokenId;

/// Raises the EOS logits exponentially once `start_index` tokens have been generated
/// (Hugging Face `exponential_decay_length_penalty = (start_index, decay_factor)`), so
/// that generation tends to end without a hard cut.
///
/// With `g` the number of generated tokens (transformers: the length of `input_ids`
/// minus the input's length) and `i = g - start_index`: while `i <= 0` nothing changes;
/// after that, every EOS logit `l` becomes
///
/// ```text
/// l + |l| * (decay_factor^i - 1)
/// ```
///
/// The absolute value is transformers' treatment of negative logits: a negative EOS
/// logit moves up by the same fraction of its size as a positive one, towards and past
/// 0 (with `decay_factor > 1`), instead of being multiplied further below 0. The
/// arithmetic is transformers': `decay_factor^i - 1` in `f64`, rounded to `f32`, then
/// the product and the sum in `f32`; `decay_factor` is an `f64`, as transformers'
/// Python float, so that `1.1` means what it says there. `decay_factor < 1` lowers EOS
/// instead; 1 does nothing.
///
/// Works as a [`Stage`] of a [`Chain`](crate::Chain) and as a [`LogitsProcessor`] for
/// [`Sampler::add_processor`](crate::Sampler::add_processor). Put it before the cuts:
/// after one it only moves the EOS ids that are still candidates.
///
/// - **Default**: off (leave the stage out).
/// - **Valid**: `decay_factor` finite and `> 0`; at least one EOS id.
/// - **Edge cases**: where transformers would leave a non-finite value the result is
///   defined here: a logit of 0 stays 0 (`0 * x`, even once `decay_factor^i` overflows,
///   where transformers gives NaN), a `-inf` (banned) EOS stays banned (transformers:
///   NaN), and a sum that overflows is `f32::MAX` (transformers: `+inf`, or a Python
///   `OverflowError` once `decay_factor^i` exceeds the `f64` range). An EOS id outside
///   the vocabulary gives [`Error::TokenOutOfRange`] when the [`Chain`](crate::Chain) is
///   built and at every sampling call as a processor.
/// - **Cost**: `O(number of EOS ids)` per step, no allocation.
///
/// # Example
/// ```
/// use logits::{Chain, ExponentialDecayLengthPenalty};
///
/// let stage = ExponentialDecayLengthPenalty::new(1, 2.0, [2])?;
/// let mut chain = Chain::builder(3).stage(stage).greedy().build()?;
/// chain.push_prompt(&[0])?;
/// let row = [0.0f32, 3.0, 1.0];
/// assert_eq!(chain.sample(&row)?.token, 1); // g = 0: EOS at 1.0
/// assert_eq!(chain.sample(&row)?.token, 1); // g = 1: still at the start
/// assert_eq!(chain.sample(&row)?.token, 1); // g = 2: 1 + 1 * (2 - 1) = 2.0
/// assert_eq!(chain.sample(&row)?.token, 2); // g = 3: 1 + 1 * (4 - 1) = 4.0
/// assert!(ExponentialDecayLengthPenalty::new(1, 0.0, [2]).is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ExponentialDecayLengthPenalty {
    start_index: usize,
    decay_factor: f64,
    eos: TokenList,
}

impl ExponentialDecayLengthPenalty {
    /// Raise the logits of `eos` by `decay_factor` per token generated after
    /// `start_index`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `decay_factor` unless it is finite and `> 0`,
    /// or `eos_token_id` for an empty `eos` list; [`Error::OutOfMemory`] when the list
    /// cannot be copied.
    pub fn new(
        start_index: usize,
        decay_factor: f64,
        eos: impl IntoIterator<Item = TokenId>,
    ) -> Result<Self, Error> {
        if !(decay_factor.is_finite() && decay_factor > 0.0) {
            return Err(Error::InvalidParameter {
                name: "decay_factor",
                value: decay_factor,
                expected: "a finite value > 0 (1 is off)",
            });
        }
        let eos = TokenList::new("eos_token_id", eos)?;
        if eos.is_empty() {
            return Err(Error::InvalidParameter {
                name: "eos_token_id",
                value: 0.0,
                expected: "at least one end-of-sequence token id",
            });
        }
        Ok(ExponentialDecayLengthPenalty {
            start_index,
            decay_factor,
            eos,
        })
    }

    /// The number of generated tokens after which the penalty starts.
    pub fn start_index(&self) -> usize {
        self.start_index
    }

    /// The factor per token.
    pub fn decay_factor(&self) -> f64 {
        self.decay_factor
    }

    /// `decay_factor^i - 1` rounded to `f32` for the step after `history`, or `None`
    /// before the penalty starts.
    fn multiplier(&self, history: &History<'_>) -> Option<f32> {
        let g = history.generated().len();
        let i = g.checked_sub(self.start_index).filter(|&i| i > 0)?;
        Some((self.decay_factor.powf(i as f64) - 1.0) as f32)
    }
}

/// The penalised EOS logit: `l + |l| * m` in `f32`, with 0 and `-inf` kept and an
/// overflow saturated at `f32::MAX`.
fn penalize(l: f32, m: f32) -> f32 {
    if l == 0.0 || l == f32::NEG_INFINITY {
        return l;
    }
    let x = l + l.abs() * m;
    if x == f32::INFINITY {
        f32::MAX
    } else {
        x
    }
}

impl Stage for ExponentialDecayLengthPenalty {
    fn name(&self) -> &'static str {
        "exponential_decay_length_penalty"
    }

    /// # Errors
    /// [`Error::TokenOutOfRange`] for an id `>= vocab_size`.
    fn check_vocab(&self, vocab_size: usize) -> Result<(), Error> {
        self.eos.check(vocab_size)
    }

    fn apply(&mut self, c: &mut Candidates, ctx: &StageContext<'_>) -> Result<(), Error> {
        if c.is_dense() {
            self.eos.check(c.len())?;
        }
        let Some(m) = self.multiplier(&ctx.history) else {
            return Ok(());
        };
        for &id in self.eos.ids() {
            if let Some(l) = c.logit_of_mut(id) {
                *l = penalize(*l, m);
            }
        }
        Ok(())
    }
}

impl LogitsProcessor for ExponentialDecayLengthPenalty {
    fn process(&mut self, logits: &mut [f32], history: &History<'_>) -> Result<(), Error> {
        self.eos.check(logits.len())?;
        let Some(m) = self.multiplier(history) else {
            return Ok(());
        };
        for &id in self.eos.ids() {
            let l = &mut logits[id as usize];
            *l = penalize(*l, m);
        }
        Ok(())
    }
}
