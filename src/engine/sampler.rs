//! [`Sampler`]: one sequence's sampling state, in the documented order.

use crate::engine::{End, Engine, Plan};
use crate::error::Error;
use crate::params::SamplingParams;
use crate::processor::{LogitsProcessor, ProcessorStage};
use crate::rng::DrawRng;
use crate::sequence_sampler::BanMask;

/// Samples the tokens of one sequence.
///
/// A `Sampler` owns validated [`SamplingParams`], the vocabulary size, the sequence's
/// token history (for the penalties, and to number the draws) and the scratch buffers
/// every step reuses. Build one per sequence; reuse it for every token.
///
/// Each call to [`sample`](Self::sample) runs the pipeline in its documented order
/// (adjustments, temperature, softmax, top-k, top-p, min-p, draw), appends the drawn token
/// to the history and returns a [`Sample`](crate::Sample). Draw number `n` of a sequence
/// uses the uniform keyed by `(seed, n)` where `n` counts the generated tokens in the
/// history, so the result depends on nothing but the seed, the parameters, the history
/// and the logits.
///
/// # Example
/// ```
/// use logits::{Sampler, SamplingParams};
///
/// let params = SamplingParams::builder().temperature(0.6).top_k(20).top_p(0.95).seed(7).build()?;
/// let mut sampler = Sampler::new(params, 5)?;
/// sampler.push_prompt(&[1, 2])?;
/// let out = sampler.sample(&[22.38f32, 20.88, 20.62, 19.88, 19.50])?;
/// assert!(out.token < 5);
/// assert_eq!(sampler.history().generated(), &[out.token]);
/// # Ok::<(), logits::Error>(())
/// ```
///
/// # Serving
/// A `Sampler` is `Clone`: a clone owns its history, its processors' state and its
/// buffers (nothing is shared). [`fork`](Self::fork) clones with a derived seed, for `n`
/// samples of one prompt; [`set_params`](Self::set_params) starts a new request on a
/// warm sampler; [`sample_banned`](Self::sample_banned) bans a few tokens for one step
/// without building a [`TokenMask`](crate::TokenMask).
#[derive(Clone, Debug)]
pub struct Sampler {
    pub(crate) engine: Engine,
    bans: BanMask,
}

crate::sequence_sampler::sequence_methods!(Sampler);

impl Sampler {
    /// A sampler for a vocabulary of `vocab_size` tokens.
    ///
    /// Rows may be longer than the vocabulary (models pad their logits: Qwen3 has 151,669
    /// tokens and 151,936 logits); entries past `vocab_size` are never read, so a padding
    /// id is never returned.
    ///
    /// # Errors
    /// [`Error::EmptyVocabulary`] when `vocab_size == 0`; [`Error::InvalidParameter`]
    /// naming `vocab_size` beyond [`MAX_VOCAB_SIZE`](crate::MAX_VOCAB_SIZE);
    /// [`Error::OutOfMemory`] when the buffers for `vocab_size` tokens cannot be
    /// allocated; [`Error::TokenOutOfRange`] for a logit-bias id `>= vocab_size`.
    pub fn new(params: SamplingParams, vocab_size: usize) -> Result<Self, Error> {
        let end = if params.is_greedy() {
            End::Greedy
        } else {
            End::Draw
        };
        let plan = Plan {
            params,
            stages: Vec::new(),
            lead: 0,
            pre: 0,
            group: 0,
            end,
            draw_temperature: None,
        };
        Ok(Sampler {
            engine: Engine::new(plan, vocab_size)?,
            bans: BanMask::default(),
        })
    }

    /// Sample `i` of `n` samples of one prompt: a clone (history, processors, buffers)
    /// whose draws use the seed [`DrawRng::fork_seed`]`(seed, i)`. Fork 0 keeps the
    /// seed, so sample 0 draws exactly what this sampler would, whatever `n`; forks
    /// `1..n` draw independently of it and of each other, and each is reproducible from
    /// `(seed, i)` alone. Fork after the prompt is pushed to share it; the forks' later
    /// histories are their own.
    ///
    /// # Example
    /// ```
    /// use logits::{Sampler, SamplingParams};
    ///
    /// let mut base = Sampler::new(SamplingParams::builder().seed(3).build()?, 4)?;
    /// base.push_prompt(&[1, 2])?;
    /// let row = [0.5f32, 0.4, 0.3, 0.2];
    /// // Four samples (best-of, parallel sampling): sample 0 is the un-forked draw.
    /// let mut forks: Vec<Sampler> = (0..4).map(|i| base.fork(i)).collect();
    /// let first = forks[0].sample(&row)?.token;
    /// assert_eq!(first, base.sample(&row)?.token);
    /// assert_eq!(forks[1].params().seed(), logits::DrawRng::fork_seed(3, 1));
    /// assert_eq!(forks[1].history().prompt(), &[1, 2]);
    /// # Ok::<(), logits::Error>(())
    /// ```
    #[must_use]
    pub fn fork(&self, i: u64) -> Self {
        let mut s = self.clone();
        s.engine
            .set_seed(DrawRng::fork_seed(self.params().seed(), i));
        s
    }

    /// Starts a new request on this sampler: `params` replace the parameters, the
    /// history is cleared (prompt and generated tokens), and the processors are kept
    /// and [`reset`](crate::Stage::reset). The result is that of
    /// [`Sampler::new`]`(params, vocab_size)` with the same processors added, token for
    /// token; the buffers stay, so nothing is allocated for the same vocabulary (only a
    /// longer logit-bias list or penalty window than before grows the patch list).
    ///
    /// # Example
    /// ```
    /// use logits::{Sampler, SamplingParams};
    ///
    /// let mut sampler = Sampler::new(SamplingParams::greedy(), 3)?;
    /// sampler.push_prompt(&[0])?;
    /// sampler.sample(&[0.0f32, 1.0, 0.0])?;
    /// // The next request, on the warm sampler.
    /// sampler.set_params(SamplingParams::builder().seed(11).top_k(2).build()?)?;
    /// assert!(sampler.history().tokens().is_empty());
    /// assert_eq!(sampler.params().seed(), 11);
    /// // A bias on a token outside the vocabulary is refused, and nothing changes.
    /// let bad = SamplingParams::builder().logit_bias(3, 1.0).build()?;
    /// assert!(sampler.set_params(bad).is_err());
    /// assert_eq!(sampler.params().seed(), 11);
    /// # Ok::<(), logits::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Sampler::new`] for the parameters: [`Error::TokenOutOfRange`] for a
    /// logit-bias id `>= vocab_size`, [`Error::OutOfMemory`] when the patch list cannot
    /// grow. On error the sampler is unchanged (parameters, history, state).
    pub fn set_params(&mut self, params: SamplingParams) -> Result<(), Error> {
        let end = if params.is_greedy() {
            End::Greedy
        } else {
            End::Draw
        };
        self.engine.set_params(params, end)
    }

    /// The parameters.
    pub fn params(&self) -> &SamplingParams {
        self.engine.params()
    }

    /// Adds a user-defined processor, run after the built-in adjustments.
    pub fn add_processor(&mut self, processor: Box<dyn LogitsProcessor>) {
        let stage = ProcessorStage::new(processor, self.engine.vocab_size());
        self.engine.push_whole_row_stage(Box::new(stage));
    }

    /// Forgets the history (prompt and generated tokens); parameters and buffers stay.
    pub fn reset(&mut self) {
        self.engine.reset();
    }
}
