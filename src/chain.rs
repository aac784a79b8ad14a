//! [`Chain`]: an explicit, user-ordered sequence of stages ending in one draw.

use crate::adjust;
use crate::candidates::Candidates;
use crate::element::Logit;
use crate::error::Error;
use crate::history::{History, Sequence};
use crate::logprobs;
use crate::mask::TokenMask;
use crate::params::MAX_LOGPROBS;
use crate::rng::DrawRng;
use crate::sample::Sample;
use crate::TokenId;

/// What a [`Stage`] may read besides the candidates.
#[derive(Clone, Copy, Debug)]
pub struct StageContext<'a> {
    /// The sequence's tokens so far.
    pub history: History<'a>,
    /// The chain's seed.
    pub seed: u64,
    /// The index of the draw about to be made (number of generated tokens).
    pub step: u64,
}

impl StageContext<'_> {
    /// A uniform in `[0, 1)` for a stage that needs randomness of its own (XTC's coin, for
    /// example), keyed by `(seed, step, salt)`. It never coincides with the draw's uniform
    /// (the draw uses stream 0; stage uniforms use stream `salt + 1`), so adding such a
    /// stage does not change which uniform the draw sees.
    pub fn uniform(&self, salt: u64) -> f64 {
        DrawRng::with_stream(self.seed, salt.wrapping_add(1)).uniform(self.step)
    }
}

/// One step of a [`Chain`]: an adjustment, a temperature, a cut, or anything else that
/// works on the [`Candidates`].
///
/// Stages take `&mut self` so that stateful samplers (mirostat's running `mu`) can live
/// here; [`Stage::observe`] tells them which token was drawn.
pub trait Stage: Send + std::fmt::Debug {
    /// A short name for messages and `Debug` output.
    fn name(&self) -> &'static str;

    /// Works on the candidates.
    ///
    /// # Errors
    /// Any [`Error`]; the chain returns it unchanged and draws nothing.
    fn apply(&mut self, candidates: &mut Candidates, ctx: &StageContext<'_>) -> Result<(), Error>;

    /// Called after every draw with the drawn token and its final logprob.
    fn observe(&mut self, _token: TokenId, _logprob: f32) {}

    /// Called by [`Chain::reset`].
    fn reset(&mut self) {}
}

/// How a chain ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Draw,
    Greedy,
}

/// A sampling pipeline in an order the user chooses.
///
/// The default [`Sampler`](crate::Sampler) applies the stages in the documented order
/// and is the fast path. A `Chain` runs any sequence of [`Stage`]s, for example
/// llama.cpp's default, where temperature comes after the cuts, and ends in exactly one
/// draw (or greedy pick), which the builder checks. Every stage works on the same
/// [`Candidates`] with the same arithmetic as the `Sampler`, so a chain built in the
/// default order samples exactly the same tokens.
///
/// # Example
/// ```
/// use logits::{Chain, Temperature, TopK, TopP};
///
/// // llama.cpp's order: cut first, temperature last.
/// let mut chain = Chain::builder(5)
///     .stage(TopK::new(3)?)
///     .stage(TopP::new(0.95)?)
///     .stage(Temperature::new(0.8)?)
///     .draw()
///     .seed(1)
///     .build()?;
/// let out = chain.sample(&[3.0f32, 2.0, 1.0, 0.0, -1.0])?;
/// assert!(out.token < 3);
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Debug)]
pub struct Chain {
    stages: Vec<Box<dyn Stage>>,
    end: End,
    vocab_size: usize,
    seed: u64,
    logprobs: Option<usize>,
    rng: DrawRng,
    seq: Sequence,
    cands: Candidates,
    weights: Vec<f64>,
}

/// Builds a [`Chain`]; see [`Chain::builder`].
#[derive(Debug)]
#[must_use]
pub struct ChainBuilder {
    stages: Vec<Box<dyn Stage>>,
    ends: usize,
    end: Option<End>,
    stage_after_end: bool,
    vocab_size: usize,
    seed: u64,
    logprobs: Option<usize>,
}

impl Chain {
    /// A builder for a chain over a vocabulary of `vocab_size` tokens.
    pub fn builder(vocab_size: usize) -> ChainBuilder {
        ChainBuilder {
            stages: Vec::new(),
            ends: 0,
            end: None,
            stage_after_end: false,
            vocab_size,
            seed: 0,
            logprobs: None,
        }
    }

    /// The stages' names, in order, followed by `"draw"` or `"greedy"`.
    pub fn stage_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        let end = match self.end {
            End::Draw => "draw",
            End::Greedy => "greedy",
        };
        self.stages
            .iter()
            .map(|s| s.name())
            .chain(std::iter::once(end))
    }

    /// Appends prompt tokens (before any generated token).
    ///
    /// # Errors
    /// As [`Sampler::push_prompt`](crate::Sampler::push_prompt).
    pub fn push_prompt(&mut self, tokens: &[TokenId]) -> Result<(), Error> {
        self.seq.push_prompt(tokens, self.vocab_size)
    }

    /// Records a generated token that the chain did not draw.
    ///
    /// # Errors
    /// [`Error::TokenOutOfRange`] for an id `>= vocab_size`.
    pub fn accept(&mut self, token: TokenId) -> Result<(), Error> {
        self.seq.accept(token, self.vocab_size)
    }

    /// The sequence's tokens so far.
    pub fn history(&self) -> History<'_> {
        self.seq.view()
    }

    /// Reserves room for `additional` more history tokens, so that no later step
    /// allocates.
    pub fn reserve(&mut self, additional: usize) {
        self.seq.reserve(additional);
    }

    /// Forgets the history and resets every stateful stage.
    pub fn reset(&mut self) {
        self.seq.reset();
        self.stages.iter_mut().for_each(|s| s.reset());
    }

    /// Samples the next token and appends it to the history.
    ///
    /// # Errors
    /// As [`Sampler::sample`](crate::Sampler::sample), plus whatever a stage returns.
    pub fn sample<T: Logit>(&mut self, logits: &[T]) -> Result<Sample, Error> {
        self.sample_impl(logits, None)
    }

    /// Like [`sample`](Self::sample), with a grammar mask applied before the first stage.
    ///
    /// # Errors
    /// As [`sample`](Self::sample), and [`Error::LengthMismatch`] for a mask of another
    /// size.
    pub fn sample_masked<T: Logit>(
        &mut self,
        logits: &[T],
        mask: &TokenMask,
    ) -> Result<Sample, Error> {
        self.sample_impl(logits, Some(mask))
    }

    fn sample_impl<T: Logit>(
        &mut self,
        row: &[T],
        mask: Option<&TokenMask>,
    ) -> Result<Sample, Error> {
        let row = adjust::check_input(self.vocab_size, row, mask)?;
        self.cands.reset_from(row.iter().map(|x| x.to_f32()));
        let raw_max = adjust::recheck(self.cands.logits())?;
        if let Some(mask) = mask {
            mask.apply(self.cands.logits_mut())?;
        }
        let ctx = StageContext {
            history: self.seq.view(),
            seed: self.seed,
            step: self.seq.step(),
        };
        for stage in &mut self.stages {
            stage.apply(&mut self.cands, &ctx)?;
        }
        adjust::recheck(self.cands.logits())?;
        self.cands.sort();
        if self.cands.is_empty() {
            return Err(Error::NoCandidates);
        }
        let mut out = match self.end {
            End::Greedy => Sample::new(self.cands.ids()[0], 0.0),
            End::Draw => {
                let total = self.cands.weights(&mut self.weights);
                let u = self.rng.uniform(ctx.step);
                let i = crate::draw::inverse_cdf(&self.weights, total, u);
                Sample::new(self.cands.ids()[i], (self.weights[i] / total).ln() as f32)
            }
        };
        if let Some(n_alt) = self.logprobs {
            let (cands, weights, end) = (&self.cands, &self.weights, self.end);
            let total: f64 = weights.iter().sum();
            logprobs::fill(row, raw_max, n_alt, &mut out, |id| {
                match cands.ids().iter().position(|&c| c == id) {
                    None => f32::NEG_INFINITY,
                    Some(0) if end == End::Greedy => 0.0,
                    Some(_) if end == End::Greedy => f32::NEG_INFINITY,
                    Some(i) => (weights[i] / total).ln() as f32,
                }
            });
        }
        for stage in &mut self.stages {
            stage.observe(out.token, out.logprob);
        }
        self.seq.push_drawn(out.token);
        Ok(out)
    }
}

impl ChainBuilder {
    /// Appends a stage.
    pub fn stage(mut self, stage: impl Stage + 'static) -> Self {
        self.push(Box::new(stage));
        self
    }

    /// Appends a boxed stage.
    pub fn boxed_stage(mut self, stage: Box<dyn Stage>) -> Self {
        self.push(stage);
        self
    }

    fn push(&mut self, stage: Box<dyn Stage>) {
        if self.end.is_some() {
            self.stage_after_end = true;
        }
        self.stages.push(stage);
    }

    /// Ends the chain with a seeded draw (inverse CDF, one uniform per draw).
    pub fn draw(mut self) -> Self {
        self.ends += 1;
        self.end = Some(End::Draw);
        self
    }

    /// Ends the chain with a greedy pick of the largest logit (ties to the lower id).
    pub fn greedy(mut self) -> Self {
        self.ends += 1;
        self.end = Some(End::Greedy);
        self
    }

    /// Seed of the draws.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Report logprobs with `n` alternatives (`n <= 20`).
    pub fn logprobs(mut self, n: usize) -> Self {
        self.logprobs = Some(n);
        self
    }

    /// Checks the chain: exactly one draw or greedy end, after every stage.
    ///
    /// # Errors
    /// [`Error::InvalidChain`] when the chain has no end, more than one, or a stage after
    /// it; [`Error::EmptyVocabulary`] for a zero vocabulary;
    /// [`Error::InvalidParameter`] for more than 20 logprob alternatives.
    pub fn build(self) -> Result<Chain, Error> {
        if self.vocab_size == 0 {
            return Err(Error::EmptyVocabulary);
        }
        let end = match (self.ends, self.end) {
            (1, Some(end)) => end,
            (0, _) => return Err(Error::InvalidChain("the chain has no draw at the end")),
            _ => return Err(Error::InvalidChain("the chain has more than one draw")),
        };
        if self.stage_after_end {
            return Err(Error::InvalidChain("a stage comes after the draw"));
        }
        if let Some(n) = self.logprobs {
            if n > MAX_LOGPROBS {
                return Err(Error::InvalidParameter {
                    name: "logprobs",
                    value: n as f64,
                    expected: "at most 20 alternatives",
                });
            }
        }
        let mut cands = Candidates::new();
        cands.reset_from(std::iter::repeat_n(0.0, self.vocab_size));
        Ok(Chain {
            stages: self.stages,
            end,
            vocab_size: self.vocab_size,
            seed: self.seed,
            logprobs: self.logprobs,
            rng: DrawRng::new(self.seed),
            seq: Sequence::default(),
            cands,
            weights: Vec::with_capacity(self.vocab_size),
        })
    }
}
